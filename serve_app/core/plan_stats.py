"""What the cascade observed of its plans, per question class: the last ``window`` requests' routes,
stage times and large-model tokens, and the estimates read from them (``plans.PlanEstimates``).

A sliding window is the decay: an estimate follows the traffic within one window. Every ingress
replica keeps its own book and reports the observations appended since its last acknowledged report;
the stats holder keeps the latest ``window`` observations of each class of all replicas, by time
(``MergedPlans``), with the counts and exact sums the estimates are read from, as it merges the audit
books. ``PlanBook.merged`` is the exact merge of whole books, the reference it is tested against. Pure.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import astuple, dataclass, fields
from typing import Any

from .plans import WITH_STAGE1, Plan, PlanEstimates
from .routes import COMPLETED, STAGE1_EXITS
from .trace import Trace
from .windows import Key, LatestWindow

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
    """The last ``window`` observations of each class, and how many were ever appended to each
    (the i-th of a window of n is observation ``appended - n + i + 1`` of its class)."""

    def __init__(self, window: int):
        self.window = window
        self.classes: dict[str, deque[Observation]] = {}
        self.appended: Counter = Counter()

    def record(self, cls: str, observation: Observation) -> None:
        self.classes.setdefault(cls, deque(maxlen=self.window)).append(observation)
        self.appended[cls] += 1

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


# The measured quantities an estimate is the mean of: PlanEstimates' field and Observation's alike.
MEANS = (
    "stage1_s",
    "small_short_s",
    "large_short_s",
    "reasoning_s",
    "transfer_s",
    "large_short_tokens",
    "transfer_tokens",
)
ROW = tuple(f.name for f in fields(Observation))  # an observation as a row: its fields in this order


def row_of(observation: Observation) -> tuple[Any, ...]:
    """``observation`` as plain data (``Observation(*row)`` gives it back)."""
    return tuple(getattr(observation, name) for name in ROW)


def _mean(values: Iterable[float | int | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.fmean(present) if present else None


def _share(hits: int, runs: int) -> float | None:
    return hits / runs if runs else None


def _tally(o: Observation) -> tuple[int, int, int, int, int]:
    """What ``o`` adds to ``rates``' counts: (staged, settled_early, settled_reasoned, first,
    settled_first)."""
    if o.plan in WITH_STAGE1:
        early = o.route in STAGE1_EXITS
        return 1, early, not early and o.route == "agree_reasoned", 0, 0
    if o.plan == Plan.REASON_FIRST:
        return 0, 0, 0, 1, o.route == "agree_reasoned"
    return 0, 0, 0, 0, 0


def rates(
    staged: int, settled_early: int, settled_reasoned: int, first: int, settled_first: int
) -> tuple[float | None, float | None, float | None]:
    """``p1``, ``p2`` and ``q`` from the counts of a class's observations: its stage-1 runs
    (sequential, eager), those stage 1 settled, those the reasoned answer settled after a stage-1
    disagreement, its reason-first runs and those their verification settled. The one place the
    rates and reason-first's prior are computed, whether the counts come from a book or from the
    stats holder's running counts."""
    p1 = _share(settled_early, staged)
    p2 = _share(settled_reasoned, staged - settled_early)
    prior = None if p1 is None else (1.0 if p1 == 1 else (None if p2 is None else p1 + (1 - p1) * p2))
    if prior is None:
        q = _share(settled_first, first)
    else:
        weight = REASON_FIRST_PRIOR_WEIGHT
        q = (settled_first + weight * prior) / (first + weight)
    return p1, p2, q


