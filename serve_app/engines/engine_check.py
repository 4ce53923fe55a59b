"""A Serve config checked by the libraries that will run it, before any engine starts.

For each model: the ray.serve.llm ``LLMConfig`` the app builds, the engine settings ray.serve.llm makes
of it (``VLLMEngineConfig``: the split into vLLM's engine and front-end arguments, the executor, the
placement bundles, ``VLLM_RAY_PER_WORKER_GPUS``), and the whole vLLM engine configuration those
arguments become (``AsyncEngineArgs.create_engine_config``: every value's type and range, the context
against the model's own), plus the model's image budget and what it leaves in the context
(``model_limits``). It needs each model's config files (``config.json``, ``preprocessor_config.json``):
a local folder, the hub, or ``--checkpoint ROLE=FOLDER`` for a copy of them.

    mai-check-config configs/mai.yaml
    mai-check-config configs/mai-1gpu.yaml --checkpoint small=ckpt/2b --checkpoint large=ckpt/8b \
        --json out.json

Exit code 0 when every check passes; otherwise 2, with one line per failing config naming the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from deployments.vlm import llm_config_kwargs

from ..config import AppConfig, ModelDeployment, check_application
from ..core.roles import ROLES
from .model_limits import _image_processor, context_budgets, prompt_bytes_left


def engine_settings(spec: ModelDeployment, checkpoint: str | None = None) -> dict[str, Any]:
    """What ray.serve.llm and vLLM make of one model's settings; raises on the first refusal.
    ``checkpoint``: a folder with the model's config files, instead of its source."""
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
    from ray.serve.llm import LLMConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    llm = LLMConfig(**llm_config_kwargs(spec))
    engine = VLLMEngineConfig.from_llm_config(llm)  # an unknown engine argument is refused here
    FrontendArgs(**engine.frontend_kwargs)
    arguments = engine.get_initialization_kwargs()
    if checkpoint is not None:
        arguments["model"] = checkpoint
    arguments["skip_tokenizer_init"] = True  # the check needs the model's config, not its tokenizer
    vllm_config = AsyncEngineArgs(**arguments).create_engine_config()  # types, ranges, the context
    env = engine.get_runtime_env_with_local_env_vars().get("env_vars", {})
    return {
        "model_id": spec.model_id,
        "executor": vllm_config.parallel_config.distributed_executor_backend,
        "bundles": engine.placement_bundles,
        "accelerator_type": llm.accelerator_type,
        "per_worker_gpus": env.get("VLLM_RAY_PER_WORKER_GPUS"),
        "max_model_len": vllm_config.model_config.max_model_len,
        "kv_cache_memory_bytes": vllm_config.cache_config.kv_cache_memory_bytes,
        "gpu_memory_utilization": vllm_config.cache_config.gpu_memory_utilization,
        "limit_mm_per_prompt": dict(spec.engine_kwargs.get("limit_mm_per_prompt") or {})
        or llm.engine_kwargs["limit_mm_per_prompt"],
        "mm_processor_kwargs": getattr(
            vllm_config.model_config.multimodal_config, "mm_processor_kwargs", None
        ),
        "scheduling_policy": vllm_config.scheduler_config.policy,
    }


def check_config(serve_config: Mapping[str, Any], checkpoints: Mapping[str, str]) -> dict[str, Any]:
    """Every check of one Serve config file's application; raises on the first refusal."""
    [application] = serve_config["applications"]
    config = check_application(application)
    config = with_checkpoints(config, checkpoints)
    processors = [_image_processor(model) for model in (config.small, config.large)]
    budgets = context_budgets(config, processors)
    left = prompt_bytes_left(budgets)
    models: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        spec: ModelDeployment = getattr(config, role)
        if spec.engine != "vllm":
            models[role] = {"model_id": spec.model_id, "engine": spec.engine}
            continue
        models[role] = engine_settings(spec, checkpoints.get(role))
    for role, budget in zip(ROLES, budgets or [], strict=False):
        models[role]["image_budget"] = budget.as_dict()
    return {
        "models": models,
        "max_prompt_bytes": left,
        "max_passthrough_images": config.limits.max_passthrough_images,
    }


def with_checkpoints(config: AppConfig, checkpoints: Mapping[str, str]) -> AppConfig:
    """``config`` with the named roles' sources replaced by local copies of their config files."""
    update = {
        role: getattr(config, role).model_copy(update={"source": str(Path(folder).resolve())})
        for role, folder in checkpoints.items()
    }
    return config.model_copy(update=update)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mai-check-config", description=__doc__.split("\n\n")[0])
    parser.add_argument("config", nargs="+", help="Serve config files (configs/*.yaml)")
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="ROLE=FOLDER",
        help="a folder with the config files of the small or large model, instead of its source",
    )
    parser.add_argument("--json", type=Path, help="write every config's result here")
    args = parser.parse_args(argv)
    checkpoints = dict(item.split("=", 1) for item in args.checkpoint)
    unknown = sorted(set(checkpoints) - set(ROLES))
    if unknown:
        parser.error(f"--checkpoint names {', '.join(unknown)}; the roles are small and large")
    results: dict[str, Any] = {}
    failed = False
    for path in args.config:
        try:
            results[path] = check_config(yaml.safe_load(Path(path).read_text()), checkpoints)
        except Exception as exc:  # one line naming the problem: the point of the command
            line = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            print(f"{path}: {line}", file=sys.stderr)
            results[path], failed = {"error": line}, True
            continue
        for role, model in results[path]["models"].items():
            budget = model.get("image_budget", {})
            print(
                f"{path} {role} {model['model_id']}: ok ({model.get('executor')} executor, context "
                f"{model.get('max_model_len')}, image <= {budget.get('max_image_tokens')} tokens, "
                f"{budget.get('left_for_the_question')} left for the question)"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
