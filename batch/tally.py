"""What a job has done so far: rows, errors, routes, tokens per model, rows per node (pure).

The progress bar shows the route shares as rows finish; the summary at the end is the same tally with
the wall time, printed and written beside the output (``<output>.summary.json``, or ``summary.json`` in
a records run's folder).
"""

from __future__ import annotations

from collections import Counter
from typing import Any


class Tally:
    def __init__(self, skipped: int = 0):
        self.skipped = skipped  # rows a previous run answered
        self.rows = 0
        self.statuses: Counter[int] = Counter()
        self.routes: Counter[str] = Counter()
        self.nodes: Counter[str] = Counter()
        self.tokens: dict[str, Counter[str]] = {}
        self.retried = 0  # rows asked again after a model failed
        self.actor_peak_rss_mb = 0.0  # the largest any actor reached

    def add(
        self,
        status: int,
        route: str | None,
        tokens: dict[str, dict[str, int]],
        node: str,
        attempts: int = 1,
        actor_rss_mb: float = 0.0,
    ) -> None:
        self.rows += 1
        self.actor_peak_rss_mb = max(self.actor_peak_rss_mb, actor_rss_mb)
        self.retried += attempts > 1
        self.statuses[status] += 1
        self.nodes[node] += 1
        if route is not None:
            self.routes[route] += 1
        for model, counts in tokens.items():
            self.tokens.setdefault(model, Counter()).update(counts)

    @property
    def errors(self) -> int:
        return sum(count for status, count in self.statuses.items() if status != 200)

    def route_shares(self) -> str:
        """``agree_short 41% · transfer 12% · ...``, the commonest first."""
        answered = sum(self.routes.values())
        if not answered:
            return ""
        return " · ".join(f"{route} {count / answered:.0%}" for route, count in self.routes.most_common())

    def summary(self, wall_s: float) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "skipped_as_done": self.skipped,
            "answered": self.statuses.get(200, 0),
            "errors": self.errors,
            "retried": self.retried,
            "statuses": {str(status): count for status, count in sorted(self.statuses.items())},
            "routes": dict(self.routes.most_common()),
            "tokens": {model: dict(counts) for model, counts in sorted(self.tokens.items())},
            "rows_per_node": dict(self.nodes.most_common()),
            "wall_s": round(wall_s, 3),
            "rows_per_s": round(self.rows / wall_s, 3) if wall_s > 0 else None,
            "actor_peak_rss_mb": self.actor_peak_rss_mb,
        }


def summary_text(summary: dict[str, Any]) -> str:
    """The summary as the terminal shows it."""
    lines = [
        f"{summary['rows']} rows in {summary['wall_s']:.1f} s ({summary['rows_per_s'] or 0:.2f} rows/s): "
        f"{summary['answered']} answered, {summary['errors']} errors"
        + (f", {summary['retried']} asked again after a model failed" if summary["retried"] else "")
        + (f", {summary['skipped_as_done']} done before" if summary["skipped_as_done"] else ""),
    ]
    if summary["routes"]:
        lines.append("routes: " + ", ".join(f"{route} {count}" for route, count in summary["routes"].items()))
    for model, counts in summary["tokens"].items():
        lines.append(f"{model} tokens: " + ", ".join(f"{kind} {count}" for kind, count in counts.items()))
    if summary.get("first_line_s") is not None and summary.get("line_delay_s"):
        lines.append(
            f"first line after {summary['first_line_s']:.1f} s; each line written at most "
            f"{summary['line_delay_s']['max']:.2f} s after its row was answered"
        )
    if "driver_peak_rss_mb" in summary:
        lines.append(
            f"peak memory: driver {summary['driver_peak_rss_mb']:.0f} MB, "
            f"actors {summary['actor_peak_rss_mb']:.0f} MB"
        )
    if len(summary["rows_per_node"]) > 1:
        lines.append(
            "rows per node: " + ", ".join(f"{node[:12]} {n}" for node, n in summary["rows_per_node"].items())
        )
    if summary.get("job_id"):
        lines.append(f"job {summary['job_id']} (its rows' traces: mai.batch.job_id)")
    return "\n".join(lines)
