"""Audits on and off, the library of the ``audit_cost`` and ``audit_shed`` scenarios: each run on a fresh
deployment, its audits counted as the change in the server's statistics once they stop changing, the
two rates interleaved in one rotated order and compared by their medians."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from harness.local_server import deploy

from .load import ANSWER, run_load, stats
from .schedule import run_order
from .summary import compare, summarize

METRICS = ("p50_s", "p99_s", "requests_per_s", "errors")


def audit_counts(stats: dict[str, Any]) -> dict[str, int]:
    counts = {"audited": sum(entry["audit"]["audited"] for entry in stats["classes"].values())}
    return counts | {f"not_run_{reason}": count for reason, count in stats["audit"]["not_run"].items()}


def settled(url: str, timeout_s: float = 120.0) -> dict[str, int]:
    """The audit counts once they stop changing (the run's audits finished and were reported)."""
    previous, deadline = None, time.monotonic() + timeout_s
    while True:
        counts = audit_counts(stats(url))
        if counts == previous or time.monotonic() > deadline:
            return counts
        previous = counts
        time.sleep(3)


def _counts_text(result: dict[str, Any]) -> str:
    return ", ".join(
        f"{key} {value}" for key, value in result.items() if key.startswith(("audited", "not_run"))
    )


def one_run(
    url: str, args: dict[str, Any], payloads: list[dict], concurrency: int, ids: str
) -> dict[str, Any]:
    """One run on a fresh deployment: the audits it started counted as the change in the statistics
    (a replaced replica may still report its last counts to the new holder), and none still running
    when it ends."""
    deploy(args)  # every deployment is replaced, the engines too
    before = settled(url)
    outcomes, wall_s = run_load(url, ANSWER, payloads, concurrency, request_ids=ids)
    after = settled(url)
    counts = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    return summarize(outcomes, wall_s) | counts


def interleaved(
    url: str,
    rates: tuple[str, str],
    args_of: Callable[[float], dict[str, Any]],
    payloads: list[dict],
    concurrency: int,
    repetitions: int,
    name: str,
) -> dict[str, Any]:
    """Audits off and on (``rates``), in one rotated order, ``repetitions`` runs each; ``args_of(rate)``
    is the application's arguments at a rate."""
    runs: dict[str, list[dict[str, Any]]] = {rate: [] for rate in rates}
    for repetition, _, rate in run_order(rates, (concurrency,), repetitions):
        result = one_run(url, args_of(float(rate)), payloads, concurrency, f"{name}{repetition}-{rate}-")
        runs[rate].append(result)
        print(
            f"  rate {rate}, repetition {repetition}: errors {result['errors']}, "
            f"p50 {result['p50_s']} s, p99 {result['p99_s']} s, audits {_counts_text(result)}",
            file=sys.stderr,
        )
    return {
        "concurrency": concurrency,
        "requests_per_run": len(payloads),
        "runs": runs,
        "summary": compare(runs, *rates, METRICS),
    }
