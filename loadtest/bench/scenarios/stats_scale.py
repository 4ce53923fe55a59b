"""stats_scale: how the stats holder scales with ingress replicas, in one process on a virtual clock:
8, 64 and 256 replicas record realistic traffic into real books (``AuditBook``, ``PlanBook``) and
report every interval to one holder; the holder's CPU per report and per interval, the bytes of a
report and of a reply, and what a ``GET /v1/mai/stats`` snapshot costs, before and after.

    python -m loadtest.bench --only stats_scale [--param replicas=8,64 --param intervals=1]

It needs no Ray: the runner runs it before it starts one, so that no Ray thread shares the process
whose CPU it times.

- before: the holder as it was: every replica's whole books kept, ``AuditBook.merged`` of all of them
  and ``PlanBook.merged`` of the others on every report (``MergeAllHolder`` in
  ``loadtest/stats_fleet.py``, rebuilt from those merges), and both merged again per snapshot. A full
  interval of it at 64 or 256 replicas takes too long, so a sample of the reports is measured and the
  interval extrapolated (``sampled``).
- after: ``fleet.stats_holder.StatsHolder`` over the replicas' ``edge.stats_reporter.StatsReporter``:
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

import gc
import json
import logging
import pickle
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from loadtest.stats_fleet import MergeAllHolder, Replica, Settings, fleet, serve_until
from serve_app.core.audit import AuditBook, AuditSettings
from serve_app.core.plan_choice import AdaptiveSettings
from serve_app.core.plan_stats import PlanBook
from serve_app.fleet.stats_holder import StatsHolder, stats_body

from ..cells import cell, percent_cell
from ..scenario import Bench, Scenario
from ..summary import spread


@dataclass(frozen=True)
class Parameters:
    replicas: tuple[int, ...] = Settings.replicas  # the fleet sizes, one run each
    intervals: int = Settings.intervals  # measured per arm, after the windows are full
    before_reports: int = Settings.before_reports  # the before holder's reports timed per interval
    seed: int = Settings.seed


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


def after_exchange(holder: StatsHolder, replica: Replica, interval: Interval) -> None:
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


def exact_merge_matches(holder: StatsHolder, replicas: list[Replica], settings: Settings) -> bool:
    """Whether the holder's body is the exact merge of the replicas' books (each reported last after
    its last request)."""
    ranked = sorted(replicas, key=lambda replica: holder.replicas[replica.name].rank)
    audits = AuditBook.merged([replica.audits.state() for replica in ranked], settings.audit_window)
    plans = PlanBook.merged([replica.plans.state() for replica in ranked], settings.plan_window)
    body = holder.snapshot()  # its overload view is the replicas' levels, not a merge: taken as it is
    return body == stats_body(audits, plans, holder.settings, holder.adaptive, overload=body["overload"])


def measure_after(
    settings: Settings,
    replicas: list[Replica],
    audit: AuditSettings,
    adaptive: AdaptiveSettings,
    start: float,
) -> tuple[dict[str, Any], float]:
    """The holder after: every replica's first report is full (what a holder restart costs), then the
    steady state's intervals. Returns the figures and where the clock ended."""
    holder = StatsHolder(audit, adaptive)
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


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """Each fleet size's before and after, with the settings they ran under."""
    logging.getLogger("ray.serve").setLevel(logging.ERROR)  # the holders' alert lines, if any
    settings = Settings(
        replicas=parameters.replicas,
        intervals=parameters.intervals,
        before_reports=parameters.before_reports,
        seed=parameters.seed,
    )
    runs = {}
    for count in settings.replicas:
        runs[str(count)] = measure(settings, count, lambda line: print(line, file=sys.stderr, flush=True))
    ratios = {count: run["before_over_after"] for count, run in runs.items()}
    print(f"before over after: {json.dumps(ratios)}", file=sys.stderr, flush=True)
    return {
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


def _scaled(spread: dict[str, float], factor: float) -> dict[str, float]:
    return {key: spread[key] * factor for key in ("median", "min", "max")}


def table(result: dict[str, Any]) -> list[str]:
    settings = result["settings"]
    lines = [
        f"One process, a virtual clock, no Ray: R ingress replicas record {settings['classes']} question "
        f"classes (Zipf shares) at about {settings['requests_per_s_per_replica']:g} requests/s each into "
        f"real books, early exits audited at rate {settings['audit_rate']:g}, windows of "
        f"{settings['audit_window']} audits and {settings['plan_window']} plan observations full from the "
        f"start, and each reports every {settings['report_interval_s']:g} s to one holder. Before: the "
        "holder that kept every replica's whole books and merged them all on every report and snapshot; "
        "after: the merged view kept up to date from reports of what changed. Holder CPU per report "
        "(unpickle it, apply it, pickle the reply) and per interval, median [min–max] over "
        f"{settings['intervals']} intervals; *sampled*: {settings['before_reports_per_interval']} reports "
        "of each interval timed, the interval extrapolated.",
        "",
        "| replicas | holder | CPU per report, ms | CPU per interval, s | share of the interval | "
        "report, KB | reply, KB | snapshot, ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for replicas, run in result["runs"].items():
        for arm in ("before", "after"):
            figures = run[arm]
            label = arm + (" (*sampled*)" if figures["sampled"] else "")
            report_kb, reply_kb = (figures[key]["median"] / 1000 for key in ("report_bytes", "reply_bytes"))
            lines.append(
                f"| {replicas} | {label} | {cell(_scaled(figures['cpu_per_report_s'], 1000), 2)} | "
                f"{cell(figures['cpu_per_interval_s'], 3)} | {percent_cell(figures['interval_share'])} | "
                f"{report_kb:.1f} | {reply_kb:.1f} | {cell(_scaled(figures['snapshot_cpu_s'], 1000), 2)} |"
            )
    restarts = ", ".join(
        f"{replicas} replicas {run['after']['full_report']['all_replicas_cpu_s']:g} s"
        for replicas, run in result["runs"].items()
    )
    exact = all(run["after"]["matches_exact_merge"] for run in result["runs"].values())
    lines += [
        "",
        "After a holder restart every replica reports its whole books once (about "
        f"{next(iter(result['runs'].values()))['after']['full_report']['bytes']['median'] / 1000:.0f} KB "
        f"each): holder CPU over all of them {restarts}. At the end of each run the holder's "
        f"`GET /v1/mai/stats` body {'equalled' if exact else 'differed from'} the exact merge of the "
        "replicas' books.",
    ]
    return lines


SCENARIO = Scenario(
    name="stats_scale",
    title="The stats holder with 8 to 256 ingress replicas (simulated)",
    result="stats-holder-scale.json",
    run=run,
    table=table,
    parameters=Parameters(),
    needs_ray=False,
)
