"""eager: eager reasoning off and on, paired (the same request ids, so the same scripted routes and
tokens) and interleaved, on the ChartQA and MMMU profiles: latency of the escalated requests, the
small model's extra tokens, against the bound stage 1's share of an escalated request puts on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments import paper_profile
from harness.local_server import deploy

from ..cells import cell, percent_cell
from ..load import ANSWER, PAPER_TIME_SCALE, bodies, emulated_args, progress, run_load
from ..scenario import Bench, Scenario
from ..schedule import run_order
from ..summary import quantiles, spread, summarize


@dataclass(frozen=True)
class Parameters:
    requests: int = 500  # per mode over all repetitions (at least 64 per repetition)
    concurrency: int = 32
    repetitions: int = 3


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """Eager reasoning off and on, paired (the same request ids, so the same scripted routes and
    tokens) and interleaved: the repetitions alternate the order."""
    url, records = bench.url, bench.records
    requests, concurrency = parameters.requests, parameters.concurrency
    per_repetition = max(64, requests // parameters.repetitions)
    results: dict[str, Any] = {}
    for dataset in ("chartqa", "mmmu"):
        time_scale = PAPER_TIME_SCALE.get(dataset, 1.0)
        deploy(emulated_args(dataset, time_scale))
        repetitions: list[dict[str, Any]] = [{} for _ in range(parameters.repetitions)]
        for repetition, _, mode in run_order(("off", "on"), (concurrency,), parameters.repetitions):
            outcomes, wall = run_load(
                url,
                ANSWER,
                bodies(records, per_repetition, options={"eager_reasoning": mode == "on"}),
                concurrency,
                on_tick=progress(f"eager {dataset} {mode} #{repetition + 1}", per_repetition),
                request_ids=f"{dataset}-",
            )
            escalated = [
                o.latency_s for o in outcomes if o.status == 200 and o.route in ("agree_reasoned", "transfer")
            ]
            repetitions[repetition][mode] = summarize(outcomes, wall) | {
                "escalated": len(escalated),
                **quantiles(escalated, prefix="escalated_"),
            }

        def reduction(key: str, reps: list[dict[str, Any]] = repetitions) -> dict[str, float] | None:
            return spread([1 - rep["on"][key] / rep["off"][key] for rep in reps], 4)

        results[dataset] = {
            "time_scale": time_scale,
            "repetitions": repetitions,
            "escalated_p50_s": {
                mode: spread([rep[mode]["escalated_p50_s"] for rep in repetitions]) for mode in ("off", "on")
            },
            "escalated_p99_s": {
                mode: spread([rep[mode]["escalated_p99_s"] for rep in repetitions]) for mode in ("off", "on")
            },
            "escalated_p99_reduction": reduction("escalated_p99_s"),
            "escalated_p50_reduction": reduction("escalated_p50_s"),
            "extra_small_completion_tokens": spread(
                [
                    rep["on"]["tokens"]["small"]["completion_tokens"]
                    - rep["off"]["tokens"]["small"]["completion_tokens"]
                    for rep in repetitions
                ],
                0,
            ),
            # Eager reasoning can save at most the stage-1 time of an escalated request.
            "stage1_share_of_escalated_latency_bound": _stage1_bound(dataset),
        }
    return {
        "requests_per_repetition": per_repetition,
        "repetitions": parameters.repetitions,
        "concurrency": concurrency,
        "datasets": results,
        "target_p99_reduction": 0.30,
    }


def _stage1_bound(dataset: str) -> float:
    """Stage 1 time / (stage 1 + small reasoning), from the paper's profile at batch 1."""
    small_s, _, small_r = paper_profile.COMPLETION_TOKENS[dataset]["2b"]
    large_s = paper_profile.COMPLETION_TOKENS[dataset]["8b"][0]
    stage1 = max(
        small_s / paper_profile.DECODE_TOKENS_PER_S["2b"], large_s / paper_profile.DECODE_TOKENS_PER_S["8b"]
    )
    reasoning = small_r / paper_profile.DECODE_TOKENS_PER_S["2b"]
    return round(stage1 / (stage1 + reasoning), 4)


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"{result['repetitions']} repetitions of {result['requests_per_repetition']} requests per mode at "
        f"concurrency {result['concurrency']}, off and on alternating, the same request ids in both (the "
        "same scripted routes and tokens); escalated = routes agree_reasoned and transfer. Median [min–max] "
        "over repetitions; reductions are taken within a repetition.",
        "",
        "| dataset | escalated p50 off / on s | escalated p99 off / on s | p99 reduction | extra small "
        "completion tokens (completed calls; cancelled ones report none) | bound: stage 1 share |",
        "|---|---|---|---|---|---|",
    ]
    for dataset, row in result["datasets"].items():
        p50, p99, cut = row["escalated_p50_s"], row["escalated_p99_s"], row["escalated_p99_reduction"]
        lines.append(
            f"| {dataset} | {cell(p50['off'])} / {cell(p50['on'])} | {cell(p99['off'])} / "
            f"{cell(p99['on'])} | {percent_cell(cut)} "
            f"(target {result['target_p99_reduction'] * 100:.0f}%) | "
            f"{cell(row['extra_small_completion_tokens'])} | "
            f"{row['stage1_share_of_escalated_latency_bound'] * 100:.1f}% |"
        )
    lines += [
        "",
        "Eager reasoning overlaps the small model's reasoning with stage 1, so it can save at most stage 1's "
        "share of an escalated request's latency (last column, from the paper's profile at batch 1).",
    ]
    return lines


SCENARIO = Scenario(
    name="eager",
    title="Eager reasoning",
    result="eager.json",
    config="mai-emulated.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
