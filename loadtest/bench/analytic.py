"""The emulated tier's inputs multiplied out, with no Serve and no run: what the paper's own tables
(TTFT, decode speed, completion tokens, route shares) imply for one request at a time, and so what
share of a request each model is busy with it (the autoscaling scenarios' expected replicas).
Route shares are inputs (Table 10), never results.
"""

from __future__ import annotations

from dataclasses import dataclass

from deployments import paper_profile

SMALL, LARGE = "2b", "8b"
IMAGE_TOKENS = 256  # the emulated engines' default (a 512x512 image)
QUESTION_TOKENS = 40  # a question and the prompt's instructions, about 30 words


@dataclass(frozen=True)
class PolicySeconds:
    """Expected seconds per request of each policy at batch 1 on one H100 per model."""

    cascade_sequential: float  # stage 1 one model after the other, as the paper's sequential bound
    cascade_parallel: float  # stage 1's two calls at once, as the Serve app runs them
    transfer: float  # Full RT: small reasoning, then the large model reads it
    large_reason: float


def call_seconds(model: str, prompt_tokens: float, completion_tokens: float) -> float:
    """One engine call alone: Table 3's TTFT for the prompt, then Table 4's decode speed."""
    return (
        paper_profile.ttft_ms(model, prompt_tokens) / 1000
        + completion_tokens / paper_profile.DECODE_TOKENS_PER_S[model]
    )


@dataclass(frozen=True)
class CallSeconds:
    """One engine call of each kind the cascade makes, alone on its engine."""

    simple_small: float
    simple_large: float
    reason_small: float
    transfer_large: float  # the transfer prompt holds the small model's reasoning: prefill, then Simple
    reason_large: float


def calls(dataset: str) -> CallSeconds:
    tokens = paper_profile.COMPLETION_TOKENS[dataset]
    prompt = IMAGE_TOKENS + QUESTION_TOKENS
    return CallSeconds(
        simple_small=call_seconds(SMALL, prompt, tokens[SMALL][0]),
        simple_large=call_seconds(LARGE, prompt, tokens[LARGE][0]),
        reason_small=call_seconds(SMALL, prompt, tokens[SMALL][2]),
        transfer_large=call_seconds(LARGE, prompt + tokens[SMALL][2], tokens[LARGE][0]),
        reason_large=call_seconds(LARGE, prompt, tokens[LARGE][2]),
    )


def policy_seconds(dataset: str) -> PolicySeconds:
    """Expected per-request seconds on ``dataset`` from Tables 3, 4, 5 and 10."""
    call = calls(dataset)
    agree_short, _agree_reasoned, transfer_share = paper_profile.ROUTE_SHARES[dataset]
    escalated = (1 - agree_short) * call.reason_small + transfer_share * call.transfer_large
    return PolicySeconds(
        cascade_sequential=call.simple_small + call.simple_large + escalated,
        cascade_parallel=max(call.simple_small, call.simple_large) + escalated,
        transfer=call.reason_small + call.transfer_large,
        large_reason=call.reason_large,
    )


def ongoing_share(dataset: str) -> dict[str, dict[str, float]]:
    """Per policy, the share of a request's time each model is busy with it (at batch 1, stage 1 in
    parallel): by Little's law, ``clients × share`` requests are ongoing at that model, which is what
    queue-depth autoscaling divides by its target."""
    call = calls(dataset)
    agree_short, _agree_reasoned, transfer_share = paper_profile.ROUTE_SHARES[dataset]
    request = policy_seconds(dataset).cascade_parallel
    small = call.simple_small + (1 - agree_short) * call.reason_small
    large = call.simple_large + transfer_share * call.transfer_large
    return {
        "cascade": {"small": round(small / request, 3), "large": round(large / request, 3)},
        "large-reason": {"small": 0.0, "large": 1.0},
    }
