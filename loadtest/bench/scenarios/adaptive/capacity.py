"""adaptive --param variant=capacity.

Plans per question class on the emulated tier (a capacity model, the paper's
profiles): on each of the six datasets, adaptive ``mai`` against ``mai`` forced to ``sequential``,
interleaved and repeated, the same request ids (the same scripted routes) for both, after a warm-up.
Then one stream, POPE, then MMMU, then POPE, on one deployment whose emulated engines switch profile
between phases: the plan of every request in order, and how many requests each shift took to reach
the plan the phase settles on."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deployments.paper_profile import DATASETS
from harness.local_server import deploy, deployment_handle

from ...cells import cell
from ...load import (
    EMULATED_LARGE,
    EMULATED_SMALL,
    PAPER_TIME_SCALE,
    answer_body,
    ask_plans,
    emulated_args,
    stats,
)
from ...plans import (
    ADAPTIVE_LEARN,
    PLAN_LEGEND,
    PLAN_LETTERS,
    completed_plans,
    named_now,
    plans_in_order,
    plans_of,
    run_summary,
    settled_after,
)
from ...scenario import Bench
from ...schedule import run_order
from ...summary import median, spread

CAPACITY_CONCURRENCY = 32
CAPACITY_REQUESTS = 192
CAPACITY_WARM_UP = 256
SHIFT_PHASE = 600
SHIFT = ("pope", "mmmu", "pope")
# On the paper's profiles eager saves MMMU about 4 % of sequential's expected latency, under the default
# min_saving (5 %); the stream runs with 2 %, so that the best plan differs between its phases.
SHIFT_ADAPTIVE = ADAPTIVE_LEARN | {"min_saving": 0.02}
SHIFT_TIME_SCALE = 0.25


@dataclass(frozen=True)
class Parameters:
    repetitions: int = 3


def _capacity_args(dataset: str, time_scale: float, adaptive: Mapping[str, Any]) -> dict[str, Any]:
    return emulated_args(dataset, time_scale, cascade={"adaptive": dict(adaptive)})


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, records, repetitions = bench.url, bench.records, parameters.repetitions
    datasets: dict[str, Any] = {}
    for dataset in DATASETS:
        time_scale = PAPER_TIME_SCALE.get(dataset, 1.0)
        deploy(_capacity_args(dataset, time_scale, ADAPTIVE_LEARN))
        warm = [answer_body(records[i % len(records)]) for i in range(CAPACITY_WARM_UP)]
        asyncio.run(ask_plans(url, warm, f"warm-{dataset}-", CAPACITY_CONCURRENCY))
        bodies = {
            "adaptive": [answer_body(records[i % len(records)]) for i in range(CAPACITY_REQUESTS)],
            "sequential": [
                answer_body(records[i % len(records)], options={"plan": "sequential"})
                for i in range(CAPACITY_REQUESTS)
            ],
        }
        runs: dict[str, list[dict[str, Any]]] = {"adaptive": [], "sequential": []}
        for repetition, _, mode in run_order(
            ("adaptive", "sequential"), (CAPACITY_CONCURRENCY,), repetitions
        ):
            # The same ids in both modes: the same scripted routes and tokens, request for request.
            rows, wall = asyncio.run(
                ask_plans(url, bodies[mode], f"{dataset}-{repetition}-", CAPACITY_CONCURRENCY)
            )
            runs[mode].append(run_summary(rows, wall))
            print(
                f"  capacity {dataset} {mode} #{repetition + 1}: {runs[mode][-1]}",
                file=sys.stderr,
                flush=True,
            )
        controller = plans_of(stats(url))
        walls = {mode: [run["wall_s"] for run in results] for mode, results in runs.items()}
        datasets[dataset] = {
            "time_scale": time_scale,
            "runs": runs,
            "wall_s": {mode: spread(values, 3) for mode, values in walls.items()},
            "p99_s": {mode: spread([run["p99_s"] for run in results]) for mode, results in runs.items()},
            # within the spread of sequential's runs, or faster
            "adaptive_not_slower": median(walls["adaptive"]) <= max(walls["sequential"]),
            "controller": controller,
        }
    return {
        "concurrency": CAPACITY_CONCURRENCY,
        "requests_per_run": CAPACITY_REQUESTS,
        "warm_up_requests": CAPACITY_WARM_UP,
        "repetitions": repetitions,
        "adaptive": ADAPTIVE_LEARN,
        "datasets": datasets,
        "shift": shift(url, records),
    }


def shift(url: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    deploy(_capacity_args(SHIFT[0], SHIFT_TIME_SCALE, SHIFT_ADAPTIVE))
    phases = []
    for number, dataset in enumerate(SHIFT):
        for deployment in (EMULATED_SMALL, EMULATED_LARGE):
            deployment_handle(deployment).replay_dataset.remote(dataset).result()
        bodies = [answer_body(records[i % len(records)]) for i in range(SHIFT_PHASE)]
        rows, wall = asyncio.run(ask_plans(url, bodies, f"shift{number}-", CAPACITY_CONCURRENCY))
        plans = completed_plans(rows)
        phases.append(
            {
                "dataset": dataset,
                **settled_after(plans),
                "wall_s": round(wall, 2),
                "plans_in_order": plans_in_order(plans),
            }
        )
        print(
            f"  shift {dataset}: {phases[-1]['plan']} after {phases[-1]['requests_until_settled']}",
            file=sys.stderr,
        )
    return {
        "phases": phases,
        "adaptive": SHIFT_ADAPTIVE,
        "time_scale": SHIFT_TIME_SCALE,
        "requests_per_phase": SHIFT_PHASE,
        "note": f"plans_in_order: {PLAN_LEGEND}, by completion",
    }


def table(result: dict[str, Any]) -> list[str]:
    learn = result["adaptive"]
    names = {letter: plan for plan, letter in PLAN_LETTERS.items()}

    def plans_text(counts: Mapping[str, int]) -> str:
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return ", ".join(f"{plan} {count}" for plan, count in ordered) or "–"

    lines = [
        "The emulated tier on the paper's profiles (a capacity model: latency, never accuracy). Per dataset, "
        f"{result['warm_up_requests']} warm-up requests, then {result['repetitions']} repetitions of "
        f"{result['requests_per_run']} requests at concurrency {result['concurrency']}: adaptive `mai` "
        f"(learning, window {learn['window']}, explore {learn['explore']:g}) and `mai` forced to "
        "`sequential`, interleaved, the same request ids (the same scripted routes) in both. Median "
        "[min–max] over repetitions; plans: every adaptive run's answered requests.",
        "",
        "| dataset | time scale | wall s adaptive | wall s sequential | adaptive's median ≤ sequential's "
        "slowest | p99 s adaptive | p99 s sequential | adaptive's plans | controller's plan per class |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, row in result["datasets"].items():
        counts: dict[str, int] = {}
        for run in row["runs"]["adaptive"]:
            for plan, count in run["plans"].items():
                counts[plan] = counts.get(plan, 0) + count
        controller = ", ".join(
            f"{cls} {entry.get('plan') or '–'}" for cls, entry in row["controller"].items()
        )
        wall, p99 = row["wall_s"], row["p99_s"]
        lines.append(
            f"| {dataset} | {row['time_scale']:g} | {cell(wall['adaptive'], 1)} | "
            f"{cell(wall['sequential'], 1)} | {'yes' if row['adaptive_not_slower'] else 'no'} | "
            f"{cell(p99['adaptive'], 2)} | {cell(p99['sequential'], 2)} | {plans_text(counts)} | "
            f"{controller} |"
        )
    shift = result.get("shift")
    if shift:
        lines += [
            "",
            f"Then one stream on one deployment ({' → '.join(p['dataset'] for p in shift['phases'])}), the "
            f"emulated engines switching profile between phases at time scale {shift['time_scale']:g}, "
            f"{shift['requests_per_phase']} requests a phase at concurrency {result['concurrency']}, the "
            f"controller's min_saving {shift['adaptive'].get('min_saving', '–')}:",
            "",
            "| phase | dataset | settled on | requests until settled | plans (by completion) | wall s |",
            "|---|---|---|---|---|---|",
        ]
        for number, phase in enumerate(shift["phases"], start=1):
            counts = {}
            for letter in phase["plans_in_order"]:
                counts[names.get(letter, letter)] = counts.get(names.get(letter, letter), 0) + 1
            lines.append(
                f"| {number} | {phase['dataset']} | {named_now(phase['plan']) or '–'} | "
                f"{phase['requests_until_settled']} of {phase['requests']} | {plans_text(counts)} | "
                f"{phase['wall_s']} |"
            )
        lines += [
            "",
            "Requests until settled: how many of the phase's requests finished before every later one that "
            "did not explore ran the plan the phase settled on (0: from its first).",
        ]
    return lines
