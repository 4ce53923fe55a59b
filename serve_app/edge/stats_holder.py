"""The one view of the statistics across ingress replicas: a small deployment every replica reports
its whole books to (the audit's ``AuditBook.state()`` and the plans' ``PlanBook.state()``, every
``audit.report_interval_s`` and before it answers ``GET /v1/mai/stats``). It keeps each replica's
latest report and merges them on read; its reply to a report is what the reporting replica's plan
controller needs from the others (their plan observations, the audit's bounds over all replicas).

What a death loses: a replica's, what it counted since its last report (its earlier reports stay
here); the holder's, nothing for long, since every live replica reports its whole books again within
one interval (the books of replicas that died before the holder are lost with it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from ray import serve

from ..core.audit import AuditBook, AuditSettings, alerts
from ..core.plan_choice import AdaptiveSettings, allowed_plans, plan_summary, reference_plan
from ..core.plan_stats import PlanBook

logger = logging.getLogger("ray.serve")


def stats_body(
    audits: AuditBook, plans: PlanBook, settings: AuditSettings, adaptive: AdaptiveSettings
) -> dict[str, Any]:
    """The ``GET /v1/mai/stats`` body: the audit statistics and, per class, its plans."""
    body = audits.snapshot(settings)
    body["adaptive"] = {"mode": adaptive.mode, "objective": adaptive.objective, "window": adaptive.window}
    for cls in sorted(set(plans.classes) | set(body["classes"])):
        allowed = allowed_plans(
            adaptive,
            cls,
            reference=reference_plan(settings.reference),
            exit_bounds=audits.exit_bounds(cls),
            max_disagreement=settings.max_disagreement,
        )
        entry = body["classes"].setdefault(cls, {"requests": 0, "routes": {}, "plans": {}, "audit": None})
        entry["plan"] = plan_summary(adaptive, cls, plans.estimates(cls), allowed)
    return body


class AuditStats:
    """The holder's logic, without Ray: the latest books per replica, merged; one warning line when a
    class goes over its disagreement bound."""

    def __init__(self, settings: AuditSettings, adaptive: AdaptiveSettings | None = None):
        self.settings = settings
        self.adaptive = adaptive or AdaptiveSettings()
        self.states: dict[str, dict[str, Any]] = {}
        self.plan_states: dict[str, Mapping[str, Any]] = {}
        self.alerting: set[str] = set()

    def report(
        self, replica: str, state: dict[str, Any], plans: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Keep ``replica``'s books; return the others' plan observations and the audit's bounds."""
        self.states[replica] = state
        if plans is not None:
            self.plan_states[replica] = plans
        audits = self._audits()
        snapshot = audits.snapshot(self.settings)
        alerting = {cls for cls, entry in snapshot["classes"].items() if entry["audit"]["alert"]}
        for cls, line in alerts(snapshot):
            if cls not in self.alerting:
                logger.warning("MAI audit alert: %s", line)
        self.alerting = alerting
        others = [state for name, state in self.plan_states.items() if name != replica]
        return {
            "plans": self._plans(others).state(),
            "exit_bounds": {cls: audits.exit_bounds(cls) for cls in audits.classes},
        }

    def snapshot(self) -> dict[str, Any]:
        return stats_body(
            self._audits(), self._plans(self.plan_states.values()), self.settings, self.adaptive
        )

    def _audits(self) -> AuditBook:
        return AuditBook.merged(self.states.values(), self.settings.window)

    def _plans(self, states: Iterable[Mapping[str, Any]]) -> PlanBook:
        return PlanBook.merged(states, self.adaptive.window)


@serve.deployment(name="MAIStats", num_replicas=1, ray_actor_options={"num_cpus": 0})
class AuditStatsHolder(AuditStats):
    pass
