"""How the stats holder scales with ingress replicas, in one process and on a virtual clock (no Ray):
8, 64 and 256 replicas record realistic traffic into real books (``AuditBook``, ``PlanBook``) and
report every interval to one holder; the holder's CPU per report and per interval, the bytes of a
report and of a reply, and what a ``GET /v1/mai/stats`` snapshot costs, before and after.

    python -m loadtest.stats_scale

- before: the holder as it was: every replica's whole books kept, ``AuditBook.merged`` of all of them
  and ``PlanBook.merged`` of the others on every report (``MergeAllHolder`` below, rebuilt from those
  merges), and both merged again per snapshot. A full interval of it at 64 or 256 replicas takes too
  long, so a sample of the reports is measured and the interval extrapolated (``sampled``).
- after: ``edge.stats_holder.AuditStats`` over the replicas' ``edge.stats_reporter.StatsReporter``:
  what changed since the last acknowledged report, merged into one view.

Steady state: before the measured intervals every replica's books hold full windows of every class
(1000 audits, 500 plan observations), recorded at times spread over the past at each class's rate,
and the holder has them (after: from each replica's full report, the cost of a holder restart,
measured too). Traffic: about 10 requests/s per replica (Poisson arrivals), 12 classes with Zipf
shares, every answered request an observation, early exits audited at rate 0.05. Replica i reports
at phase i/R of the 5 s interval. The holder's CPU is ``time.process_time`` around what the holder
actor does with a report: unpickle it, apply it, pickle the reply (what Ray would make it do); the
books' objects are frozen out of the garbage collector first (``gc.freeze``), since in the product
they live in the replicas' processes, not the holder's.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import json
import logging
import pickle
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.paths import RESULTS
from harness.provenance import provenance
from harness.results import write_result
from serve_app.core.audit import AuditBook, AuditSettings, alerts
from serve_app.core.plan_choice import AdaptiveSettings
from serve_app.core.plan_stats import Observation, PlanBook
from serve_app.core.routes import EARLY_EXITS
from serve_app.edge.stats_holder import AuditStats, stats_body
from serve_app.edge.stats_reporter import StatsReporter

from .bench.summary import spread

OUT = RESULTS / "stats-holder-scale.json"
CLASSES = [
    "yes_no",
    "choice",
    "number",
    "text",
    "yes_no/pope",
    "text/chartqa",
    "text/docvqa",
    "choice/mmmu",
    "number/chartqa",
    "text/textvqa",
    "yes_no/vqav2",
    "choice/scienceqa",
]
PLANS = [("sequential", 0.7), ("eager", 0.1), ("reason-first", 0.1), ("transfer", 0.1)]


@dataclass(frozen=True)
class Settings:
    replicas: tuple[int, ...] = (8, 64, 256)
    classes: int = 12
    requests_per_s: float = 10.0  # per replica
    audit_rate: float = 0.05  # of early exits
    audit_window: int = 1000
    plan_window: int = 500
    report_interval_s: float = 5.0
    intervals: int = 3  # measured per arm, after the windows are full: the repetitions
    before_reports: int = 8  # the reports of the before holder measured per interval, at most
    snapshots: int = 3  # GET /v1/mai/stats snapshots timed per arm
    seed: int = 0


# ------------------------------------------------------------------------------------------------
# Traffic


class Traffic:
    """Seeded requests of one replica: class (Zipf shares), plan, route, stage times, tokens."""

    def __init__(self, settings: Settings, seed: int):
        self.rng = random.Random(seed)
        weights = [1 / (rank + 1) for rank in range(settings.classes)]
        total = sum(weights)
        self.shares = [weight / total for weight in weights]
        self.cumulative = [sum(self.shares[: index + 1]) for index in range(settings.classes)]
        self.classes = CLASSES[: settings.classes]
        self.plan_cumulative = [sum(share for _, share in PLANS[: index + 1]) for index in range(len(PLANS))]

    def cls(self) -> str:
        index = bisect.bisect_left(self.cumulative, self.rng.random() * self.cumulative[-1])
        return self.classes[min(index, len(self.classes) - 1)]

    def observation(self, at: float) -> Observation:
        rng = self.rng
        plan = PLANS[bisect.bisect_left(self.plan_cumulative, rng.random())][0]
        if plan in ("sequential", "eager"):
            draw = rng.random()
            route = "agree_short" if draw < 0.5 else "agree_reasoned" if draw < 0.75 else "transfer"
        elif plan == "reason-first":
            route = "agree_reasoned" if rng.random() < 0.6 else "transfer"
        else:
            route = "transfer"
        staged = plan in ("sequential", "eager")
        reasoned = plan != "sequential" or route != "agree_short"
        transferred = route == "transfer"
        return Observation(
            at=at,
            plan=plan,
            route=route,
            stage1_s=rng.uniform(0.15, 0.6) if staged else None,
            large_short_s=rng.uniform(0.1, 0.5) if plan != "transfer" else None,
            reasoning_s=rng.uniform(0.8, 3.0) if reasoned else None,
            transfer_s=rng.uniform(0.3, 1.2) if transferred else None,
            large_short_tokens=rng.randint(300, 900) if plan != "transfer" else None,
            transfer_tokens=rng.randint(600, 2000) if transferred else None,
            small_short_s=rng.uniform(0.1, 0.4) if staged else None,
        )


@dataclass
class Replica:
    name: str
    audits: AuditBook
    plans: PlanBook
    reporter: StatsReporter
    traffic: Traffic
    clock: float = 0.0


def fleet(settings: Settings, count: int, start: float) -> list[Replica]:
    """``count`` replicas whose books hold full windows of every class, recorded before ``start``."""
    replicas = []
    for index in range(count):
        audits, plans = AuditBook(settings.audit_window), PlanBook(settings.plan_window)
        traffic = Traffic(settings, settings.seed * 100_003 + index)
        replica = Replica(f"replica-{index:03d}", audits, plans, StatsReporter(audits, plans), traffic, start)
        prefill(replica, settings, start)
        replicas.append(replica)
    return replicas


def prefill(replica: Replica, settings: Settings, start: float) -> None:
    """Full windows of every class, at the times the class's traffic would have put them."""
    traffic, rng = replica.traffic, replica.traffic.rng
    for cls, share in zip(traffic.classes, traffic.shares, strict=True):
        rate = settings.requests_per_s * share
        times = past_times(rng, start, rate, settings.plan_window)
        for at in times:
            observation = traffic.observation(at)
            replica.plans.record(cls, observation)
            replica.audits.record_request(cls, observation.route, 1200, observation.plan)
        audit_rate = rate * settings.audit_rate * 0.6  # early exits: about 60 % of requests
        for at in past_times(rng, start, audit_rate, settings.audit_window):
            route = rng.choice(EARLY_EXITS)
            replica.audits.record_audit(cls, route, rng.random() < 0.02, 1500, at)


