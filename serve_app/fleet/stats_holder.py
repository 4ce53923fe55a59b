"""The one view of the statistics across ingress replicas: a small deployment every replica reports to
(every ``audit.report_interval_s`` and before it answers ``GET /v1/mai/stats``) what changed since the
holder's last acknowledgement (serve_app/edge/stats_reporter.py). It keeps every replica's statistics
merged, up to date report by report: the counts summed, per class one window of all replicas' latest
audits and one of their latest plan observations (``MergedAudits``, ``MergedPlans``). A report costs
what it carries, a reply what the classes are: per class the plan estimates over all replicas'
observations and the audit's bounds, which is what a replica's plan controller reads.

For the same reports, its view is the exact merge of the replicas' whole books (``AuditBook.merged``,
``PlanBook.merged`` of their states in the order the replicas first reported): the same counts,
windows, estimates (to the bit), bounds, allowed and chosen plans. The windows are the latest ``window``
by time over all replicas, which needs only one merged window per class as long as each replica's
clock does not go back.

What a death loses: a replica's, what it counted since its last report (its earlier reports stay
here); the holder's, nothing for long: a replica it does not know gets ``{"resend": true}`` and reports
everything again at once, so every live replica's statistics are back within one interval (those of
replicas that died before the holder are lost with it).

Every report also says the replica's overload level; the body's ``overload`` is the highest level of
the replicas heard from within the last ``LIVE_INTERVALS`` intervals (by the holder's clock, at
receipt), so a replica that died or was scaled down leaves it.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ray import serve

from ..core.audit import AuditSettings, MergedAudits
from ..core.audit_alerts import alert_line
from ..core.decision import ClassSettings, Level, fleet_overload, tasks_summary
from ..core.plan_choice import AdaptiveSettings, allowed_plans, plan_summary, reference_plan
from ..core.plan_stats import MergedPlans, Observation
from ..core.plans import PlanEstimates
from ..core.trace import nested_tokens
from .purges import PurgeOrders

logger = logging.getLogger("ray.serve")
ESTIMATES = tuple(field.name for field in dataclasses.fields(PlanEstimates))  # a reply's, per class
# A replica counts in the body's overload level while its last report is at most this many
# ``report_interval_s`` old.
LIVE_INTERVALS = 3


class AuditView(Protocol):
    """What ``stats_body`` reads of the audit statistics: ``AuditBook`` or ``MergedAudits``."""

    @property
    def classes(self) -> Mapping[str, Any]: ...

    def snapshot(self, settings: AuditSettings) -> dict[str, Any]: ...

    def exit_bounds(self, cls: str) -> dict[str, float]: ...


class PlanView(Protocol):
    """What ``stats_body`` reads of the plan observations: ``PlanBook`` or ``MergedPlans``."""

    @property
    def classes(self) -> Mapping[str, Any]: ...

    def estimates(self, cls: str) -> PlanEstimates: ...


def stats_body(
    audits: AuditView,
    plans: PlanView,
    settings: AuditSettings,
    adaptive: AdaptiveSettings,
    *,
    overload: Mapping[str, Any],
    classes: ClassSettings | None = None,
) -> dict[str, Any]:
    """The ``GET /v1/mai/stats`` body: the audit statistics, per class its plans, ``overload``
    (``overload.fleet_overload``) and ``tasks``, how the clients' task tags make classes
    (``decision.tasks_summary``)."""
    body = audits.snapshot(settings)
    body["adaptive"] = {"mode": adaptive.mode, "objective": adaptive.objective, "window": adaptive.window}
    body["overload"] = dict(overload)
    counted = audits.classes
    body["tasks"] = tasks_summary(classes or ClassSettings(), counted, lambda cls: counted[cls].requests)
    for cls in sorted(set(plans.classes) | set(body["classes"])):
        allowed = allowed_plans(
            adaptive,
            cls,
            reference=reference_plan(settings.reference),
            exit_bounds=audits.exit_bounds(cls),
            max_disagreement=settings.max_disagreement,
        )
        entry = body["classes"].setdefault(
            cls,
            {
                "requests": 0,
                "routes": {},
                "plans": {},
                "tokens": nested_tokens({}),
                "repairs": {},
                "audit": None,
            },
        )
        entry["plan"] = plan_summary(adaptive, cls, plans.estimates(cls), allowed)
    return body


@dataclass
class _Replica:
    """What the holder applied of one replica's reports."""

    rank: int  # the order it first reported in: ties of time in a window go to the lower rank
    number: int = 0  # its last report whose counts were applied
    counts: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # class -> its counts, as applied
    totals: Mapping[str, Any] | None = None
    audits: dict[str, int] = field(default_factory=dict)  # class -> the last audit of its window applied
    plans: dict[str, int] = field(default_factory=dict)  # class -> the last plan observation applied
    overload: str = Level.NORMAL.label  # its overload level, as its last report applied said
    cache: Mapping[str, int] | None = None  # its answer cache's counts (absolute), None: no cache
    reported_at: float = -math.inf  # when that report arrived, by the holder's clock


