"""The simulated fleet of the stats-holder benchmark (``loadtest/bench/scenarios/stats_scale.py``):
ingress replicas with real books (``AuditBook``, ``PlanBook``) and their reporters, the traffic they
record (about 10 requests/s each, 12 classes with Zipf shares, early exits audited at rate 0.05) on a
virtual clock, and the holder as it was before (``MergeAllHolder``: every replica's whole books, merged
on every report), rebuilt from ``AuditBook.merged`` and ``PlanBook.merged``."""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from serve_app.core.audit import AuditBook, AuditSettings
from serve_app.core.audit_alerts import alerts
from serve_app.core.decision import fleet_overload
from serve_app.core.plan_choice import AdaptiveSettings
from serve_app.core.plan_stats import Observation, PlanBook
from serve_app.core.plans import WITH_STAGE1, Plan
from serve_app.core.routes import EARLY_EXITS, Route
from serve_app.edge.stats_reporter import StatsReporter
from serve_app.fleet.stats_holder import stats_body

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
PLANS = [(Plan.SEQUENTIAL, 0.7), (Plan.EAGER, 0.1), (Plan.REASON_FIRST, 0.1), (Plan.FULL_TRANSFER, 0.1)]


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
        staged = plan in WITH_STAGE1
        if staged:
            draw = rng.random()
            route = (
                Route.AGREE_SHORT if draw < 0.5 else Route.AGREE_REASONED if draw < 0.75 else Route.TRANSFER
            )
        elif plan is Plan.REASON_FIRST:
            route = Route.AGREE_REASONED if rng.random() < 0.6 else Route.TRANSFER
        else:
            route = Route.TRANSFER
        reasoned = plan is not Plan.SEQUENTIAL or route is not Route.AGREE_SHORT
        transferred = route is Route.TRANSFER
        return Observation(
            at=at,
            plan=plan.value,  # plain strings, as a trace holds them (reports are pickled)
            route=route.value,
            stage1_s=rng.uniform(0.15, 0.6) if staged else None,
            large_short_s=rng.uniform(0.1, 0.5) if plan is not Plan.FULL_TRANSFER else None,
            reasoning_s=rng.uniform(0.8, 3.0) if reasoned else None,
            transfer_s=rng.uniform(0.3, 1.2) if transferred else None,
            large_short_tokens=rng.randint(300, 900) if plan is not Plan.FULL_TRANSFER else None,
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
    """The holder before this change (its ``StatsHolder.report`` and ``snapshot``): the latest whole
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
        return stats_body(audits, plans, self.settings, self.adaptive, overload=fleet_overload(False, []))


# ------------------------------------------------------------------------------------------------
# Measuring
