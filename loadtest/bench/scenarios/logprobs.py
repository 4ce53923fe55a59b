"""logprobs: what asking for the generated tokens' logprobs costs: the large demo model through its
LLMServer handle with and without them, one call at a time, alternating."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from harness.driver import percentile
from harness.local_server import config_args, deploy, replica_counts

from ..scenario import Bench, Scenario
from ..schedule import rotated
from ..summary import spread


@dataclass(frozen=True)
class Parameters:
    questions: int = 60  # calls per repetition
    repetitions: int = 3


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """What asking for the generated tokens' logprobs costs: the large demo model's Simple answer through
    its LLMServer handle with and without ``logprobs``, one call at a time, the two alternating (which
    goes first alternates too), three repetitions; p50 per repetition."""
    records = bench.records

    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    from harness.local_server import deployment_handle
    from serve_app.core.prompts import PromptKind, build_messages

    deploy(config_args("mai-cpu.yaml"))
    [name] = [name for name in replica_counts() if name.startswith("large:")]
    handle = deployment_handle(name).options(stream=True)
    questions = [r for r in records if r["id"].startswith("easy-vqa")][: parameters.questions]

    async def call(record: dict, logprobs: bool) -> float:
        messages = build_messages(record["image"], record["question"], (), "text", PromptKind.SIMPLE)
        request = ChatCompletionRequest(
            model="demo-large", messages=messages, max_tokens=8, temperature=0.0, logprobs=logprobs
        )
        started = time.perf_counter()
        async for _ in handle.chat.remote(request):
            pass
        return time.perf_counter() - started

    async def repetition(index: int) -> dict[str, list[float]]:
        latencies: dict[str, list[float]] = {"with": [], "without": []}
        for i, record in enumerate(questions):
            for flag in rotated((True, False), i + index):
                latencies["with" if flag else "without"].append(await call(record, flag))
        return latencies

    asyncio.run(repetition(-1))  # warm-up, not counted
    runs = [asyncio.run(repetition(index)) for index in range(parameters.repetitions)]
    p50 = {key: [1000 * percentile(run[key], 0.5) for run in runs] for key in ("with", "without")}
    ratios = [w / wo for w, wo in zip(p50["with"], p50["without"], strict=True)]
    return {
        "calls_per_repetition": len(questions),
        "repetitions": parameters.repetitions,
        "p50_ms": {key: spread(values, 2) for key, values in p50.items()},
        "ratio_with_over_without": spread(ratios, 3),
    }


def table(result: dict[str, Any]) -> list[str]:
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


SCENARIO = Scenario(
    name="logprobs",
    title="What answer confidences cost (engine logprobs)",
    result="logprobs.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
