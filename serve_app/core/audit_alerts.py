"""The audit alerts: when a class's window of audits is evidence of disagreement over
``max_disagreement`` (``alert_evidence``, read into its ``GET /v1/mai/stats`` entry by
serve_app/core/audit.py), and the warning line the stats holder logs once per alert
(serve_app/fleet/stats_holder.py). Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .intervals import exact_lower_bound


def alert_evidence(disagreed: int, audited: int, max_disagreement: float, min_samples: int) -> str | None:
    """Why a class's window of audits raises an alert, or None: the exact 95 % lower bound of its
    disagreement (``exact_lower_bound``) is over ``max_disagreement``, or the window holds at least
    ``min_samples`` audits (the settings' ``alert_min_samples``) and their rate is over it. An upper
    bound over the allowance is no evidence of disagreement, and neither is one disagreeing audit (its
    exact lower bound is 2.5 %)."""
    if audited == 0:
        return None
    lower = exact_lower_bound(disagreed, audited)
    limit = max_disagreement
    if lower > limit:
        return f"exact 95 % lower bound {lower:.3f} > {limit} over {audited} audits"
    if audited >= min_samples and disagreed / audited > limit:
        return f"rate {disagreed / audited:.3f} > {limit} over {audited} >= {min_samples} audits"
    return None


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
