"""A Serve config checked by the libraries that will run it, before any engine starts.

For each model: the ray.serve.llm ``LLMConfig`` the app builds, the engine settings ray.serve.llm makes
of it (``VLLMEngineConfig``: the split into vLLM's engine and front-end arguments, the executor, the
placement bundles), the replica's environment (``VLLM_RAY_PER_WORKER_GPUS`` for a fractional GPU), and
the whole vLLM engine configuration those arguments become, built as the replica builds it
(ray.serve.llm's ``_get_vllm_engine_config``: the OpenAI server's usage context; every value's type and
range, the context against the model's own), plus the model's image budget and what it leaves in the
context (``model_limits``). For a GPU model it also builds the engine as on a GPU
(``gpu_view``: runner, async scheduling, batched tokens, compilation, CUDA graphs, executor) and names
the sampling defaults its checkpoint brings to a passthrough; with ``--gpus N`` or ``--cluster MANIFEST`` it
refuses a config whose replicas at their maximum cannot all be placed (``placement``). For every GPU
config it refuses what a GPU cannot hold: weights, KV cache, activations and CUDA contexts of the
engines (and a GPU scorer) placed on it, on the GPU the config names, else ``--gpu``'s (``memory``).
It needs each model's config files (``config.json``, ``preprocessor_config.json``,
``generation_config.json``): a local folder, the hub, or ``--checkpoint ROLE=FOLDER`` for a copy of them.

    mai-check-config configs/mai.yaml --gpus 8
    mai-check-config configs/mai-1gpu-h200.yaml --gpu H200
    mai-check-config configs/mai-1gpu.yaml --checkpoint small=ckpt/2b --checkpoint large=ckpt/8b \
        --gpu H100 --gpus 1 --json out.json
    mai-check-config k8s/serve-config.yaml --cluster k8s/rayservice.yaml

Exit code 0 when every check passes; otherwise 2, with one line per failing config naming the problem.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from deployments.gpus import DEFAULT_GPU, GPUS
from deployments.vlm import PER_WORKER_GPUS, llm_config_kwargs, replica_env

from ..config import RENAMED_SETTINGS, AppConfig, ModelDeployment, check_application
from ..core.roles import ROLES
from .driver_check import check_driver, driver_line
from .generation_defaults import generation_defaults
from .gpu_view import gpu_view
from .inventory import manifest_groups, one_host
from .memory import memory_check, memory_lines
from .model_limits import _image_processor, context_budgets, prompt_bytes_left
from .placement import NodeGroup, engine_asks, placement_problems

NEXT_RELEASE = "the old name goes in the next release"


def old_settings(args: Mapping[str, Any]) -> tuple[str, ...]:
    """The warnings of a config's ``args`` (as written) for each setting under a name that goes in the
    next release: logged once as the application starts (app.py), printed here."""
    renamed = [(old, new) for old, new in RENAMED_SETTINGS.items() if old in args]
    warnings = [f"{old} is renamed {new}; {NEXT_RELEASE}" for old, new in renamed]
    cascade = args.get("cascade")
    cascade = cascade if isinstance(cascade, Mapping) else {}
    if "eager_reasoning" in cascade:
        warnings.append(
            "cascade.eager_reasoning is another name for a plan: set cascade.adaptive.default: eager; "
            + NEXT_RELEASE
        )
    overload = cascade.get("overload")
    relax_to = overload.get("relax_to") if isinstance(overload, Mapping) else None
    if isinstance(relax_to, Mapping) and "eager_reasoning" in relax_to:
        warnings.append(
            f"cascade.overload.relax_to.eager_reasoning is renamed relax_to.eager; {NEXT_RELEASE}"
        )
    return tuple(warnings)


def engine_settings(spec: ModelDeployment) -> dict[str, Any]:
    """What ray.serve.llm and vLLM make of one model's settings on this machine; raises on the first
    refusal."""
    from ray.llm._internal.serve.engines.vllm.vllm_engine import _get_vllm_engine_config
    from ray.llm._internal.serve.engines.vllm.vllm_models import VLLMEngineConfig
    from ray.serve.llm import LLMConfig
    from vllm.entrypoints.launchers.cli_args import FrontendArgs

    llm = LLMConfig(**check_kwargs(spec))
    engine = VLLMEngineConfig.from_llm_config(llm)  # ray.serve.llm's split: an unknown argument is refused
    FrontendArgs(**engine.frontend_kwargs)
    # As the replica builds it: ray.serve.llm's normalisation, the OpenAI server's usage context.
    _, vllm_config = _get_vllm_engine_config(llm)
    return {
        "model_id": spec.model_id,
        "executor": vllm_config.parallel_config.distributed_executor_backend,
        "bundles": engine.placement_bundles,
        "accelerator_type": llm.accelerator_type,
        # The replica actor's environment, where the engine and its executor run.
        "per_worker_gpus": replica_env(spec).get(PER_WORKER_GPUS),
        "max_model_len": vllm_config.model_config.max_model_len,
        "max_num_batched_tokens": vllm_config.scheduler_config.max_num_batched_tokens,
        "kv_cache_memory_bytes": vllm_config.cache_config.kv_cache_memory_bytes,
        "gpu_memory_utilization": vllm_config.cache_config.gpu_memory_utilization,
        "limit_mm_per_prompt": dict(spec.engine_kwargs.get("limit_mm_per_prompt") or {})
        or llm.engine_kwargs["limit_mm_per_prompt"],
        "mm_processor_kwargs": getattr(
            vllm_config.model_config.multimodal_config, "mm_processor_kwargs", None
        ),
        "scheduling_policy": vllm_config.scheduler_config.policy,
        "generation_config": vllm_config.model_config.generation_config,
    }


def check_kwargs(spec: ModelDeployment) -> dict[str, Any]:
    """The model's ``LLMConfig`` arguments for a check: no tokenizer is loaded (the check needs the
    model's config files, not its tokenizer)."""
    kwargs = llm_config_kwargs(spec)
    kwargs["engine_kwargs"] = kwargs["engine_kwargs"] | {"skip_tokenizer_init": True}
    return kwargs


