"""bench/RESULTS.md from the result files in bench/results/ (each figure names its command)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deployments import paper_profile
from harness.paths import RESULTS, RESULTS_SUMMARY, ROOT

README = ROOT / "README.md"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _meta(result: dict[str, Any]) -> str:
    meta = result["meta"]
    made_with = ""
    if meta.get("commit"):
        changed = " with uncommitted changes" if meta.get("uncommitted_changes") else ""
        checkpoints = ", ".join(f"{role} {name}" for role, name in meta.get("checkpoints", {}).items())
        made_with = f" Commit {meta['commit'][:10]}{changed}, `{meta['config']}` ({checkpoints})."
    return (
        f"Command: `{meta['command']}` — run {meta['started']}, {meta['duration_s']} s, "
        f"{meta['machine']['cpus']} CPUs.{made_with} Raw figures: `bench/results/`."
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


def autoscaling_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"ChartQA profile, time scale 1; autoscaling {json.dumps(result['autoscaling'])}. "
        f"Peak replicas: small {result['peak']['small']}, large {result['peak']['large']}; "
        f"after the load: small {result['final']['small']}, large {result['final']['large']}.",
        "",
        "| phase | policy | requests | errors | requests/s | p50 s | p99 s | expected replicas small / "
        "large (Little's law at batch 1) | peak replicas small / large |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for phase in result["phases"]:
        during = [t for t in result["timeline"] if t["phase"] == phase["phase"]]
        expected = phase.get("expected_replicas", {})
        peak = {model: max((t[model] for t in during), default="–") for model in ("small", "large")}
        lines.append(
            f"| {phase['phase']} | {phase.get('policy', 'cascade')} | {phase['requests']} | "
            f"{phase['errors']} | {phase['requests_per_s']} | {phase['p50_s']} | {phase['p99_s']} | "
            f"{expected.get('small', '–')} / {expected.get('large', '–')} | "
            f"{peak['small']} / {peak['large']} |"
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


def _rendered(table, result: dict[str, Any]) -> list[str] | None:
    """The table and its provenance line; None for a result file written in an older format."""
    try:
        return table(result) + ["", _meta(result)]
    except (KeyError, TypeError):
        return None


SECTIONS = (
    ("real-stack", "The real stack: every policy on vLLM-CPU", real_stack_table),
    ("paper", "Paper reproduction under emulation (Tables 10–12)", paper_table),
    ("overhead", "Orchestration overhead", overhead_table),
    ("eager", "Eager reasoning", eager_table),
    ("autoscaling", "Autoscaling on queue depth", autoscaling_table),
    ("selector", "Sparse reasoning transfer: selector cost", selector_table),
    ("logprobs", "What answer confidences cost (engine logprobs)", logprobs_table),
    ("passthrough", "The models themselves through the ingress (passthrough)", passthrough_table),
    ("prefix_cache", "Prefix cache on the CPU stack", prefix_cache_table),
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
        rerun = f"`python -m loadtest.bench --only {name.replace('real-stack', 'real')}`"
        if not result:
            lines.append(f"Not run yet: {rerun}.")
        else:
            rendered = _rendered(table, result)
            lines += rendered or [
                f"`bench/results/{name}.json` predates this report's format: rerun {rerun}."
            ]
        lines.append("")
    path = RESULTS_SUMMARY
    path.write_text("\n".join(lines))
    return path


# The README's tables that `make bench` writes: between <!-- figures:NAME --> and <!-- /figures:NAME -->.
README_TABLES = {"real-stack": real_stack_table, "paper": paper_table}


def readme_blocks() -> dict[str, str]:
    """name -> the README block rendered from bench/results/<name>.json (with where it comes from)."""
    blocks = {}
    for name, table in README_TABLES.items():
        result = _load(name)
        lines = _rendered(table, result) if result is not None else None
        if lines is not None:
            blocks[name] = "\n".join(lines[:-1] + [f"Source: `bench/results/{name}.json`. {lines[-1]}"])
    return blocks


def replace_blocks(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each marked block's body replaced; a block the text does not mark is left out."""
    for name, body in blocks.items():
        start, end = f"<!-- figures:{name} -->", f"<!-- /figures:{name} -->"
        if start in text and end in text:
            head, rest = text.split(start, 1)
            _, tail = rest.split(end, 1)
            text = f"{head}{start}\n{body}\n{end}{tail}"
    return text


def write_readme() -> Path:
    README.write_text(replace_blocks(README.read_text(), readme_blocks()))
    return README


if __name__ == "__main__":
    print(write_report())
    print(write_readme())