def past_times(rng: random.Random, start: float, rate: float, count: int) -> list[float]:
    """``count`` Poisson arrival times at ``rate`` before ``start``, ascending."""
    times, at = [], start
    for _ in range(count):
        at -= rng.expovariate(rate)
        times.append(at)
    return times[::-1]


def serve_until(replica: Replica, settings: Settings, until: float) -> None:
    """The requests ``replica`` answers (and audits) up to ``until``."""
    traffic, rng = replica.traffic, replica.traffic.rng
    at = replica.clock
    while True:
        at += rng.expovariate(settings.requests_per_s)
        if at >= until:
            break
        cls = traffic.cls()
        observation = traffic.observation(at)
        replica.plans.record(cls, observation)
        replica.audits.record_request(cls, observation.route, 1200, observation.plan)
        if observation.route in EARLY_EXITS and rng.random() < settings.audit_rate:
            replica.audits.record_audit(cls, observation.route, rng.random() < 0.02, 1500, at)
    replica.clock = until


# ------------------------------------------------------------------------------------------------
# The holder before


class MergeAllHolder:
    """The holder before this change (its ``AuditStats.report`` and ``snapshot``): the latest whole
    books of each replica, all merged on every report and every snapshot."""

    def __init__(self, settings: AuditSettings, adaptive: AdaptiveSettings):
        self.settings, self.adaptive = settings, adaptive
        self.states: dict[str, dict[str, Any]] = {}
        self.plan_states: dict[str, Mapping[str, Any]] = {}
        self.alerting: set[str] = set()

    def report(self, replica: str, state: dict[str, Any], plans: Mapping[str, Any]) -> dict[str, Any]:
        self.states[replica] = state
        self.plan_states[replica] = plans
        audits = AuditBook.merged(self.states.values(), self.settings.window)
        snapshot = audits.snapshot(self.settings)
        self.alerting = {cls for cls, entry in snapshot["classes"].items() if entry["audit"]["alert"]}
        list(alerts(snapshot))
        others = [state for name, state in self.plan_states.items() if name != replica]
        return {
            "plans": PlanBook.merged(others, self.adaptive.window).state(),
            "exit_bounds": {cls: audits.exit_bounds(cls) for cls in audits.classes},
        }

    def snapshot(self) -> dict[str, Any]:
        audits = AuditBook.merged(self.states.values(), self.settings.window)
        plans = PlanBook.merged(self.plan_states.values(), self.adaptive.window)
        return stats_body(audits, plans, self.settings, self.adaptive)


