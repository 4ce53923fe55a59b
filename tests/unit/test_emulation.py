"""The emulated engine's model: the paper's numbers, consistent scripts, token draws, batching."""

import math
from collections import Counter

import pytest

from deployments import paper_profile
from deployments.affinity import ModelCall
from deployments.emulated_script import (
    call_script,
    completion_tokens,
    estimate_prompt_tokens,
    per_token_s,
    reply_logprobs,
    reply_pieces,
    reply_text,
    route_of,
    scripted_answer,
    scripted_confidence,
)
from deployments.settings import EmulationSettings
from serve_app.core.answers import ANSWER_KINDS, extract_answer
from serve_app.core.contracts import TokenLogprob
from serve_app.core.verification import agree, answer_confidence


def test_ttft_interpolates_table_3():
    assert paper_profile.ttft_ms("8b", 128) == 33.76
    assert paper_profile.ttft_ms("8b", 1536) == 115.31
    assert math.isclose(paper_profile.ttft_ms("8b", 320), (36.25 + 36.74) / 2)
    assert math.isclose(paper_profile.ttft_ms("2b", (1088 + 1280) / 2), (45.96 + 46.97) / 2)
    assert paper_profile.ttft_ms("2b", 10) == 27.52
    slope = (115.31 - 102.65) / (1536 - 1280)
    assert math.isclose(paper_profile.ttft_ms("8b", 4096), 115.31 + slope * (4096 - 1536))
    assert paper_profile.ttft_ms("8b", 1000) > paper_profile.ttft_ms("2b", 1000)


def test_call_scripts():
    reasoning = ModelCall("abc123", "reason_small", "reasoning", "yes_no", 7)
    assert call_script(reasoning, str(reasoning)) == ("abc123", "reasoning", "yes_no")
    stage2 = ModelCall("chartqa-12", "stage2_small", "stage2", "number", 3)  # a client's x-request-id
    assert call_script(stage2) == ("chartqa-12", "stage2", "number")
    unknown = ModelCall("abc123", "short_small", "chat", "text", 7)
    assert call_script(unknown, "mai-abc123-short_small-chat-text-7") == (
        "mai-abc123-short_small-chat-text-7",
        "passthrough",
        "text",
    )
    # A call without a ModelCall is a passthrough, whatever its request id says.
    assert call_script(None, "mai-abc123-reason_small-reasoning-yes_no-7")[1] == "passthrough"
    assert call_script(None, "anything") == ("anything", "passthrough", "text")
    assert call_script(None)[1] == "passthrough"


@pytest.mark.parametrize("dataset", paper_profile.DATASETS)
def test_routes_follow_table_10(dataset):
    counts = Counter(route_of(f"request{i}", dataset, seed=0) for i in range(20000))
    shares = paper_profile.ROUTE_SHARES[dataset]
    for route, share in zip(("agree_short", "agree_reasoned", "transfer"), shares, strict=True):
        assert abs(counts[route] / 20000 - share) < 0.01


@pytest.mark.parametrize("route", ["agree_short", "agree_reasoned", "transfer"])
def test_scripted_answers_lead_the_cascade_to_its_route(route):
    """What the cascade's matcher concludes from the scripted answers is the scripted route."""
    for kind in ANSWER_KINDS:
        small_short, large_short = (
            scripted_answer(route, "small", "simple", kind),
            scripted_answer(route, "large", "simple", kind),
        )
        reasoned = scripted_answer(route, "small", "reasoning", kind)
        if agree(small_short, large_short, kind):
            reached = "agree_short"
        elif agree(reasoned, large_short, kind):
            reached = "agree_reasoned"
        else:
            reached = "transfer"
        assert reached == route, kind


def test_completion_tokens_center_on_table_5_and_respect_max_tokens():
    settings = EmulationSettings(profile="2b", dataset="chartqa")
    draws = [completion_tokens(settings, f"r{i}", "reasoning", None) for i in range(4000)]
    assert abs(sum(draws) / len(draws) - 256.3) / 256.3 < 0.03
    assert completion_tokens(settings, "r1", "reasoning", None) == completion_tokens(
        settings, "r1", "reasoning", None
    )
    assert completion_tokens(settings, "r1", "reasoning", 10) <= 10
    assert all(completion_tokens(settings, f"r{i}", "simple", None) >= 1 for i in range(100))
    flat = EmulationSettings(profile="8b", dataset="mmmu", token_spread=0)
    assert completion_tokens(flat, "x", "explain", None) == round(944.6)


