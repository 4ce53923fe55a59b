"""The audit alerts: the warning line for a class whose disagreement bound, in its ``GET /v1/mai/stats``
entry (serve_app/core/audit.py), is over ``max_disagreement``; the stats holder logs it once per alert
(serve_app/edge/stats_holder.py). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def alert_line(cls: str, entry: Mapping[str, Any], reference: str, limit: float) -> str | None:
    """The warning for ``cls`` (its ``GET /v1/mai/stats`` entry) when its disagreement bound is over
    ``limit``; None when it is not."""
    audit = entry["audit"]
    if not audit["alert"]:
        return None
    window = audit["window"]
    line = (
        f"class {cls}: early exits disagreed with the {reference} policy on "
        f"{window['disagreed']} of the last {window['audited']} audits (rate {audit['rate']}, "
        f"95 % upper bound {audit['upper_95']} > max_disagreement {limit})"
    )
    return line + (f"; {audit['note']}" if audit.get("note") else "")


def alerts(snapshot: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """``(class, line)`` for each class whose disagreement bound is over the configured maximum."""
    audit = snapshot["audit"]
    for cls, entry in snapshot["classes"].items():
        line = alert_line(cls, entry, audit["reference"], audit["max_disagreement"])
        if line is not None:
            yield cls, line