# ------------------------------------------------------------------------------------------------
# Measuring


@dataclass
class Interval:
    """What one interval measured of one arm."""

    holder_s: list[float] = field(default_factory=list)  # holder CPU per report measured
    replica_s: list[float] = field(default_factory=list)  # the replica's CPU to build its report
    report_bytes: list[int] = field(default_factory=list)
    reply_bytes: list[int] = field(default_factory=list)


def timed(work: Callable[[], Any]) -> tuple[Any, float]:
    started = time.process_time()
    result = work()
    return result, time.process_time() - started


def after_exchange(holder: AuditStats, replica: Replica, interval: Interval) -> None:
    report, built_s = timed(replica.reporter.report)
    payload = pickle.dumps((replica.name, report))

    def hold() -> bytes:
        name, received = pickle.loads(payload)
        return pickle.dumps(holder.report(name, received))

    answer, holder_s = timed(hold)
    reply = pickle.loads(answer)
    if reply.get("resend"):
        raise RuntimeError("the holder asked for a resend in the steady state")
    replica.reporter.acknowledged(reply)
    interval.holder_s.append(holder_s)
    interval.replica_s.append(built_s)
    interval.report_bytes.append(len(payload))
    interval.reply_bytes.append(len(answer))


def before_exchange(holder: MergeAllHolder, replica: Replica, interval: Interval) -> None:
    (state, plans), built_s = timed(lambda: (replica.audits.state(), replica.plans.state()))
    payload = pickle.dumps((replica.name, state, plans))

    def hold() -> bytes:
        name, received, received_plans = pickle.loads(payload)
        return pickle.dumps(holder.report(name, received, received_plans))

    answer, holder_s = timed(hold)
    interval.holder_s.append(holder_s)
    interval.replica_s.append(built_s)
    interval.report_bytes.append(len(payload))
    interval.reply_bytes.append(len(answer))


def run_intervals(
    replicas: list[Replica],
    settings: Settings,
    start: float,
    exchange: Callable[[Replica, Interval], None],
    measured: Callable[[int, int], Iterable[int]],
    *,
    warm_up: bool,
) -> tuple[list[Interval], float]:
    """``settings.intervals`` intervals after ``start``: replica i reports at phase i/R of each, after
    serving up to then. First each replica serves up to its phase (and reports, ``warm_up``, untimed),
    so every measured interval is a whole one. ``measured(interval, R)``: the replicas whose reports
    are timed (the others serve and their books grow, but do not report). Returns the intervals and
    where the clock ended."""
    period, count = settings.report_interval_s, len(replicas)
    for index, replica in enumerate(replicas):
        serve_until(replica, settings, start + period * index / count)
        if warm_up:
            exchange(replica, Interval())
    intervals = []
    for number in range(1, settings.intervals + 1):
        interval = Interval()
        timed_ones = set(measured(number, count))
        for index, replica in enumerate(replicas):
            serve_until(replica, settings, start + period * (number + index / count))
            if index in timed_ones:
                exchange(replica, interval)
        intervals.append(interval)
    return intervals, start + period * settings.intervals