def on_gpu(spec: ModelDeployment, gpu: str) -> dict[str, Any]:
    """The engine the replica would build on ``gpu`` (serve_app/engine_config/gpu_view.py), and the sampling
    defaults the checkpoint brings under ``generation_config: auto`` (a passthrough's unset fields)."""
    view = gpu_view(check_kwargs(spec), replica_env(spec), gpu)
    view["gpu"] = gpu
    local = spec.local_source()
    view["checkpoint_sampling_defaults"] = generation_defaults(local) if local is not None else None
    return view


def check_config(
    serve_config: Mapping[str, Any],
    checkpoints: Mapping[str, str],
    gpu: str | None = None,
    inventory: Sequence[NodeGroup] | None = None,
    card: str | None = None,
) -> dict[str, Any]:
    """Every check of one Serve config file's application; raises on the first refusal. ``gpu``: also
    build each GPU model's engine as on that GPU (its ``accelerator_type`` when it names a known one).
    ``inventory``: the nodes the config must fit at its maximum replicas. ``card``: the GPU whose
    memory the GPU models must fit when they name none (serve_app/engine_config/memory.py; default
    ``gpu``, else the default GPU)."""
    [application] = serve_config["applications"]
    config = check_application(application)
    driver = check_driver(config)  # first: a driver too old refuses the config before any engine is built
    pins = {role: pinned_at(getattr(config, role)) for role in ROLES}
    config = with_checkpoints(config, checkpoints)
    if inventory is not None:
        problems = placement_problems(engine_asks(config), inventory)
        if problems:
            raise ValueError("; ".join(problems))
    processors = [_image_processor(model) for model in (config.small, config.large)]
    budgets = context_budgets(config, processors)
    left = prompt_bytes_left(budgets)
    models: dict[str, dict[str, Any]] = {}
    for role in ROLES:
        spec: ModelDeployment = getattr(config, role)
        if spec.engine != "vllm":
            models[role] = {"model_id": spec.model_id, "engine": spec.engine}
            continue
        models[role] = engine_settings(spec)
        if gpu is not None and spec.device == "gpu":
            models[role]["on_gpu"] = on_gpu(
                spec, spec.accelerator_type if spec.accelerator_type in GPUS else gpu
            )
    # After vLLM's own checks, which name a value out of its range first.
    memory = memory_check(config, card or gpu or DEFAULT_GPU, inventory)
    if memory and memory["problems"]:
        raise ValueError("; ".join(memory["problems"]))
    for role, budget in zip(ROLES, budgets or [], strict=False):
        models[role]["image_budget"] = budget.as_dict()
    for role in ROLES:
        models[role]["revision"] = pins[role]
    return {
        "models": models,
        "max_prompt_bytes": left,
        "max_passthrough_images": config.limits.max_passthrough_images,
        "inventory": None if inventory is None else [group.__dict__ for group in inventory],
        "driver": driver,
        "memory": memory,
        # Settings under a name that goes in the next release (``old_settings``).
        "warnings": list(old_settings(application.get("args", {}))),
    }


def pinned_at(spec: ModelDeployment) -> str:
    """What a model is read at: its hub commit, ``unpinned`` for a hub source without one (the weights
    can change under a fixed config), or ``local`` for a folder."""
    if spec.local_source() is not None:
        return "local"
    return spec.revision or "unpinned"


