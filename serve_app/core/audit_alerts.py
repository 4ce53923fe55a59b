"""The audit alerts: the warning line for a class whose audits, in its ``GET /v1/mai/stats`` entry
(serve_app/core/audit.py, ``alert_evidence``), show disagreement over ``max_disagreement``; the stats
holder logs it once per alert (serve_app/edge/stats_holder.py). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def alert_line(cls: str, entry: Mapping[str, Any], reference: str, limit: float) -> str | None:
    """The warning for ``cls`` (its ``GET /v1/mai/stats`` entry) when its audits raise an alert
    (over ``limit``, with evidence); None when they do not."""
    audit = entry["audit"]
    if not audit["alert"]:
        return None
    window = audit["window"]
    line = (
        f"class {cls}: early exits disagreed with the {reference} policy on "
        f"{window['disagreed']} of the last {window['audited']} audits (rate {audit['rate']}, 95 % "
        f"interval {audit['lower_95']}-{audit['upper_95']}, max_disagreement {limit}: "
        f"{audit['alert_evidence']})"
    )
    return line + (f"; {audit['note']}" if audit.get("note") else "")


def alerts(snapshot: Mapping[str, Any]) -> Iterable[tuple[str, str]]:
    """``(class, line)`` for each class whose audits raise an alert."""
    audit = snapshot["audit"]
    for cls, entry in snapshot["classes"].items():
        line = alert_line(cls, entry, audit["reference"], audit["max_disagreement"])
        if line is not None:
            yield cls, line
