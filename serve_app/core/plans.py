"""The cascade's plans, and what each is expected to cost.

A plan is an order of MAI's own stages (``cascade._Run``):

- ``sequential``: the paper's order. Both short answers; the small model reasons on a disagreement; the
  large model answers with the reasoning on a second disagreement.
- ``eager``: the small model's reasoning starts with stage 1 and is cancelled when stage 1 settles the
  question. The same answers as ``sequential`` by construction, more small-model work.
- ``reason-first``: no small short answer. The large short answer and the small model's reasoning start
  together; their agreement settles the question (route ``agree_reasoned``), else the large model
  answers with the reasoning (``transfer``). Changes answers: the ``agree_short`` exit is gone.
- ``full-transfer``: the paper's Full RT. Changes answers.
- ``small-only``, ``large-only``: one model's short answer (``SS``, ``LS``), the cascade's fallbacks
  behind it should it fail; ``small-reason-only``: the small model's reasoning, its answer read inline
  as the cascade reads it, no Stage 2 call (``R``). Each changes answers and is never verified: only a
  calibrated table may choose one for a class.

The expected cost of a plan, from a class's estimates (``PlanEstimates``): ``p1`` the share stage 1
settles, ``p2`` the share of the rest the reasoned answer settles, ``q`` the share reason-first's one
verification settles; ``S1`` stage 1's time (the slower of its two calls), ``SS`` and ``LS`` the small
and the large short call's, ``R`` the reasoning's, ``T`` the transfer's; ``LSt`` and ``Tt`` the large
model's tokens (prompt and completion) of its short and transfer calls.

``latency`` is the time until the answer, stages that start together overlapping (the right measure
when the engines have room); ``engine_time`` is the seconds of model calls a plan makes, overlapping or
not (the right measure when the engines are busy or share hardware, as the CPU default's do: there a
request waits for everyone's calls, and the time every plan adds is what sets it); ``large_tokens`` is
the large model's share (its GPU-seconds).

- sequential: latency S1 + (1 - p1) (R + (1 - p2) T); engine_time SS + LS + (1 - p1) (R + (1 - p2) T);
  large_tokens LSt + (1 - p1)(1 - p2) Tt.
- eager: latency p1 S1 + (1 - p1) (max(S1, R) + (1 - p2) T); engine_time sequential's + p1 min(S1, R)
  (the reasoning cancelled when stage 1 settles); large_tokens sequential's.
- reason-first: latency max(LS, R) + (1 - q) T; engine_time LS + R + (1 - q) T; large_tokens
  LSt + (1 - q) Tt.
- full-transfer: latency and engine_time R + T; large_tokens Tt.
- small-only: SS; large-only: LS, large_tokens LSt; small-reason-only: R (latency and engine_time
  alike; no large tokens for the small plans).

The times are means measured on this deployment with the plans it runs (on CPU the two engines share
the cores, on GPUs they do not): a stage's time includes whatever running stages together costs it.
Pure: no Ray, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from .routes import EARLY_EXITS, Route

Objective = Literal["latency", "engine_time", "large_tokens"]


class Plan(StrEnum):
    """An order of the cascade's stages, named apart from the policies (``options.Policy``): a plan
    runs inside the cascade and falls back on it, a policy is a baseline of its own."""

    SEQUENTIAL = "sequential"
    EAGER = "eager"
    REASON_FIRST = "reason-first"
    FULL_TRANSFER = "full-transfer"
    SMALL_ONLY = "small-only"
    LARGE_ONLY = "large-only"
    SMALL_REASON_ONLY = "small-reason-only"


PlanName = Plan


# Plans that give the paper's answers, whatever the traffic: always allowed.
ANSWER_IDENTICAL = (Plan.SEQUENTIAL, Plan.EAGER)
# One model answers alone: only a calibrated table (labels) may name one for a class, never audits.
SINGLE_MODEL = (Plan.SMALL_ONLY, Plan.LARGE_ONLY, Plan.SMALL_REASON_ONLY)
# Plans that run stage 1 (both short answers): the runs stage 1's settle rate ``p1`` is read from.
WITH_STAGE1 = (Plan.SEQUENTIAL, Plan.EAGER)

# The routes at which each plan stops before the large model reads the reasoning: what an audit bounds.
EARLY_EXITS_OF: dict[Plan, tuple[Route, ...]] = {
    Plan.SEQUENTIAL: EARLY_EXITS,
    Plan.EAGER: EARLY_EXITS,
    Plan.REASON_FIRST: (Route.AGREE_REASONED,),
    Plan.FULL_TRANSFER: (),
    Plan.SMALL_ONLY: (Route.SINGLE,),
    Plan.LARGE_ONLY: (Route.SINGLE,),
    Plan.SMALL_REASON_ONLY: (Route.SINGLE,),
}


@dataclass(frozen=True)
class PlanEstimates:
    """What a class's plans are expected to cost, as measured (None: not observed yet)."""

    requests: int = 0  # observations the estimates are read from
    stage1_runs: int = 0  # of them, runs with stage 1 (sequential, eager): p1's sample
    reason_first_runs: int = 0  # of them, reason-first runs: q's own sample
    p1: float | None = None  # share of stage-1 runs settled by stage 1
    p2: float | None = None  # share of reasoned runs (after a stage-1 disagreement) settled there
    q: float | None = None  # share of reason-first runs settled by their one verification
    stage1_s: float | None = None
    small_short_s: float | None = None
    large_short_s: float | None = None
    reasoning_s: float | None = None
    transfer_s: float | None = None
    large_short_tokens: float | None = None
    transfer_tokens: float | None = None


