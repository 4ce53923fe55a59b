"""A request's fate, as its client sees it in a fault-injection run (not the server's outcome, the
value the request path returns): answered, answered degraded, turned away
(503 with Retry-After), hung (no answer within the client's timeout) or failed otherwise; and whether
its route label tells the truth about its trace."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FATES = ("answered", "degraded", "rejected_503", "hung", "failed")


def route_label_is_true(trace: Mapping[str, Any]) -> bool:
    """A route is ``degraded_*`` exactly when a stage failed (error or timeout); cancelled stages (eager
    reasoning no longer needed) are not failures."""
    failed = any(stage.get("status") in ("error", "timeout") for stage in trace.get("stages", []))
    return failed == str(trace.get("route", "")).startswith("degraded_")


def fate_of(status: int, headers: Mapping[str, str], body: Any, *, timed_out: bool = False) -> str:
    if timed_out:
        return "hung"
    if status == 200 and isinstance(body, Mapping):
        trace = body.get("trace") or body.get("mai", {}).get("trace", {})
        return "degraded" if str(trace.get("route", "")).startswith("degraded_") else "answered"
    if status == 503 and headers.get("retry-after"):
        return "rejected_503"
    return "failed"
