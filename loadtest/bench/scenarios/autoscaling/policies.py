"""autoscaling --param variant=policies.

Per-deployment queue autoscaling against the coupled policy on the emulated engines (a
capacity model: latency, never accuracy): the ChartQA and MMMU profiles, a ramp (8 → 32 → 64 → 8
users) and a step burst (8 → 64 → 8), each policy in its own deployment, the two in a rotated order per
repetition. Per run: when the large model first runs the replicas Little's law expects at 64 users
(seconds after the surge), p99 per phase, requests past the latency objective, replica-seconds."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any

from harness.local_server import deploy

from ...cells import median_range
from ...scenario import Bench
from ...schedule import rotated
from ...summary import spread
from ...surges import (
    OBJECTIVE_FACTOR,
    POLICIES,
    PROFILES,
    SCALING,
    SHAPES,
    Sampler,
    cool_down,
    run_shape,
    scaled_args,
)


@dataclass(frozen=True)
class Parameters:
    repetitions: int = 2


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, records = bench.url, bench.records
    runs = []
    for rep in range(parameters.repetitions):
        for dataset, time_scale in PROFILES.items():
            for policy in rotated(POLICIES, rep):
                deploy(scaled_args(dataset, time_scale, policy))
                print(f"  {dataset} {policy} rep {rep}", file=sys.stderr)
                with Sampler() as sampler:
                    cool_down(sampler, 30)
                    shapes = [run_shape(url, records, dataset, shape, SCALING, sampler) for shape in SHAPES]
                runs.append(
                    {"dataset": dataset, "policy": policy, "repetition": rep, "shapes": shapes}
                    | {"timeline": sampler.timeline}
                )
    return {
        "autoscaling": SCALING,
        "objective_factor": OBJECTIVE_FACTOR,
        "runs": runs,
        "summary": summarize(runs),
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per dataset and shape: each policy's medians (min-max over repetitions), and coupled against
    per-deployment (the issue's three goals)."""
    out: dict[str, Any] = {}
    for dataset in PROFILES:
        for shape in SHAPES:
            cell: dict[str, Any] = {}
            for policy in POLICIES:
                shapes = [
                    s
                    for run in runs
                    if run["dataset"] == dataset and run["policy"] == policy
                    for s in run["shapes"]
                    if s["shape"] == shape
                ]
                if not shapes:
                    continue
                reached = [s["large_reached_s"] for s in shapes]
                cell[policy] = {
                    "large_reached_s": reached,
                    "past_objective": spread([s["past_objective"] for s in shapes]),
                    "requests": spread([s["requests"] for s in shapes]),
                    "surge_p99_s": spread(
                        [next(p for p in s["phases"] if p["users"] == 64)["p99_s"] or 0 for s in shapes]
                    ),
                    "replica_seconds": {
                        model: spread([s["replica_seconds"][model] for s in shapes])
                        for model in ("small", "large")
                    },
                }
            if len(cell) == 2:
                per, coupled = cell["per-deployment"], cell["coupled"]
                fewer = 1 - coupled["past_objective"]["median"] / max(1, per["past_objective"]["median"])
                total = {
                    policy: sum(cell[policy]["replica_seconds"][m]["median"] for m in ("small", "large"))
                    for policy in POLICIES
                }
                cell["goals"] = {
                    "fewer_past_objective": round(fewer, 3),
                    "replica_seconds_ratio": round(total["coupled"] / max(1e-9, total["per-deployment"]), 3),
                }
            out[f"{dataset}/{shape}"] = cell
    return out


def table(result: dict[str, Any]) -> list[str]:
    runs = result["runs"]
    repetitions = len({run["repetition"] for run in runs})
    lines = [
        f"Emulated engines (a capacity model), ChartQA at time scale 1 and MMMU at 0.25; each policy in its "
        f"own deployment, the two in a rotated order, {repetitions} repetitions; autoscaling "
        f"{json.dumps(result['autoscaling'])}. The objective is {result['objective_factor']:g}× one cascade "
        'request alone on the profile. Medians [min–max] over the repetitions; "large reached": seconds '
        "from the surge to 64 users until the large model runs the replicas Little's law expects there "
        "(each repetition; – never).",
        "",
        "| profile / shape | policy | large reached s | requests | past objective | p99 s at 64 users | "
        "replica-s small | replica-s large |",
        "|---|---|---|---|---|---|---|---|",
    ]
    goals = []
    for cell_name, cell in result["summary"].items():
        for policy in ("per-deployment", "coupled"):
            if policy not in cell:
                continue
            row = cell[policy]
            reached = ", ".join("–" if value is None else f"{value:g}" for value in row["large_reached_s"])
            lines.append(
                f"| {cell_name} | {policy} | {reached} | {median_range(row['requests'])} | "
                f"{median_range(row['past_objective'])} | {median_range(row['surge_p99_s'])} | "
                f"{median_range(row['replica_seconds']['small'])} | "
                f"{median_range(row['replica_seconds']['large'])} |"
            )
        if "goals" in cell:
            fewer, ratio = cell["goals"]["fewer_past_objective"], cell["goals"]["replica_seconds_ratio"]
            goals.append(
                f"{cell_name}: coupled {fewer * 100:.0f}% fewer requests past the objective, "
                f"{ratio:g}× the replica-seconds"
            )
    return [*lines, "", *[f"- {goal}" for goal in goals]]
