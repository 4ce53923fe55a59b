"""The one view of the audit statistics across ingress replicas: a small deployment every replica
reports its whole book to (``AuditBook.state()``, every ``audit.report_interval_s`` and before it
answers ``GET /v1/mai/stats``). It keeps each replica's latest report and merges them on read.

What a death loses: a replica's, what it counted since its last report (its earlier reports stay
here); the holder's, nothing for long, since every live replica reports its whole book again within
one interval (the books of replicas that died before the holder are lost with it).
"""

from __future__ import annotations

import logging
from typing import Any

from ray import serve

from ..core.audit import AuditBook, AuditSettings, alerts

logger = logging.getLogger("ray.serve")


class AuditStats:
    """The holder's logic, without Ray: the latest state per replica, merged; one warning line when a
    class goes over its disagreement bound."""

    def __init__(self, settings: AuditSettings):
        self.settings = settings
        self.states: dict[str, dict[str, Any]] = {}
        self.alerting: set[str] = set()

    def report(self, replica: str, state: dict[str, Any]) -> None:
        self.states[replica] = state
        snapshot = self.snapshot()
        alerting = {cls for cls, entry in snapshot["classes"].items() if entry["audit"]["alert"]}
        for cls, line in alerts(snapshot):
            if cls not in self.alerting:
                logger.warning("MAI audit alert: %s", line)
        self.alerting = alerting

    def snapshot(self) -> dict[str, Any]:
        return AuditBook.merged(self.states.values(), self.settings.window).snapshot(self.settings)


@serve.deployment(name="MAIStats", num_replicas=1, ray_actor_options={"num_cpus": 0})
class AuditStatsHolder(AuditStats):
    pass
