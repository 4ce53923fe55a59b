"""The one place a run becomes numbers: latency quantiles, a run's summary, medians with their spread
over repetitions, shares and ratios. Every scenario summarises through these."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.driver import ClientReply, percentile
from serve_app.core.roles import ROLES


def quantiles(latencies: Sequence[float], digits: int = 4, prefix: str = "") -> dict[str, float | None]:
    """``<prefix>p50_s`` and ``<prefix>p99_s`` of ``latencies``, rounded; None for no latencies."""
    return {
        f"{prefix}p{q}_s": round(percentile(latencies, q / 100), digits) if latencies else None
        for q in (50, 99)
    }


def spread(values: Sequence[float | None], digits: int = 4) -> dict[str, float] | None:
    """Median, min and max of the repetitions (None when a repetition had no answer)."""
    present = [value for value in values if value is not None]
    if not present:
        return None
    return {
        "median": round(statistics.median(present), digits),
        "min": round(min(present), digits),
        "max": round(max(present), digits),
        "n": len(present),
    }


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def shares(values: Iterable[Any]) -> dict[str, float]:
    """Each value's share of all of them, keyed by its text, sorted."""
    counts = Counter(str(value) for value in values)
    total = max(1, sum(counts.values()))
    return {key: round(count / total, 4) for key, count in sorted(counts.items())}


def summarize(outcomes: Sequence[ClientReply], wall_s: float) -> dict[str, Any]:
    """One run of the HTTP driver: requests, errors, throughput, p50/p99, route shares, tokens."""
    ok = [outcome for outcome in outcomes if outcome.status == 200]
    latencies = [outcome.latency_s for outcome in ok]
    routes = Counter(outcome.route for outcome in ok)
    tokens = {
        model: {
            kind: sum(o.tokens.get(model, {}).get(kind, 0) for o in ok)
            for kind in ("prompt_tokens", "completion_tokens")
        }
        for model in ROLES
    }
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "errors": len(outcomes) - len(ok),
        "wall_s": round(wall_s, 3),
        "requests_per_s": round(len(ok) / wall_s, 2) if wall_s else None,
        **quantiles(latencies),
        "route_shares": {route: round(count / max(1, len(ok)), 4) for route, count in sorted(routes.items())},
        "tokens": tokens,
    }


def compare(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], off: str, on: str, metrics: Sequence[str]
) -> dict[str, Any]:
    """Per arm, each metric's median over the repetitions with its min and max; and the ratios of
    ``on``'s medians to ``off``'s."""
    summary: dict[str, Any] = {
        arm: {
            metric: {
                "median": round(statistics.median(r[metric] for r in results), 4),
                "min": min(r[metric] for r in results),
                "max": max(r[metric] for r in results),
            }
            for metric in metrics
        }
        for arm, results in runs.items()
    }
    summary["ratios"] = {
        metric: round(summary[on][metric]["median"] / summary[off][metric]["median"], 3)
        for metric in metrics
        if metric != "errors" and summary[off][metric]["median"]
    }
    return summary
