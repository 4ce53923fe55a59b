"""paper: the paper's Tables 10-12 under emulation (a capacity model, never accuracy): per dataset, the
policies cascade, transfer (Full RT) and large-reason on the paper's H100 profile, interleaved and
repeated, the same request ids for every policy; speedups against the paper's and the analytic figures
from the same inputs beside them. Emulated latency is the profile times the recorded time_scale."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deployments import paper_profile
from harness.local_server import deploy

from ..analytic import analytic_speedups
from ..cells import cell, times
from ..load import ANSWER, PAPER_TIME_SCALE, bodies, emulated_args, progress, run_load
from ..scenario import Bench, Scenario
from ..schedule import run_order
from ..summary import spread, summarize


@dataclass(frozen=True)
class Parameters:
    requests: int = 500  # per policy over all repetitions (at least 64 per repetition)
    concurrency: int = 32
    repetitions: int = 3
    policies: tuple[str, ...] = ("cascade", "transfer", "large-reason")


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """The emulated tier as a capacity model: per dataset, the three policies on the paper's profile,
    interleaved (repetitions with the order rotated), the same request ids for every policy and
    repetition; the analytic figures from the same inputs beside them."""
    url, records = bench.url, bench.records
    requests, concurrency = parameters.requests, parameters.concurrency
    per_repetition = max(64, requests // parameters.repetitions)
    policies = parameters.policies
    results: dict[str, Any] = {}
    for dataset in paper_profile.DATASETS:
        time_scale = PAPER_TIME_SCALE.get(dataset, 1.0)
        deploy(emulated_args(dataset, time_scale))
        repetitions: list[dict[str, Any]] = [{} for _ in range(parameters.repetitions)]
        for repetition, _, policy in run_order(policies, (concurrency,), parameters.repetitions):
            # The same request ids for every policy: the same scripted requests, answer for answer.
            outcomes, wall = run_load(
                url,
                ANSWER,
                bodies(records, per_repetition, policy=policy),
                concurrency,
                on_tick=progress(f"paper {dataset} {policy} #{repetition + 1}", per_repetition),
                request_ids=f"{dataset}-",
            )
            repetitions[repetition][policy] = summarize(outcomes, wall) | {
                "emulated_wall_s": round(wall / time_scale, 2)
            }

        results[dataset] = {
            "time_scale": time_scale,
            "repetitions": repetitions,
            "wall_s": {
                policy: spread([rep[policy]["wall_s"] for rep in repetitions], 2) for policy in policies
            },
            "speedup_vs_transfer": _speedup(repetitions, "transfer"),
            "speedup_vs_large_reason": _speedup(repetitions, "large-reason"),
            "paper_speedup_vs_transfer": paper_profile.PAPER_SPEEDUP_VS_TRANSFER[dataset],
            # Inputs, not results: the scripted answers take these routes at these rates.
            "route_shares_input": dict(
                zip(
                    ("agree_short", "agree_reasoned", "transfer"),
                    paper_profile.ROUTE_SHARES[dataset],
                    strict=True,
                )
            ),
            # The same inputs multiplied out at batch 1, without Serve: what the run adds or loses.
            "analytic": analytic_speedups()[dataset],
        }
    results["paper_speedup_vs_large_reason_chartqa"] = paper_profile.PAPER_SPEEDUP_VS_LARGE_REASON_CHARTQA
    return {
        "requests_per_repetition": per_repetition,
        "repetitions": parameters.repetitions,
        "concurrency": concurrency,
        "datasets": results,
    }


def _speedup(repetitions: list[dict[str, Any]], other: str) -> dict[str, float] | None:
    """Wall time of ``other`` over the cascade's, per repetition (runs made next to each other)."""
    return spread([rep[other]["wall_s"] / rep["cascade"]["wall_s"] for rep in repetitions], 2)


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        "A capacity model, not evidence about the paper's claims. Its inputs are the paper's: route shares "
        "(Table 10, scripted per request id, so the runs take them by construction), completion tokens "
        "(drawn around Table 5) and latencies (Tables 3–4, with an assumed batching slowdown). What a run "
        "measures is the rest: Serve's orchestration, queueing and continuous batching under concurrency "
        "and a parallel stage 1. *Analytic* is the same inputs multiplied out at batch 1 without Serve "
        "(`loadtest/bench/analytic.py`): sequential as the paper's Table 11 bound, parallel as the app runs "
        "stage 1.",
        "",
        f"Per dataset, {result['repetitions']} repetitions of {result['requests_per_repetition']} requests "
        f"per policy at concurrency {result['concurrency']}, the policies interleaved (order rotated), the "
        "same request ids for every policy; speedup = wall time of the other policy / the cascade's in the "
        "same repetition, median [min–max].",
        "",
        "| dataset | time scale | cascade vs Full RT, Serve run | analytic, sequential | analytic, "
        "parallel | paper (Table 11) | cascade vs large-reason, Serve run | analytic, parallel | routes "
        "short / reasoned / transfer (input, Table 10) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, row in result["datasets"].items():
        if not isinstance(row, dict):
            continue
        analytic = row["analytic"]
        shares = " / ".join(f"{share * 100:.1f}%" for share in row["route_shares_input"].values())
        lines.append(
            f"| {dataset} | {row['time_scale']} | {times(row['speedup_vs_transfer'])} | "
            f"{analytic['sequential_vs_transfer']:.2f}× | {analytic['parallel_vs_transfer']:.2f}× | "
            f"{row['paper_speedup_vs_transfer']:.2f}× | {times(row['speedup_vs_large_reason'])} | "
            f"{analytic['parallel_vs_large_reason']:.2f}× | {shares} |"
        )
    chart = result["datasets"].get("chartqa")
    if chart:
        lines += [
            "",
            f"ChartQA, cascade vs large-reason: {times(chart['speedup_vs_large_reason'])} in the Serve run "
            f"(paper, Table 12, vLLM at batch 32: "
            f"{paper_profile.PAPER_SPEEDUP_VS_LARGE_REASON_CHARTQA:.2f}×).",
        ]
    lines += [
        "",
        "| dataset | policy | wall s | requests/s | p50 s | p99 s | small completion tokens | large "
        "completion tokens |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for dataset, row in result["datasets"].items():
        if not isinstance(row, dict):
            continue
        for policy, wall in row["wall_s"].items():
            runs = [rep[policy] for rep in row["repetitions"]]
            middle = sorted(runs, key=lambda run: run["wall_s"])[len(runs) // 2]
            lines.append(
                f"| {dataset} | {policy} | {cell(wall)} | {middle['requests_per_s']} | {middle['p50_s']} | "
                f"{middle['p99_s']} | {middle['tokens']['small']['completion_tokens']} | "
                f"{middle['tokens']['large']['completion_tokens']} |"
            )
    lines += ["", "(Requests/s, latency and tokens: the repetition with the median wall time.)"]
    return lines


SCENARIO = Scenario(
    name="paper",
    title="Paper reproduction under emulation (Tables 10–12)",
    result="paper.json",
    config="mai-emulated.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
