"""logprob_stages: what a cascade call's logprobs cost the ingress, per stage kind, and what asking
only where the confidence is read saves a request.

Each stage kind's call is sent as the cascade sends it (``LLMServerClient.body``: the plain call to the
model's replica, ``ModelServer.complete``) at the GPU configs' token budgets, decoding every token
(``ignore_eos``), with and without logprobs, alternating; what the ingress receives (the reply's
pickled bytes) and the ingress's CPU to turn it into a ``Completion`` (``_completion_of``, timed in
this process) are measured. A request's figures follow from the stages its route runs (``table``),
under the rule before (every stage asked when ``answer_logprobs``) and the current one
(``verification.confidence_read``).
"""

from __future__ import annotations

import asyncio
import pickle
import statistics
import time
from dataclasses import dataclass
from typing import Any

from harness.local_server import config_args, deploy, deployment_handle, replica_counts

from ..scenario import Bench, Scenario
from ..schedule import rotated
from ..summary import spread

# The GPU configs' budgets (configs/mai.yaml cascade.max_tokens), by stage kind.
BUDGETS = {"simple": 32, "reasoning": 2048, "explain": 512, "transfer": 32}
# The stages each route or policy runs (the cascade's paper defaults: inline reasoning answers).
ROUTES = {
    "cascade, agree_short": ("simple", "simple"),
    "cascade, agree_reasoned": ("simple", "simple", "reasoning"),
    "cascade, transfer": ("simple", "simple", "reasoning", "transfer"),
    "small-explain": ("explain",),
}


@dataclass(frozen=True)
class Parameters:
    calls: int = 4  # calls per stage kind and arm, per repetition
    repetitions: int = 3


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    from serve_app.clients.llm_server import LLMServerClient, _completion_of
    from serve_app.core.contracts import EngineCall
    from serve_app.core.prompts import PromptKind, build_messages

    records = [r for r in bench.records if r["id"].startswith("easy-vqa")]
    deploy(config_args("mai-cpu.yaml", {"transfer_selection": {"attention": False}}))
    [name] = [name for name in replica_counts() if name.startswith("small:")]
    handle = deployment_handle(name)
    client = LLMServerClient(handle, name.split(":", 1)[1])

    async def call(kind: str, logprobs: bool, record: dict) -> tuple[int, float]:
        prompt = PromptKind(kind)
        reasoning = "The shape is red." if prompt is PromptKind.TRANSFER else None
        messages = build_messages(
            record["image"], record["question"], (), "text", prompt, reasoning=reasoning
        )
        engine_call = EngineCall("bench", f"{kind}_small", prompt, confidence=logprobs)
        body = client.body(messages, max_tokens=BUDGETS[kind], call=engine_call)
        body["ignore_eos"] = True  # every budgeted token decoded, as a long reasoning's
        reply = await handle.complete.remote(body)
        size = len(pickle.dumps(reply))
        started = time.process_time()
        _completion_of(reply, client.model_id, 0.0)
        return size, time.process_time() - started

    async def repetition(index: int) -> dict[str, dict[str, list[tuple[int, float]]]]:
        measured: dict[str, dict[str, list[tuple[int, float]]]] = {
            kind: {"with": [], "without": []} for kind in BUDGETS
        }
        for i in range(parameters.calls):
            record = records[(index * parameters.calls + i) % len(records)]
            for kind in BUDGETS:
                for flag in rotated((True, False), i + index):
                    measured[kind]["with" if flag else "without"].append(await call(kind, flag, record))
        return measured

    asyncio.run(repetition(-1))  # warm-up, not counted
    runs = [asyncio.run(repetition(index)) for index in range(parameters.repetitions)]
    stages: dict[str, Any] = {}
    for kind in BUDGETS:
        stages[kind] = {"max_tokens": BUDGETS[kind]}
        for arm in ("with", "without"):
            size = [statistics.median(s for s, _ in run[kind][arm]) for run in runs]
            cpu = [1000 * statistics.median(c for _, c in run[kind][arm]) for run in runs]
            stages[kind][arm] = {"reply_bytes": spread(size, 0), "parse_cpu_ms": spread(cpu, 3)}
    return {
        "calls_per_kind_and_arm": parameters.calls,
        "repetitions": parameters.repetitions,
        "stages": stages,
    }


# The rules compared: every stage asks (before), and only where the confidence is read (after), under
# the paper's rule (min_confidence 0, the GPU configs') and under a threshold.
RULES: dict[str, dict[str, Any] | None] = {
    "before": None,
    "after": {},
    "after, min_confidence > 0": {"min_confidence": 0.5},
}


def per_request(stages: dict[str, Any], kinds: tuple[str, ...]) -> dict[str, Any]:
    """A request's reply bytes and parse CPU (medians summed) under each rule of ``RULES``."""
    from serve_app.core.options import CascadeOptions
    from serve_app.core.prompts import PromptKind
    from serve_app.core.verification import confidence_read

    def asks(kind: str, options: dict[str, Any] | None) -> bool:
        return options is None or confidence_read(PromptKind(kind), CascadeOptions(**options))

    def total(options: dict[str, Any] | None, field: str) -> float:
        return sum(
            stages[kind]["with" if asks(kind, options) else "without"][field]["median"] for kind in kinds
        )

    return {
        rule: {
            "reply_bytes": round(total(options, "reply_bytes")),
            "parse_cpu_ms": round(total(options, "parse_cpu_ms"), 3),
        }
        for rule, options in RULES.items()
    }


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        "Each stage kind's call to the small demo model as the cascade sends it, at the GPU configs' "
        "budgets with every token decoded, with and without logprobs, alternating; "
        f"{result['repetitions']} repetitions of {result['calls_per_kind_and_arm']} calls per kind and "
        "arm: the reply's pickled bytes (what the ingress receives) and the ingress's CPU to read it, "
        "median per repetition, median [min–max].",
        "",
        "| stage | max tokens | bytes with | bytes without | parse ms with | parse ms without |",
        "|---|---|---|---|---|---|",
    ]
    for kind, stage in result["stages"].items():
        w, wo = stage["with"], stage["without"]
        lines.append(
            f"| {kind} | {stage['max_tokens']} | {w['reply_bytes']['median']:,.0f} | "
            f"{wo['reply_bytes']['median']:,.0f} | {_cell(w['parse_cpu_ms'])} | {_cell(wo['parse_cpu_ms'])} |"
        )
    lines += [
        "",
        "Per request, from those medians: every stage asking for logprobs (before) and only the stages "
        "whose answer confidence is read (after: the short answers; the inline reasoning too under "
        "`min_confidence` > 0).",
        "",
        "| route | "
        + " | ".join(f"bytes {rule}" for rule in RULES)
        + " | "
        + " | ".join(f"parse ms {rule}" for rule in RULES)
        + " |",
        "|---|" + "---|" * (2 * len(RULES)),
    ]
    for route, kinds in ROUTES.items():
        figures = per_request(result["stages"], kinds)
        cells = [f"{figures[rule]['reply_bytes']:,}" for rule in RULES]
        cells += [f"{figures[rule]['parse_cpu_ms']}" for rule in RULES]
        lines.append(f"| {route} | " + " | ".join(cells) + " |")
    return lines


def _cell(value: dict[str, float]) -> str:
    return f"{value['median']} [{value['min']}–{value['max']}]"


SCENARIO = Scenario(
    name="logprob_stages",
    title="Logprobs where they are read (reply bytes and ingress CPU per stage)",
    result="logprob-stages.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