def with_checkpoints(config: AppConfig, checkpoints: Mapping[str, str]) -> AppConfig:
    """``config`` with the named roles' sources replaced by local copies of their config files."""
    update = {
        role: getattr(config, role).model_copy(
            update={"source": str(Path(folder).resolve()), "revision": None}
        )
        for role, folder in checkpoints.items()
    }
    return config.model_copy(update=update)


def report(path: str, result: Mapping[str, Any]) -> list[str]:
    """The lines printed for one config: its old settings' warnings, then per model, the engine here
    and on the GPU."""
    lines = [f"{path}: warning: {warning}" for warning in result.get("warnings", ())]
    for role, model in result["models"].items():
        budget = model.get("image_budget", {})
        lines.append(
            f"{path} {role} {model['model_id']}: ok ({model.get('executor')} executor, context "
            f"{model.get('max_model_len')}, {budget.get('images', 1)} image(s) <= "
            f"{budget.get('max_image_tokens')} tokens each, {budget.get('left_for_the_question')} left for "
            "the question)"
        )
        if model.get("revision") == "unpinned":
            lines.append(
                "  revision: none; the weights are the hub repo's when a replica starts (set revision: "
                "<commit> to pin them)"
            )
        view = model.get("on_gpu")
        if view is None:
            continue
        kv = view["kv_cache_memory_bytes"]
        memory = (
            f"KV {kv / 2**30:g} GiB fixed" if kv else f"KV from {view['gpu_memory_utilization']:g} of the GPU"
        )
        released = view.get("checkpoint_sampling_defaults")
        sampling = f"generation_config {view['generation_config']}: a passthrough's unset sampling "
        if released:
            sampling += "takes the checkpoint's " + ", ".join(f"{k} {v}" for k, v in released.items())
        else:
            sampling += "takes vLLM's (the checkpoint declares none)"
        lines.append(
            f"  on {view['gpu']}: runner {view['runner']}, async scheduling "
            f"{'on' if view['async_scheduling'] else 'off'}, "
            f"{view['max_num_batched_tokens']} batched tokens, "
            f"compile {view['compilation_mode']}, CUDA graphs {view['cudagraph_mode']}, executor "
            f"{view['executor']} at {view['per_worker_gpus']:g} GPU per worker, {memory}, image <= "
            f"{budget.get('max_image_tokens')} tokens, {sampling})"
        )
    inventory = result.get("inventory")
    if inventory:
        groups = ", ".join(
            f"{group['nodes']} x {group['gpus']} {group['gpu'] or 'GPU'}" for group in inventory
        )
        lines.append(f"{path}: every replica fits the inventory ({groups}) at max_replicas")
    lines += memory_lines(path, result.get("memory"))
    return lines + driver_line(path, result.get("driver"))


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
    parser.add_argument(
        "--gpu",
        default=DEFAULT_GPU,
        choices=sorted(GPUS),
        help=f"the GPU a model without a known accelerator_type runs on (default {DEFAULT_GPU})",
    )
    parser.add_argument("--no-gpu-view", action="store_true", help="skip building the engines as on the GPU")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--gpus", type=int, metavar="N", help="the config must fit one host with N GPUs (--gpu)"
    )
    where.add_argument(
        "--cluster",
        type=Path,
        metavar="MANIFEST",
        help="the config must fit the node groups of this RayService or RayJob (at their maxReplicas)",
    )
    parser.add_argument("--json", type=Path, help="write every config's result here")
    args = parser.parse_args(argv)
    checkpoints = dict(item.split("=", 1) for item in args.checkpoint)
    unknown = sorted(set(checkpoints) - set(ROLES))
    if unknown:
        parser.error(f"--checkpoint names {', '.join(unknown)}; the roles are small and large")
    inventory = None
    if args.gpus is not None:
        if args.gpus < 0:
            parser.error("--gpus must be 0 or more")
        inventory = one_host(args.gpus, args.gpu)
    elif args.cluster is not None:
        inventory = manifest_groups(yaml.safe_load(args.cluster.read_text()))
    gpu = None if args.no_gpu_view else args.gpu
    results: dict[str, Any] = {}
    failed = False
    for path in args.config:
        try:
            results[path] = check_config(
                yaml.safe_load(Path(path).read_text()), checkpoints, gpu, inventory, args.gpu
            )
        except Exception as exc:  # one line naming the problem: the point of the command
            line = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            print(f"{path}: {line}", file=sys.stderr)
            results[path], failed = {"error": line}, True
            continue
        print("\n".join(report(path, results[path])))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