def _term(weight: float, value: float | None) -> float | None:
    """``weight * value``; an unmeasured value costs nothing where its weight is 0, else is unknown."""
    if weight == 0:
        return 0.0
    return None if value is None else weight * value


def _total(*terms: float | None) -> float | None:
    return None if any(term is None for term in terms) else sum(terms)  # type: ignore[arg-type]


def _max(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(a, b)


def expected_cost(plan: Plan, e: PlanEstimates, objective: Objective = "latency") -> float | None:
    """The plan's expected cost per request under ``objective`` (the table above); None when a
    quantity it needs has not been measured."""
    p1, p2, q = e.p1, e.p2, e.q
    if plan in SINGLE_MODEL:
        return _single_model(plan, e, objective)
    if objective == "engine_time":
        return _engine_time(plan, e)
    if objective == "large_tokens":
        if plan is Plan.FULL_TRANSFER:
            return e.transfer_tokens
        settled = q if plan is Plan.REASON_FIRST else _settled_before_transfer(p1, p2)
        if settled is None:
            return None
        return _total(e.large_short_tokens, _term(1 - settled, e.transfer_tokens))
    if plan is Plan.FULL_TRANSFER:
        return _total(e.reasoning_s, e.transfer_s)
    if plan is Plan.REASON_FIRST:
        if q is None:
            return None
        return _total(_max(e.large_short_s, e.reasoning_s), _term(1 - q, e.transfer_s))
    if p1 is None:
        return None
    escalated = _term(1 - p2, e.transfer_s) if p2 is not None else (None if p1 < 1 else 0.0)
    if plan is Plan.SEQUENTIAL:
        return _total(e.stage1_s, _term(1 - p1, _total(e.reasoning_s, escalated)))
    # eager: settled at stage 1 it took S1; else the reasoning ran beside stage 1
    return _total(_term(p1, e.stage1_s), _term(1 - p1, _total(_max(e.stage1_s, e.reasoning_s), escalated)))


def _single_model(plan: Plan, e: PlanEstimates, objective: Objective) -> float | None:
    if objective == "large_tokens":
        return e.large_short_tokens if plan is Plan.LARGE_ONLY else 0.0
    return {
        Plan.SMALL_ONLY: e.small_short_s,
        Plan.LARGE_ONLY: e.large_short_s,
        Plan.SMALL_REASON_ONLY: e.reasoning_s,
    }[plan]


def _engine_time(plan: Plan, e: PlanEstimates) -> float | None:
    """The seconds of model calls a plan makes, summed whether they ran side by side or not; an eager
    reasoning cancelled when stage 1 settles counts until then."""
    if plan is Plan.FULL_TRANSFER:
        return _total(e.reasoning_s, e.transfer_s)
    if plan is Plan.REASON_FIRST:
        if e.q is None:
            return None
        return _total(e.large_short_s, e.reasoning_s, _term(1 - e.q, e.transfer_s))
    p1, p2 = e.p1, e.p2
    if p1 is None:
        return None
    escalated = _term(1 - p2, e.transfer_s) if p2 is not None else (None if p1 < 1 else 0.0)
    rest = _term(1 - p1, _total(e.reasoning_s, escalated))
    stage1 = _total(e.small_short_s, e.large_short_s)
    if plan is Plan.SEQUENTIAL:
        return _total(stage1, rest)
    cancelled = _term(
        p1, None if e.stage1_s is None or e.reasoning_s is None else min(e.stage1_s, e.reasoning_s)
    )
    return _total(stage1, cancelled, rest)


def _settled_before_transfer(p1: float | None, p2: float | None) -> float | None:
    """The share sequential (and eager) settles without the transfer: p1 + (1 - p1) p2."""
    if p1 is None:
        return None
    if p1 == 1:
        return 1.0
    return None if p2 is None else p1 + (1 - p1) * p2
