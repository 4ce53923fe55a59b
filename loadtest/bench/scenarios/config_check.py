"""config_check: every shipped config checked by the libraries that will run it (``mai-check-config``:
ray.serve.llm's LLMConfig and engine settings, vLLM's whole engine configuration, each model's image
budget against its context), the GPU configs against the released Qwen3-VL checkpoints' config files
(configs/checkpoints), each GPU model's engine as on an H100 (its runner, scheduling, compilation,
executor and sampling defaults), and whether the replicas at max_replicas fit the hardware each config
is written for. Nothing is deployed: the tables are the budget, the GPU engine and the placement of
each model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from harness.paths import ROOT

from ..scenario import Bench, Scenario


@dataclass(frozen=True)
class Parameters:
    configs: tuple[str, ...] = ("mai.yaml", "mai-1gpu.yaml", "mai-cpu.yaml")
    gpu: str = "H100"


# The hardware each GPU config is written for (its comments): GPUs of one host at max_replicas.
HARDWARE = {"mai.yaml": 8, "mai-1gpu.yaml": 1}


RELEASED = {"qwen3-vl-2b": "small", "qwen3-vl-8b": "large"}


def checkpoints_for(serve_config: dict[str, Any]) -> dict[str, str]:
    """The released checkpoints' config files for the roles whose source is a Qwen3-VL hub id."""
    args = serve_config["applications"][0]["args"]
    found = {}
    for folder, role in RELEASED.items():
        if not str(args[role]["source"]).startswith(("./", "/")):
            found[role] = str(ROOT / "configs" / "checkpoints" / folder)
    return found


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    from serve_app.engine_config.engine_check import check_config
    from serve_app.engine_config.inventory import one_host

    results = {}
    for name in parameters.configs:
        serve_config = yaml.safe_load((ROOT / "configs" / name).read_text())
        gpus = HARDWARE.get(name)
        inventory = None if gpus is None else one_host(gpus, parameters.gpu)
        results[name] = check_config(serve_config, checkpoints_for(serve_config), parameters.gpu, inventory)
    return {"configs": results}


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        "Each model as `serve run` would start it, built by ray.serve.llm and vLLM (`mai-check-config`): "
        "the executor, the GPU share, the KV budget, and the image budget against the context. Goal: "
        "every image, the largest stage and a question fit the context.",
        "",
        "| config | model | executor | GPU share | KV budget | max pixels | image tokens | largest stage | "
        "context | left for the question |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, checked in result["configs"].items():
        for model in checked["models"].values():
            budget = model.get("image_budget", {})
            gpu = ", ".join(f"{bundle['GPU']:g}" for bundle in model.get("bundles", []) if "GPU" in bundle)
            kv = model.get("kv_cache_memory_bytes")
            pixels = budget.get("max_pixels")
            lines.append(
                f"| `{name}` | {model['model_id']} | {model.get('executor', '–')} | {gpu or '–'} | "
                f"{'–' if kv is None else f'{kv / 2**30:g} GiB'} | "
                f"{'–' if pixels is None else f'{pixels:,}'} | {budget.get('max_image_tokens', '–')} | "
                f"{budget.get('largest_stage_tokens', '–')} | {model.get('max_model_len', '–')} | "
                f"{budget.get('left_for_the_question', '–')} |"
            )
    lines += [
        "",
        "The GPU models' engines as vLLM 0.32 builds them on the GPU named (its CUDA platform describing "
        "the GPU, the replica's environment, the OpenAI server's usage context: vLLM's decisions, not a "
        "run), and the sampling defaults the checkpoint brings to a passthrough that leaves a field unset "
        "(`generation_config: auto`; the cascade's calls set every field).",
        "",
        "| config | model | GPU | runner | async scheduling | batched tokens | compile | CUDA graphs | "
        "executor | GPU per worker | generation config | checkpoint's sampling |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, checked in result["configs"].items():
        for model in checked["models"].values():
            view = model.get("on_gpu")
            if view is None:
                continue
            sampling = ", ".join(f"{k} {v}" for k, v in (view["checkpoint_sampling_defaults"] or {}).items())
            lines.append(
                f"| `{name}` | {model['model_id']} | {view['gpu']} | {view['runner']} | "
                f"{'on' if view['async_scheduling'] else 'off'} | {view['max_num_batched_tokens']:,} | "
                f"{view['compilation_mode']} | {view['cudagraph_mode']} | {view['executor']} | "
                f"{view['per_worker_gpus']:g} | {view['generation_config']} | {sampling or '–'} |"
            )
    placed = [
        f"`{name}` on " + ", ".join(f"{g['nodes']} x {g['gpus']} {g['gpu']}" for g in checked["inventory"])
        for name, checked in result["configs"].items()
        if checked.get("inventory")
    ]
    if placed:
        lines += ["", f"Every replica at max_replicas fits: {'; '.join(placed)}."]
    return lines


SCENARIO = Scenario(
    name="config_check",
    title="The shipped configs as the engines will see them",
    result="production/config-check.json",
    table=table,
    run=run,
    parameters=Parameters(),
)