def test_reply_text_parses_and_has_about_the_drawn_length():
    text = reply_text("C", "reasoning", 260)
    assert extract_answer(text) == "C"
    assert abs(estimate_prompt_tokens([{"role": "user", "content": text}], 0) - 260) < 10
    assert reply_text("A", "stage2", 3) == "A"
    assert extract_answer(reply_text("A", "simple", 1)) == "A"


def test_prompt_tokens_count_images():
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "x"}},
                {"type": "text", "text": "one two three four five six seven eight nine ten"},
            ],
        }
    ]
    assert estimate_prompt_tokens(messages, image_tokens=256) == 256 + 13


def test_batching_slows_each_token_by_the_configured_curve():
    settings = EmulationSettings(profile="8b", batch_slowdown=0.05)
    assert math.isclose(per_token_s(settings, 1), 1 / 47.26)
    assert math.isclose(per_token_s(settings, 21), 2 / 47.26)


def test_emulation_settings_validate():
    with pytest.raises(ValueError):
        EmulationSettings(profile="70b")
    with pytest.raises(ValueError):
        EmulationSettings(profile="2b", dataset="imagenet")


def test_scripted_confidences_make_wrong_agreements_less_sure():
    """The script, not the product: a share of agree_short requests is scripted as a wrong agreement whose
    Simple answers are drawn less confident; the logprobs spell the reply and give its answer that
    probability, read back with the server's own confidence function."""
    settings = EmulationSettings(profile="8b", wrong_agreement_share=0.2, confidence_separation=0.3)
    requests = [f"r{i}" for i in range(2000) if route_of(f"r{i}", "chartqa", 0) == "agree_short"]
    wrong = {r for r in requests if scripted_confidence(settings, r, "large", "simple", "agree_short") < 0.75}
    assert 0.1 < len(wrong) / len(requests) < 0.3
    right = [
        scripted_confidence(settings, r, "large", "simple", "agree_short") for r in requests if r not in wrong
    ]
    low = [scripted_confidence(settings, r, "large", "simple", "agree_short") for r in wrong]
    assert sum(right) / len(right) - sum(low) / len(low) > 0.2
    assert scripted_confidence(settings, "r1", "small", "simple", "agree_short") == scripted_confidence(
        settings, "r1", "small", "simple", "agree_short"
    )
    pieces = reply_pieces("A", "reasoning", 40)
    tokens = tuple(TokenLogprob(t["token"], t["logprob"]) for t in reply_logprobs(pieces, 0.37))
    assert math.isclose(answer_confidence("".join(pieces), tokens), 0.37)


async def test_batch_slots_go_to_lower_priority_values_first_and_equals_in_arrival_order():
    import asyncio

    from deployments.priority_slots import PrioritySlots

    slots, order = PrioritySlots(1), []
    release = asyncio.Event()

    async def hold():
        async with slots.slot():
            await release.wait()

    async def take(name, priority):
        async with slots.slot(priority):
            order.append(name)

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0)
    waiters = [
        asyncio.create_task(take(name, priority))
        for name, priority in (("audit-1", 1), ("served-1", 0), ("audit-2", 1), ("served-2", 0))
    ]
    await asyncio.sleep(0)
    assert slots.held == 1 and slots.waiting == 4
    release.set()
    await asyncio.gather(holder, *waiters)
    assert order == ["served-1", "served-2", "audit-1", "audit-2"]
    assert (slots.held, slots.waiting) == (0, 0)


async def test_a_cancelled_waiter_leaves_the_queue_and_never_leaks_a_slot():
    import asyncio

    from deployments.priority_slots import PrioritySlots

    slots = PrioritySlots(2)
    release = asyncio.Event()

    async def hold(priority=0):
        async with slots.slot(priority):
            await release.wait()

    holders = [asyncio.create_task(hold()) for _ in range(2)]
    await asyncio.sleep(0)
    waiter = asyncio.create_task(hold(5))
    await asyncio.sleep(0)
    assert slots.waiting == 1
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert (slots.held, slots.waiting) == (2, 0)
    release.set()
    await asyncio.gather(*holders)
    assert slots.held == 0
    async with slots.slot():  # free again at once
        assert slots.held == 1