def summary(intervals: list[Interval], replicas: int, period: float, sampled: bool) -> dict[str, Any]:
    """Per interval: the median per report and the interval's CPU (summed, or, sampled, the mean of the
    reports measured times R); then median [min–max] over the intervals."""
    per_report = [statistics.median(interval.holder_s) for interval in intervals]
    per_interval = [statistics.fmean(interval.holder_s) * replicas for interval in intervals]
    if not sampled:
        per_interval = [sum(interval.holder_s) for interval in intervals]
    return {
        "sampled": sampled,
        "reports_measured_per_interval": len(intervals[0].holder_s),
        "cpu_per_report_s": spread(per_report, 6),
        "cpu_per_interval_s": spread(per_interval, 6),
        "interval_share": spread([seconds / period for seconds in per_interval], 6),
        "replica_cpu_per_report_s": spread([statistics.median(i.replica_s) for i in intervals], 6),
        "report_bytes": spread([statistics.median(i.report_bytes) for i in intervals], 0),
        "reply_bytes": spread([statistics.median(i.reply_bytes) for i in intervals], 0),
    }


def snapshot_cost(snapshot: Callable[[], Any], times: int) -> dict[str, float] | None:
    return spread([timed(snapshot)[1] for _ in range(times)], 6)


def exact_merge_matches(holder: AuditStats, replicas: list[Replica], settings: Settings) -> bool:
    """Whether the holder's body is the exact merge of the replicas' books (each reported last after
    its last request)."""
    ranked = sorted(replicas, key=lambda replica: holder.replicas[replica.name].rank)
    audits = AuditBook.merged([replica.audits.state() for replica in ranked], settings.audit_window)
    plans = PlanBook.merged([replica.plans.state() for replica in ranked], settings.plan_window)
    return holder.snapshot() == stats_body(audits, plans, holder.settings, holder.adaptive)


def measure_after(
    settings: Settings,
    replicas: list[Replica],
    audit: AuditSettings,
    adaptive: AdaptiveSettings,
    start: float,
) -> tuple[dict[str, Any], float]:
    """The holder after: every replica's first report is full (what a holder restart costs), then the
    steady state's intervals. Returns the figures and where the clock ended."""
    holder = AuditStats(audit, adaptive)
    full = Interval()
    for replica in replicas:
        after_exchange(holder, replica, full)
    gc.collect()
    gc.freeze()
    try:
        intervals, clock = run_intervals(
            replicas,
            settings,
            start,
            lambda r, i: after_exchange(holder, r, i),
            lambda n, c: range(c),
            warm_up=True,
        )
        after = summary(intervals, len(replicas), settings.report_interval_s, sampled=False)
        after["snapshot_cpu_s"] = snapshot_cost(holder.snapshot, settings.snapshots)
    finally:
        gc.unfreeze()
    after["full_report"] = {
        "cpu_s": spread(full.holder_s, 6),
        "bytes": spread(full.report_bytes, 0),
        "all_replicas_cpu_s": round(sum(full.holder_s), 4),
    }
    after["matches_exact_merge"] = exact_merge_matches(holder, replicas, settings)
    return after, clock


