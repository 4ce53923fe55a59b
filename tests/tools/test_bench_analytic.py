"""The paper's tables multiplied out (loadtest/bench/analytic.py): the arithmetic the emulated tier's Serve
runs are set beside."""

import pytest

from deployments import paper_profile
from loadtest.bench.analytic import IMAGE_TOKENS, QUESTION_TOKENS, call_seconds, policy_seconds

PROMPT = IMAGE_TOKENS + QUESTION_TOKENS


def test_one_call_is_the_prefill_of_table_3_then_table_4s_decode_speed():
    assert call_seconds("8b", 128, 0) == pytest.approx(0.03376)
    assert call_seconds("2b", 128, 61.8) == pytest.approx(0.02752 + 1.0)


def test_a_request_that_always_agrees_costs_the_two_short_answers(monkeypatch):
    monkeypatch.setitem(paper_profile.ROUTE_SHARES, "chartqa", (1.0, 0.0, 0.0))
    small = call_seconds("2b", PROMPT, paper_profile.COMPLETION_TOKENS["chartqa"]["2b"][0])
    large = call_seconds("8b", PROMPT, paper_profile.COMPLETION_TOKENS["chartqa"]["8b"][0])
    seconds = policy_seconds("chartqa")
    assert seconds.cascade_sequential == pytest.approx(small + large)
    assert seconds.cascade_parallel == pytest.approx(max(small, large))


def test_escalation_adds_reasoning_for_every_disagreement_and_a_transfer_for_its_share(monkeypatch):
    def cascade(shares):
        monkeypatch.setitem(paper_profile.ROUTE_SHARES, "mmbench", shares)
        return policy_seconds("mmbench")

    nothing, everything = cascade((1.0, 0.0, 0.0)), cascade((0.0, 0.0, 1.0))
    # Every request escalated to a transfer costs stage 1 plus Full RT.
    assert everything.cascade_sequential - nothing.cascade_sequential == pytest.approx(everything.transfer)
    assert cascade((0.5, 0.0, 0.5)).cascade_sequential - nothing.cascade_sequential == pytest.approx(
        everything.transfer / 2
    )
    # Agreeing after reasoning costs the reasoning only.
    reasoned = cascade((0.0, 1.0, 0.0)).cascade_sequential - nothing.cascade_sequential
    assert 0 < reasoned < everything.transfer


def test_the_transfer_prefills_the_small_models_reasoning():
    seconds = policy_seconds("mmmu")
    tokens = paper_profile.COMPLETION_TOKENS["mmmu"]
    reason = call_seconds("2b", PROMPT, tokens["2b"][2])
    assert seconds.transfer - reason > call_seconds("8b", PROMPT, tokens["8b"][0])
