"""prefix_cache: the share of the reasoning and transfer stages' prompts the engines serve from their
prefix cache (each stage's cached_tokens) on the CPU stack, with the default KV block and smaller."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evaluation.requests import user_message
from harness.local_server import config_args, deploy

from ..scenario import Bench, Scenario


@dataclass(frozen=True)
class Parameters:
    questions: int = 60  # asked one at a time per block size
    block_sizes: tuple[int | None, ...] = (None, 32, 16)  # None: the CPU backend's default (128)


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """How much of the reasoning and transfer stages' prompts the engines serve from their prefix cache
    on the CPU stack: ``mai`` on the demo pair, one request at a time, with the CPU backend's default KV
    block (128 tokens) and with 32 and 16, as each stage's ``cached_tokens`` reports it."""
    url, records = bench.url, bench.records
    import httpx

    from harness.paths import ROOT

    questions = [r for r in records if r["id"].startswith("easy-vqa")][: parameters.questions]
    prefix = shared_prefix_tokens(str(ROOT / "models" / "demo-small"), "Is there a red shape in the image?")
    runs: dict[str, Any] = {}
    for block in parameters.block_sizes:
        label = "default" if block is None else str(block)
        overrides = (
            {}
            if block is None
            else {role: {"engine_kwargs": {"block_size": block}} for role in ("small", "large")}
        )
        try:
            deploy(config_args("mai-cpu.yaml", overrides))
        except Exception as error:  # an engine that refuses the block size: recorded, not fatal
            runs[label] = {"block_size": block, "deployed": False, "error": str(error)[:300]}
            continue
        totals: dict[str, list[int]] = {}
        with httpx.Client(base_url=url, timeout=120) as http:
            for record in questions:
                body = {"model": "mai", "messages": [user_message(record["image"], record["question"])]}
                response = http.post("/v1/chat/completions", json=body)
                response.raise_for_status()
                for stage in response.json()["mai"]["trace"]["stages"]:
                    if stage["status"] == "ok" and stage.get("cached_tokens") is not None:
                        counts = totals.setdefault(stage["name"], [0, 0, 0])
                        counts[0] += stage["cached_tokens"]
                        counts[1] += stage["prompt_tokens"]
                        counts[2] += 1
        runs[label] = {
            "block_size": block,
            "deployed": True,
            "stages": {
                name: {
                    "calls": calls,
                    "prompt_tokens_per_call": round(prompt / calls, 1),
                    "cached_tokens_per_call": round(cached / calls, 1),
                    "cached_share_of_prompt": round(cached / prompt, 3),
                    "cached_share_of_shared_prefix": round(
                        cached / calls / prefix["shared_prefix_tokens"], 3
                    ),
                }
                for name, (cached, prompt, calls) in totals.items()
            },
        }
    return {
        "requests": len(questions),
        "prompts": prefix,
        "runs": runs,
        "goal": "reasoning and transfer stages: >= 80 % of the image+question prefix served from the cache",
        "note": "configs/mai-cpu.yaml (demo pair, 1 replica per model), one request at a time; block_size "
        "overrides both engines' KV block; vLLM only caches full blocks",
    }


def shared_prefix_tokens(model_folder: str, question: str) -> dict[str, int]:
    """Prompt tokens of the Simple, Reasoning and transfer prompts for one easy-vqa question on the demo
    pair (16 image tokens), and how many of them the three share from the start (image + question)."""
    from transformers import AutoTokenizer

    from harness.local_server import config_args
    from serve_app.config import load_app_config
    from serve_app.core.prompts import PromptKind, PromptLayout, build_messages

    tokenizer = AutoTokenizer.from_pretrained(model_folder)
    layout = PromptLayout(load_app_config(config_args("mai-cpu.yaml")).small.prompt_layout)

    def ids(kind: PromptKind, **extra: Any) -> list[int]:
        messages = build_messages(["data:,"], question, (), "yes_no", kind, layout=layout, **extra)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text.replace("<|image_pad|>", "<|image_pad|>" * 16), add_special_tokens=False)[
            "input_ids"
        ]

    prompts = {
        "simple": ids(PromptKind.SIMPLE),
        "reasoning": ids(PromptKind.REASONING),
        "transfer": ids(PromptKind.TRANSFER, reasoning="The image shows a red circle. [[yes]]"),
    }
    shared = 0
    while all(len(p) > shared for p in prompts.values()) and len({p[shared] for p in prompts.values()}) == 1:
        shared += 1
    return {f"{kind}_prompt_tokens": len(p) for kind, p in prompts.items()} | {"shared_prefix_tokens": shared}


def table(result: dict[str, Any]) -> list[str]:
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


SCENARIO = Scenario(
    name="prefix_cache",
    title="Prefix cache on the CPU stack",
    result="prefix_cache.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