class StatsHolder:
    """The holder's logic, without Ray: all replicas' statistics merged, up to date per report; one
    warning line when a class goes over its disagreement bound. ``overload_enabled``: whether
    ``cascade.overload`` is on; ``clock``: when a report arrives (the replicas' overload levels count
    while their reports are recent); ``classes``: the config's, said in the body's ``tasks``."""

    def __init__(
        self,
        settings: AuditSettings,
        adaptive: AdaptiveSettings | None = None,
        *,
        overload_enabled: bool = False,
        clock: Callable[[], float] = time.monotonic,
        classes: ClassSettings | None = None,
    ):
        self.settings = settings
        self.adaptive = adaptive or AdaptiveSettings()
        self.classes = classes or ClassSettings()
        self.overload_enabled, self.clock = overload_enabled, clock
        self.audits = MergedAudits(settings.window)
        self.plans = MergedPlans(self.adaptive.window)
        self.replicas: dict[str, _Replica] = {}
        self.alerting: set[str] = set()
        # Per class, what a reply carries, read again only once the class's window has changed.
        self._bounds: dict[str, dict[str, float]] = {}
        self._estimates: dict[str, dict[str, Any]] = {}
        # An admin's purges of the in-process answer stores, for the replicas to take (fleet/purges.py).
        self.purges = PurgeOrders()
        # Serve runs a deployment's sync methods in a thread pool: one report or snapshot at a time.
        self._lock = threading.Lock()

    def report(self, replica: str, report: Mapping[str, Any]) -> dict[str, Any]:
        """Apply ``replica``'s report (``StatsReporter.report``); return what was applied of it and,
        per class, the plan estimates and audit bounds over all replicas. ``{"resend": True}`` for a
        report that is not full from a replica this holder does not know (it restarted)."""
        with self._lock:
            known = self.replicas.get(replica)
            if known is None:
                if not report["full"]:
                    return {"resend": True}
                known = self.replicas[replica] = _Replica(rank=len(self.replicas))
            fresh = report["number"] > known.number  # counts older than the ones applied are ignored
            if fresh:
                known.number = report["number"]
                known.overload, known.reported_at = report["overload"], self.clock()
                self.audits.count_totals(report["totals"], known.totals)
                known.totals = report["totals"]
                known.cache = report.get("cache")
            acked_audits = {}
            for cls, entry in report["audits"].items():
                if fresh:
                    self.audits.count(cls, entry, known.counts.get(cls))
                    known.counts[cls] = {key: value for key, value in entry.items() if key != "recent"}
                acked_audits[cls] = self._add_audits(known, cls, entry)
            acked_plans = {cls: self._add_plans(known, cls, entry) for cls, entry in report["plans"].items()}
            self._warn(report["audits"])
            purges = (
                {}
                if "purge_cursor" not in report
                else {"purges": self.purges.due(report["purge_cursor"], replica)}
            )
            return purges | {
                "acked": {"audits": acked_audits, "plans": acked_plans},
                "estimates": {cls: self._estimates_of(cls) for cls in self.plans.classes},
                "exit_bounds": {cls: self._exit_bounds(cls) for cls in self.audits.classes},
            }

    def purge(self, pattern: str, origin: str) -> int:
        """An admin's purge of the answer cache's entries ``pattern`` names (``stores.pattern_of``), sent
        through the replica ``origin``, which purged its own: every other replica takes it with its next
        report. The order's number."""
        with self._lock:
            return self.purges.add(pattern, origin, time.time())

    def _add_audits(self, known: _Replica, cls: str, entry: Mapping[str, Any]) -> int:
        """Add the audits of ``entry["recent"]`` the holder does not have; the last one it has."""
        applied, last = known.audits.get(cls, 0), entry["audited"]
        recent = entry["recent"]
        first = last - len(recent) + 1
        for seq in range(max(first, applied + 1), last + 1):
            at, disagreed, route = recent[seq - first]
            self.audits.add_audit(cls, (at, known.rank, seq), disagreed, route)
        if last > applied:
            self._bounds.pop(cls, None)
        known.audits[cls] = max(applied, last)
        return known.audits[cls]

    def _add_plans(self, known: _Replica, cls: str, entry: Mapping[str, Any]) -> int:
        applied, last = known.plans.get(cls, 0), entry["appended"]
        rows = entry["rows"]
        first = last - len(rows) + 1
        for seq in range(max(first, applied + 1), last + 1):
            observation = Observation(*rows[seq - first])
            self.plans.add(cls, (observation.at, known.rank, seq), observation)
        if last > applied:
            self._estimates.pop(cls, None)
        known.plans[cls] = max(applied, last)
        return known.plans[cls]

    def _estimates_of(self, cls: str) -> dict[str, Any]:
        if cls not in self._estimates:
            estimates = self.plans.estimates(cls)
            self._estimates[cls] = {name: getattr(estimates, name) for name in ESTIMATES}
        return self._estimates[cls]

    def _exit_bounds(self, cls: str) -> dict[str, float]:
        if cls not in self._bounds:
            self._bounds[cls] = self.audits.exit_bounds(cls)
        return self._bounds[cls]

    def _warn(self, classes: Iterable[str]) -> None:
        """Log one warning for each of ``classes`` that went into alert (only a report can move a class's
        window, so the classes it touched are the ones to check)."""
        settings = self.settings
        for cls in classes:
            body = self.audits.class_body(cls, settings)
            line = alert_line(cls, body, settings.reference.value, settings.max_disagreement)
            if line is None:
                self.alerting.discard(cls)
            elif cls not in self.alerting:
                self.alerting.add(cls)
                logger.warning("MAI audit alert: %s", line)

    def _overload(self) -> dict[str, Any]:
        """The body's ``overload``: the levels of the replicas heard from within ``LIVE_INTERVALS``."""
        since = self.clock() - LIVE_INTERVALS * self.settings.report_interval_s
        live = [known.overload for known in self.replicas.values() if known.reported_at >= since]
        return fleet_overload(self.overload_enabled, live)

    def snapshot(self) -> dict[str, Any]:
        """The ``GET /v1/mai/stats`` body from the merged view, nothing merged again; ``cache_events``:
        the replicas' answer cache counts, summed (the replica that answers adds its store's state)."""
        with self._lock:
            body = stats_body(
                self.audits,
                self.plans,
                self.settings,
                self.adaptive,
                overload=self._overload(),
                classes=self.classes,
            )
            caches = [known.cache for known in self.replicas.values() if known.cache is not None]
            if caches:
                summed: dict[str, int] = {}
                for counts in caches:
                    for event, count in counts.items():
                        summed[event] = summed.get(event, 0) + count
                body["cache_events"], body["cache_replicas"] = summed, len(caches)
            return body


@serve.deployment(name="StatsHolder", num_replicas=1, ray_actor_options={"num_cpus": 0})
class StatsHolderDeployment(StatsHolder):
    pass
