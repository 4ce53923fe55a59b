"""autoscaling --param variant=overload.

Replicas fixed at one per model, 96 cascade users (past what one replica holds), the
cascade's overload relaxation off and on, interleaved: p99, goodput (answers within the objective per
second), the share of relaxed answers (emulated engines: latency, never accuracy)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from harness.local_server import deploy

from ...cells import cell, percent, percent_cell
from ...load import ANSWER, after, bodies, emulated_args, run_load
from ...scenario import Bench
from ...schedule import rotated
from ...summary import quantiles, shares, spread
from ...surges import objective_s

FIXED = {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 32}
OVERLOAD_USERS = 96
# Stage 1's thresholds as configured, and the floors relax may lower them to (the emulated engines'
# scripted confidences: most answers 0.75-1, a wrong agreement's lower).
THRESHOLDS = {"min_confidence": 0.8, "confident_large": 0.97}
OVERLOAD = {
    "max_large_queue": 16,
    "restore_below": 8,
    "relax_after_s": 2,
    "restore_after_s": 5,
    "relax_to": {"min_confidence": 0.5, "confident_large": 0.8},
}
# The large engine decodes this many sequences at once (the small one 64): the large model is the
# one past its capacity, as the overload's trigger reads it.
LARGE_SEQS = 8


@dataclass(frozen=True)
class Parameters:
    repetitions: int = 2
    seconds: float = 40.0  # of load per run, after 5 s of warm-up


def overload_args(relax: bool) -> dict[str, Any]:
    args = emulated_args("chartqa", 1.0, autoscaling=FIXED, cascade={**THRESHOLDS})
    args["large"]["emulation"]["max_num_seqs"] = LARGE_SEQS
    if relax:
        args["cascade"]["overload"] = OVERLOAD
    return args


def overload_run(url: str, records: list[dict], seconds: float) -> dict[str, Any]:
    objective = objective_s("chartqa", 1.0)
    run_load(url, ANSWER, bodies(records, 100000, policy="cascade"), 8, until=after(5))
    outcomes, wall = run_load(
        url,
        ANSWER,
        bodies(records, 100000, policy="cascade"),
        OVERLOAD_USERS,
        until=after(seconds),
    )
    ok = [o for o in outcomes if o.status == 200]
    latencies = [o.latency_s for o in ok]
    levels: dict[str, int] = {}
    for outcome in ok:
        level = (outcome.overload or {}).get("level", "normal")
        levels[level] = levels.get(level, 0) + 1
    relaxed = sum(1 for o in ok if (o.overload or {}).get("relaxed"))
    return {
        "requests": len(outcomes),
        "errors": len(outcomes) - len(ok),
        **quantiles(latencies, 3),
        "goodput_per_s": round(sum(1 for x in latencies if x <= objective) / wall, 2),
        "requests_per_s": round(len(ok) / wall, 2),
        "objective_s": objective,
        "levels": levels,
        "relaxed_share": round(relaxed / max(1, len(ok)), 4),
        "routes": shares([o.route for o in ok]),
    }


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, records, seconds = bench.url, bench.records, parameters.seconds
    runs = []
    for rep in range(parameters.repetitions):
        for relax in rotated((False, True), rep):
            deploy(overload_args(relax))
            print(f"  overload relax={relax} rep {rep}", file=sys.stderr)
            runs.append({"relax": relax, "repetition": rep} | overload_run(url, records, seconds))
    summary = {
        ("on" if relax else "off"): {
            key: spread([run[key] for run in runs if run["relax"] is relax])
            for key in ("p99_s", "p50_s", "goodput_per_s", "requests_per_s", "relaxed_share")
        }
        for relax in (False, True)
    }
    return {
        "users": OVERLOAD_USERS,
        "replicas": FIXED,
        "large_max_num_seqs": LARGE_SEQS,
        "thresholds": THRESHOLDS,
        "overload": OVERLOAD,
        "seconds": seconds,
        "runs": runs,
        "summary": summary,
    }


def table(result: dict[str, Any]) -> list[str]:
    replicas, overload, summary, runs = (
        result["replicas"],
        result["overload"],
        result["summary"],
        result["runs"],
    )
    thresholds = ", ".join(f"`{key}` {value}" for key, value in result["thresholds"].items())
    floors = ", ".join(f"`{key}` {value}" for key, value in overload["relax_to"].items())
    objective = runs[0]["objective_s"] if runs else None
    low, high = replicas["min_replicas"], replicas["max_replicas"]
    fixed = f"{high} replica{'s' if high != 1 else ''}" if low == high else f"{low}–{high} replicas"
    lines = [
        "Emulated engines on the ChartQA profile (latency, never accuracy), "
        f"{fixed} per model, the large engine decoding {result['large_max_num_seqs']} sequences at once; "
        f"{result['users']} cascade users for {result['seconds']:g} s per run, thresholds {thresholds}. "
        f"Relaxation on: `max_large_queue` {overload['max_large_queue']}, relax after "
        f"{overload['relax_after_s']} s past it, restore at or under {overload['restore_below']} after "
        f"{overload['restore_after_s']} s, floors {floors}. Off and on interleaved, "
        f"{len({run['repetition'] for run in runs})} repetitions; goodput = answers within the objective "
        f"({objective} s) per second. Median [min–max] over each arm's runs.",
        "",
        "| relaxation | p50 s | p99 s | goodput /s | requests/s | answers relaxed |",
        "|---|---|---|---|---|---|",
    ]
    for arm, row in summary.items():
        lines.append(
            f"| {arm} | {cell(row['p50_s'], 2)} | {cell(row['p99_s'], 2)} | "
            f"{cell(row['goodput_per_s'], 2)} | {cell(row['requests_per_s'], 2)} | "
            f"{percent_cell(row['relaxed_share'])} |"
        )
    lines += [
        "",
        "| run | repetition | relaxation | requests | p99 s | goodput /s | answers relaxed | answers per "
        "level |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for number, run in enumerate(runs, start=1):
        levels = ", ".join(f"{level} {count}" for level, count in run["levels"].items()) or "–"
        lines.append(
            f"| {number} | {run['repetition'] + 1} | {'on' if run['relax'] else 'off'} | {run['requests']} | "
            f"{run['p99_s']} | {run['goodput_per_s']} | {percent(run['relaxed_share'])} | {levels} |"
        )
    return lines
