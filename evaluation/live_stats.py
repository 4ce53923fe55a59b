"""``mai-eval stats``: a server's audit statistics (``GET /v1/mai/stats``) as a table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def stats_table(snapshot: Mapping[str, Any]) -> str:
    """One line per question class and route: requests, audits, disagreements; per class the
    disagreement rate over the window and its 95 % upper bound."""
    audit = snapshot["audit"]
    share = _percent(audit["extra_token_share"])
    lines = [
        f"audits: rate {audit['rate']}, reference {audit['reference']}, window {audit['window']}, "
        f"alert over {_percent(audit['max_disagreement'])}; audit tokens {share} of served tokens",
        f"({audit['measures']})",
        "",
        "| class | route | requests | audited | disagreed | rate (window) | upper 95 % | alert |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cls, entry in snapshot["classes"].items():
        checks = entry["audit"]
        upper = checks["upper_95"] if checks["rate"] is not None else None
        lines.append(
            f"| {cls} | all | {entry['requests']} | {checks['audited']} | {checks['disagreed']} | "
            f"{_percent(checks['rate'])} | {_percent(upper)} | {'ALERT' if checks['alert'] else ''} |"
        )
        for route, count in entry["routes"].items():
            by_route = checks["by_route"].get(route, {"audited": 0, "disagreed": 0})
            lines.append(f"| | {route} | {count} | {by_route['audited']} | {by_route['disagreed']} | | | |")
    not_run = audit.get("not_run") or {}
    if not_run:
        lines += [
            "",
            "audits not run: " + ", ".join(f"{reason} {count}" for reason, count in not_run.items()),
        ]
    return "\n".join(lines)
