"""What the cascade observed of its plans, per question class: the last ``window`` requests' routes,
stage times and large-model tokens, and the estimates read from them (``plans.PlanEstimates``).

A sliding window is the decay: an estimate follows the traffic within one window. Every ingress
replica keeps its own book and reports its ``state()``; the stats holder merges the replicas' books
(the latest ``window`` observations of each class, by time), as it merges the audit books. Pure.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass
from typing import Any

from .plans import Plan, PlanEstimates
from .routes import COMPLETED, STAGE1_EXITS
from .trace import Trace

# The weight, in requests, of reason-first's settle rate as derived from the sequential plans' rates
# (p1 + (1 - p1) p2: a question both short answers agree on is taken to agree after reasoning too),
# against reason-first's own runs: the derived rate is a prior its own runs soon outweigh.
REASON_FIRST_PRIOR_WEIGHT = 20


@dataclass(frozen=True)
class Observation:
    """One answered cascade request: its plan and route, and what its stages took."""

    at: float
    plan: str
    route: str
    stage1_s: float | None = None  # both short calls ran: the slower one
    large_short_s: float | None = None
    reasoning_s: float | None = None  # the reasoning, and its Stage 2 call if any
    transfer_s: float | None = None  # the transfer selector and the large model's call
    large_short_tokens: int | None = None  # prompt + completion
    transfer_tokens: int | None = None
    small_short_s: float | None = None


def observe(trace: Trace, at: float) -> Observation | None:
    """The observation of a finished cascade request; None for a degraded one (a model failed: what
    it took measures the failure, not the plan)."""
    route = trace.fallback.route if trace.fallback is not None else trace.route  # the route reached
    if trace.plan is None or route not in COMPLETED:
        return None
    ok = {stage.name: stage for stage in trace.stages if stage.ok}
    small, large = ok.get("short_small"), ok.get("short_large")
    reasoning = ok.get("reason_small")
    transfer = ok.get("transfer_large")
    stage2 = ok.get("stage2_small")
    selector_s = trace.transfer.latency_s if trace.transfer is not None else 0.0
    return Observation(
        at=at,
        plan=trace.plan,
        route=route,
        stage1_s=max(small.latency_s, large.latency_s) if small and large else None,
        large_short_s=large.latency_s if large else None,
        reasoning_s=reasoning.latency_s + (stage2.latency_s if stage2 else 0.0) if reasoning else None,
        transfer_s=transfer.latency_s + selector_s if transfer else None,
        large_short_tokens=large.prompt_tokens + large.completion_tokens if large else None,
        transfer_tokens=transfer.prompt_tokens + transfer.completion_tokens if transfer else None,
        small_short_s=small.latency_s if small else None,
    )


class PlanBook:
    """The last ``window`` observations of each class."""

    def __init__(self, window: int):
        self.window = window
        self.classes: dict[str, deque[Observation]] = {}

    def record(self, cls: str, observation: Observation) -> None:
        self.classes.setdefault(cls, deque(maxlen=self.window)).append(observation)

    def state(self) -> dict[str, list[list[Any]]]:
        return {cls: [list(astuple(o)) for o in observations] for cls, observations in self.classes.items()}

    @classmethod
    def merged(cls, states: Iterable[Mapping[str, list[list[Any]]]], window: int) -> PlanBook:
        """One book from several replicas' states: per class, the latest ``window`` observations."""
        book = cls(window)
        pooled: dict[str, list[Observation]] = {}
        for state in states:
            for name, rows in state.items():
                pooled.setdefault(name, []).extend(Observation(*row) for row in rows)
        for name, observations in pooled.items():
            book.classes[name] = deque(sorted(observations, key=lambda o: o.at), maxlen=window)
        return book

    def estimates(self, cls: str) -> PlanEstimates:
        return estimates_of(self.classes.get(cls, ()))


def _mean(values: Iterable[float | int | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.fmean(present) if present else None


def _share(hits: int, runs: int) -> float | None:
    return hits / runs if runs else None


def estimates_of(observations: Iterable[Observation]) -> PlanEstimates:
    """The estimates of one class from its observations."""
    observations = list(observations)
    staged = [o for o in observations if o.plan in (Plan.SEQUENTIAL, Plan.EAGER)]
    settled_early = sum(o.route in STAGE1_EXITS for o in staged)
    reasoned = [o for o in staged if o.route not in STAGE1_EXITS]
    p1 = _share(settled_early, len(staged))
    p2 = _share(sum(o.route == "agree_reasoned" for o in reasoned), len(reasoned))
    first = [o for o in observations if o.plan == Plan.REASON_FIRST]
    settled_first = sum(o.route == "agree_reasoned" for o in first)
    prior = None if p1 is None else (1.0 if p1 == 1 else (None if p2 is None else p1 + (1 - p1) * p2))
    if prior is None:
        q = _share(settled_first, len(first))
    else:
        weight = REASON_FIRST_PRIOR_WEIGHT
        q = (settled_first + weight * prior) / (len(first) + weight)
    return PlanEstimates(
        requests=len(observations),
        stage1_runs=len(staged),
        reason_first_runs=len(first),
        p1=p1,
        p2=p2,
        q=q,
        stage1_s=_mean(o.stage1_s for o in observations),
        small_short_s=_mean(o.small_short_s for o in observations),
        large_short_s=_mean(o.large_short_s for o in observations),
        reasoning_s=_mean(o.reasoning_s for o in observations),
        transfer_s=_mean(o.transfer_s for o in observations),
        large_short_tokens=_mean(o.large_short_tokens for o in observations),
        transfer_tokens=_mean(o.transfer_tokens for o in observations),
    )