def measure_before(
    settings: Settings,
    replicas: list[Replica],
    audit: AuditSettings,
    adaptive: AdaptiveSettings,
    start: float,
) -> dict[str, Any]:
    """The holder before, holding every replica's latest whole books: a sample of each interval's
    reports timed (every report when there are no more replicas than ``before_reports``)."""
    old = MergeAllHolder(audit, adaptive)
    for replica in replicas:
        old.states[replica.name] = replica.audits.state()
        old.plan_states[replica.name] = replica.plans.state()
    count = len(replicas)
    sample = min(count, settings.before_reports)

    def measured(number: int, total: int) -> list[int]:
        step = total / sample
        return sorted({(int(k * step) + number) % total for k in range(sample)})

    gc.collect()
    gc.freeze()
    try:
        intervals, _ = run_intervals(
            replicas, settings, start, lambda r, i: before_exchange(old, r, i), measured, warm_up=False
        )
        before = summary(intervals, count, settings.report_interval_s, sampled=sample < count)
        before["snapshot_cpu_s"] = snapshot_cost(old.snapshot, settings.snapshots)
    finally:
        gc.unfreeze()
    return before


def measure(settings: Settings, count: int, log: Callable[[str], None]) -> dict[str, Any]:
    audit = AuditSettings(rate=settings.audit_rate, window=settings.audit_window)
    adaptive = AdaptiveSettings(mode="learn", window=settings.plan_window)
    start = 1_000_000.0
    replicas = fleet(settings, count, start)
    log(f"{count} replicas: books full")
    after, clock = measure_after(settings, replicas, audit, adaptive, start)
    gc.collect()
    log(f"{count} replicas: after, CPU per interval {json.dumps(after['cpu_per_interval_s'])}")
    before = measure_before(settings, replicas, audit, adaptive, clock)
    gc.collect()
    log(f"{count} replicas: before, CPU per interval {json.dumps(before['cpu_per_interval_s'])}")
    ratios = {
        key: round(before[key]["median"] / after[key]["median"], 1)
        for key in ("cpu_per_report_s", "cpu_per_interval_s", "report_bytes", "reply_bytes", "snapshot_cpu_s")
        if after[key]["median"]
    }
    return {"before": before, "after": after, "before_over_after": ratios}


def main(argv: list[str] | None = None) -> int:
    logging.getLogger("ray.serve").setLevel(logging.ERROR)  # the holders' alert lines, if any
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.stats_scale", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--replicas", default="8,64,256", help="replica counts, comma-separated")
    parser.add_argument("--intervals", type=int, default=Settings.intervals)
    parser.add_argument("--before-reports", type=int, default=Settings.before_reports)
    parser.add_argument("--seed", type=int, default=Settings.seed)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    settings = Settings(
        replicas=tuple(int(part) for part in args.replicas.split(",")),
        intervals=args.intervals,
        before_reports=args.before_reports,
        seed=args.seed,
    )
    started = time.time()
    runs = {}
    for count in settings.replicas:
        runs[str(count)] = measure(settings, count, lambda line: print(line, file=sys.stderr, flush=True))
    result = {
        "settings": {
            "replicas": list(settings.replicas),
            "classes": settings.classes,
            "class_shares": "Zipf: class k of 12 has share (1/k) / H(12)",
            "requests_per_s_per_replica": settings.requests_per_s,
            "audit_rate": settings.audit_rate,
            "audit_window": settings.audit_window,
            "plan_window": settings.plan_window,
            "report_interval_s": settings.report_interval_s,
            "intervals": settings.intervals,
            "before_reports_per_interval": settings.before_reports,
            "seed": settings.seed,
            "measures": "holder CPU (time.process_time) per report: unpickle the report, apply it, pickle "
            "the reply; bytes: len(pickle.dumps(...)) of the report and the reply; per interval: the sum "
            "over the R reports (sampled: the mean of the reports measured times R); median [min–max] "
            "over the measured intervals",
        },
        "runs": runs,
    }
    defaults = Settings()
    flags = [
        f"--{name.replace('_', '-')} {value}"
        for name, value, default in (
            ("replicas", args.replicas, ",".join(map(str, defaults.replicas))),
            ("intervals", args.intervals, defaults.intervals),
            ("before_reports", args.before_reports, defaults.before_reports),
            ("seed", args.seed, defaults.seed),
            ("out", args.out, OUT),
        )
        if value != default
    ]
    command = " ".join(["python -m loadtest.stats_scale", *flags])
    write_result(args.out, result, provenance(command, started=started))
    print(json.dumps({count: run["before_over_after"] for count, run in runs.items()}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
