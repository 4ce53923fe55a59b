"""selector: what the attention selector costs on the CPU stack: the AttentionScorer deployment called
through Serve, and the same scoring with the same checkpoint in this process, by reasoning length;
the budget selector beside it (costs, not accuracy)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from harness.driver import percentile
from harness.local_server import config_args, deploy

from ..scenario import Bench, Scenario


@dataclass(frozen=True)
class Parameters:
    repeats: int = 10  # calls per reasoning length


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """What the attention selector costs on the CPU stack: the AttentionScorer deployment called
    through Serve, and the same scoring with the same checkpoint in this process, by reasoning length;
    the budget selector beside it. The reasoning is written text of known length (the demo models'
    own is one length)."""
    records = bench.records
    from deployments.attention import ReasoningScorer
    from harness.local_server import deployment_handle
    from serve_app.config import load_app_config
    from serve_app.core.transfer_selectors import budget_select

    args = config_args("mai-cpu.yaml")
    deploy(args)
    handle = deployment_handle("AttentionScorer")
    # In process, the very checkpoint the served AttentionScorer loads.
    config = load_app_config(args)
    scorer = ReasoningScorer(config.scorer_source(), mm_processor_kwargs=config.scorer_mm_processor_kwargs())
    image, question = records[0]["image"], "What is the value of the red bar?"
    sentence = "the red bar is taller than the blue bar so the answer is 42"
    repeats = parameters.repeats
    rows = {}
    for words in (32, 128, 512, 2048):
        reasoning = " ".join([sentence] * (words // 13 + 1))
        served, local, budget = [], [], []
        for _ in range(repeats):
            started = time.perf_counter()
            result = handle.select.remote(image, question, reasoning, 0.8, -1).result()
            served.append(time.perf_counter() - started)
            local.append(scorer.select(image, question, reasoning, delta=0.8)["seconds"])
            started = time.perf_counter()
            kept = budget_select(reasoning, 48, 48)
            budget.append(time.perf_counter() - started)
        rows[str(result["tokens_before"])] = {
            "attention_served_p50_ms": round(1000 * percentile(served, 0.5), 2),
            "attention_in_process_p50_ms": round(1000 * percentile(local, 0.5), 2),
            "attention_tokens_kept": result["tokens_after"],
            "attention_mass_kept": round(result["mass"], 3),
            "budget_p50_ms": round(1000 * percentile(budget, 0.5), 3),
            "budget_words_kept": f"{kept.tokens_after} of {kept.tokens_before}",
        }
    return {
        "repeats": repeats,
        "delta": 0.8,
        "by_reasoning_tokens": rows,
        "scorer_checkpoint": config.scorer_source(),
        "note": "the demo small model's checkpoint on 2 CPU cores: costs, not accuracy",
    }


def table(result: dict[str, Any]) -> list[str]:
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


SCENARIO = Scenario(
    name="selector",
    title="Sparse reasoning transfer: selector cost",
    result="selector.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
