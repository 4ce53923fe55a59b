"""Audits on and off, the library of the ``audit_cost`` and ``audit_shed`` scenarios: each run on a fresh
deployment, its audits counted as the change in the server's statistics once they stop changing, the
two rates interleaved in one rotated order and compared by their medians."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from harness.local_server import deploy

from .cells import cell
from .load import ANSWER, run_load, stats
from .schedule import run_order
from .summary import compare, summarize

COMPARED_FIGURES = ("p50_s", "p99_s", "requests_per_s", "errors")


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
        "summary": compare(runs, *rates, COMPARED_FIGURES),
    }


def off_on_table(result: dict[str, Any], intro: str) -> list[str]:
    """The table of an audits-off-against-on result: ``intro``, then per rate its runs' latency,
    throughput, errors and audits run and not run, and the on/off ratios of the medians."""
    lines = [intro]
    runs, summary = result["runs"], result["summary"]
    off, on = list(runs)
    label = {off: f"off (rate {off})", on: f"rate {on}"}
    lines += [
        "",
        "| audits | runs | p50 s | p99 s | requests/s | errors | audits run, per run | audits not run, per "
        "run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate, results in runs.items():
        reasons = sorted({key for run in results for key in run if key.startswith("not_run_")})
        not_run = "; ".join(
            f"{key.removeprefix('not_run_')} {', '.join(str(run.get(key, 0)) for run in results)}"
            for key in reasons
        )
        errors = sum(run["errors"] for run in results)
        lines.append(
            f"| {label[rate]} | {len(results)} | {cell(summary[rate]['p50_s'], 2)} | "
            f"{cell(summary[rate]['p99_s'], 2)} | {cell(summary[rate]['requests_per_s'], 2)} | "
            f"{errors} of {sum(run['requests'] for run in results)} | "
            f"{', '.join(str(run.get('audited', 0)) for run in results)} | {not_run or '–'} |"
        )
    ratios = summary.get("ratios", {})
    names = {"p50_s": "p50", "p99_s": "p99", "requests_per_s": "requests/s"}
    ratio_text = ", ".join(f"{names[key]} **{ratios[key]}×**" for key in names if key in ratios)
    audited = sum(run.get("audited", 0) for run in runs[on])
    skipped = sum(value for run in runs[on] for key, value in run.items() if key.startswith("not_run_"))
    lines += [
        "",
        f"Rate {on} against off, the ratio of the medians: {ratio_text or '–'}. Of the {audited + skipped} "
        f"audits sampled at rate {on}, {audited} ran and {skipped} did not.",
    ]
    return lines