def estimates_of(observations: Iterable[Observation]) -> PlanEstimates:
    """The estimates of one class from its observations."""
    observations = list(observations)
    counts = [0, 0, 0, 0, 0]
    for o in observations:
        if o.plan in WITH_STAGE1 or o.plan == Plan.REASON_FIRST:
            for index, count in enumerate(_tally(o)):
                counts[index] += count
    staged, _, _, first, _ = counts
    p1, p2, q = rates(*counts)
    return PlanEstimates(
        requests=len(observations),
        stage1_runs=staged,
        reason_first_runs=first,
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


# Every finite float is an integer multiple of 2**-1074 (the least subnormal): as that integer, sums
# are exact, and one correctly rounded division gives what ``math.fsum`` gives (``_mean``'s sum).
_SCALE_BITS = 1074
_SCALE = 1 << _SCALE_BITS


def exact(value: float) -> int:
    """``value`` (finite) as an integer count of 2**-1074."""
    numerator, denominator = value.as_integer_ratio()
    return numerator << (_SCALE_BITS + 1 - denominator.bit_length())


def exact_mean(total: int, count: int) -> float:
    """The mean of ``count`` values whose ``exact`` sum is ``total``: bit for bit
    ``statistics.fmean`` of them (``fsum(values) / count``, the sum correctly rounded)."""
    return (total / _SCALE) / count


# What an observation adds to a window's running counts and sums (``_terms``): its ``_tally``, and per
# quantity of ``MEANS`` its ``exact`` value (None: not measured; a float: infinite or NaN, which no
# integer holds: the mean of a window holding one is read from the window itself).
_Terms = tuple[tuple[int, int, int, int, int], tuple[int | float | None, ...]]
_UNTALLIED = (0, 0, 0, 0, 0)


def _terms(o: Observation) -> _Terms:
    values: list[int | float | None] = []
    for name in MEANS:
        value = getattr(o, name)
        values.append(exact(value) if value is not None and math.isfinite(value) else value)
    tally = _tally(o) if o.plan in WITH_STAGE1 or o.plan == Plan.REASON_FIRST else _UNTALLIED
    return tally, tuple(values)


class _MergedPlanClass:
    """A class's latest observations of all replicas (each with its ``_terms``) and the counts and
    exact sums read from them."""

    def __init__(self, window: int):
        self.window: LatestWindow[tuple[Observation, _Terms]] = LatestWindow(window)
        self.counts = [0, 0, 0, 0, 0]  # rates' arguments
        self.totals = [0] * len(MEANS)  # per quantity, the ``exact`` sum of its finite values
        self.present = [0] * len(MEANS)  # per quantity, its values (finite or not)
        self.unbounded = [0] * len(MEANS)  # per quantity, its infinite or NaN values
        self.estimates: PlanEstimates | None = None  # read on demand, until the window changes

    def count(self, terms: _Terms, sign: int) -> None:
        """Add (``sign`` 1) or take out (-1) an observation's terms."""
        tally, values = terms
        if tally is not _UNTALLIED:
            for index, count in enumerate(tally):
                self.counts[index] += sign * count
        for index, value in enumerate(values):
            if value is None:
                continue
            self.present[index] += sign
            if type(value) is int:
                self.totals[index] += value if sign > 0 else -value
            else:
                self.unbounded[index] += sign

    def read(self) -> PlanEstimates:
        if self.estimates is None:
            staged, _, _, first, _ = self.counts
            p1, p2, q = rates(*self.counts)
            means: dict[str, float | None] = {}
            for index, name in enumerate(MEANS):
                if self.unbounded[index]:
                    means[name] = _mean(getattr(o, name) for o, _ in self.window)
                elif self.present[index]:
                    means[name] = exact_mean(self.totals[index], self.present[index])
                else:
                    means[name] = None
            self.estimates = PlanEstimates(
                requests=len(self.window),
                stage1_runs=staged,
                reason_first_runs=first,
                p1=p1,
                p2=p2,
                q=q,
                **means,
            )
        return self.estimates


class MergedPlans:
    """Every replica's plan observations as one book, kept up to date report by report (the stats
    holder's): per class the latest ``window`` observations of all replicas (``windows.LatestWindow``,
    by ``(at, rank, seq)``), and the counts and exact sums of what is in it, updated as an observation
    enters or leaves. Its estimates are ``PlanBook.merged``'s, to the bit, for the same reports."""

    def __init__(self, window: int):
        self.window = window
        self.classes: dict[str, _MergedPlanClass] = {}

    def add(self, cls: str, key: Key, observation: Observation) -> None:
        """One observation of a replica's window, at ``key`` ``(at, rank, seq)``."""
        entry = self.classes.get(cls)
        if entry is None:
            entry = self.classes[cls] = _MergedPlanClass(self.window)
        if not entry.window.takes(key):
            return
        terms = _terms(observation)
        _, evicted = entry.window.add(key, (observation, terms))
        entry.count(terms, 1)
        if evicted is not None:
            entry.count(evicted[1], -1)
        entry.estimates = None

    def estimates(self, cls: str) -> PlanEstimates:
        entry = self.classes.get(cls)
        return entry.read() if entry is not None else estimates_of(())
