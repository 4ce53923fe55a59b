"""The small and the large VLM as ray.serve.llm LLMServer deployments (vLLM engines).

Everything engine-side is ray.serve.llm's: engine management, placement groups, accelerator pinning,
engine metrics. Routing is ours by default: stage affinity (deployments/stage_router.py) keeps a
request's stages on one replica per model. This module only turns our validated settings into an
``LLMConfig`` with the choices MAI relies on made explicit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .settings import ModelDeployment, ScorerSettings

PREFIX_CACHE_ROUTER = "ray.serve.llm.request_router:PrefixCacheAffinityRouter"
STAGE_AFFINITY_ROUTER = "deployments.stage_router:StageAffinityRouter"
# LLMServer plus the cascade's plain-value call (deployments/model_server.py).
MODEL_SERVER = "deployments.model_server:ModelServer"

# Engine settings MAI depends on; a config's engine_kwargs may override them.
ENGINE_DEFAULTS: dict[str, Any] = {
    "enable_prefix_caching": True,  # every stage of a request shares the image+question prefix
    "enable_prompt_tokens_details": True,  # report cached prompt tokens in usage
    # A cascade request carries one image and never a video: vLLM then profiles no video at start.
    "limit_mm_per_prompt": {"image": 1, "video": 0},
    # vLLM's own server's sampling: a field a request leaves unset takes the checkpoint's
    # generation_config.json (the released Qwen3-VL: temperature 0.7, top_k 20, top_p 0.8;
    # configs/checkpoints/README.md), so a passthrough samples as the model's users expect. The
    # cascade's calls set every sampling field themselves (serve_app/clients/llm_server.py).
    "generation_config": "auto",
}


# What the engines may fetch: nothing. Every image reaches them as a data URL (the ingress checks
# inline images and downloads allowed remote ones itself, with its own address checks), so a URL a
# client names is refused by the engine too: vLLM fetches any http(s) URL when the list is empty, so
# it holds one name that cannot resolve (RFC 6761's .invalid); no local file is readable; no redirect
# is followed. A config cannot loosen these (deployments/settings.py refuses them in engine_kwargs).
NO_MEDIA_DOMAIN = "no-media-fetch.invalid"
ENGINE_FETCHES_NOTHING: dict[str, Any] = {
    "allowed_media_domains": [NO_MEDIA_DOMAIN],
    "allowed_local_media_path": "",
}
ENGINE_ENV: dict[str, str] = {"VLLM_MEDIA_URL_ALLOW_REDIRECTS": "0"}

# vLLM's Ray executor sizes each engine worker from VLLM_RAY_PER_WORKER_GPUS in its own process (the
# engine runs inside the replica actor). ray.serve.llm 2.60 derives the variable from a fractional
# bundle but hands it only to its helper tasks, not to the replica (ray-project/ray#63875): the worker
# then asks for a whole GPU inside a fractional bundle and never starts. The replica's environment
# carries it here; tests/integration/test_configs.py fails once ray.serve.llm does it itself.
PER_WORKER_GPUS = "VLLM_RAY_PER_WORKER_GPUS"


@dataclass(frozen=True)
class EngineTracing:
    """Where an engine sends its own request spans (vLLM's ``otlp_traces_endpoint``), and how: vLLM
    reads only ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` (gRPC when unset), so the replica is given it."""

    endpoint: str
    protocol: str  # http/protobuf or grpc


def replica_env(spec: ModelDeployment) -> dict[str, str]:
    """The environment of the replica actor, where the engine and its executor run: the config's
    variables, what the engines may fetch, and the bundle's share of a GPU when it is a fraction."""
    env = {**spec.env, **ENGINE_ENV}
    if spec.shares_a_gpu():
        env[PER_WORKER_GPUS] = str(spec.gpu_share())
    return env


def engine_bundle(spec: ModelDeployment) -> dict[str, float]:
    """The placement-group bundle of one engine worker: its device plus the pin resources."""
    bundle = (
        dict(spec.bundle)
        if spec.bundle is not None
        else ({"GPU": 1.0} if spec.device == "gpu" else {"CPU": 1.0})
    )
    bundle.update(spec.pin_resources)
    return bundle


def deployment_options(spec: ModelDeployment, drain_s: float | None = None) -> dict[str, Any]:
    """Serve options of the deployment: queue-depth autoscaling, backpressure, routing, and how long a
    retiring replica finishes its calls (``drain_s``: the application's ``drain_s``; None: Serve's
    default)."""
    options: dict[str, Any] = {
        "autoscaling_config": spec.autoscaling.to_serve(),
        "max_ongoing_requests": spec.max_ongoing_requests,
        "max_queued_requests": spec.max_queued_requests,
    }
    options.update(_drain(drain_s))
    if spec.actor_num_cpus is not None:
        options["ray_actor_options"] = {"num_cpus": spec.actor_num_cpus}
    if spec.prefix_cache_routing:
        options["request_router_config"] = {"request_router_class": PREFIX_CACHE_ROUTER}
    elif spec.stage_affinity.enabled:
        options["request_router_config"] = {
            "request_router_class": STAGE_AFFINITY_ROUTER,
            "request_router_kwargs": {
                "max_queue": spec.affinity_max_queue(),
                "pin_ttl_s": spec.stage_affinity.pin_ttl_s,
            },
        }
    return options


def _drain(seconds: float | None) -> dict[str, float]:
    return {} if seconds is None else {"graceful_shutdown_timeout_s": seconds}


def engine_kwargs(spec: ModelDeployment) -> dict[str, Any]:
    """The vLLM engine arguments of one model: MAI's defaults under the config's own, what the engines
    may fetch (nothing) over both, and the hub commit the model is read at when it names one."""
    pinned = {"revision": spec.revision, "tokenizer_revision": spec.revision} if spec.revision else {}
    return {**ENGINE_DEFAULTS, **spec.engine_kwargs, **ENGINE_FETCHES_NOTHING, **pinned}


def images_per_prompt(spec: ModelDeployment) -> int:
    """How many images one prompt may carry to this model's engine (``limit_mm_per_prompt``)."""
    return int(engine_kwargs(spec)["limit_mm_per_prompt"].get("image", 1))


def llm_config_kwargs(
    spec: ModelDeployment, drain_s: float | None = None, tracing: EngineTracing | None = None
) -> dict[str, Any]:
    """The keyword arguments of ``ray.serve.llm.LLMConfig`` for one model (pure; no Ray import);
    ``drain_s``: its graceful shutdown timeout (``deployment_options``); ``tracing``: where its engine
    sends its request spans (none: it makes none)."""
    local = spec.local_source()
    if local is not None and not (local / "config.json").exists():
        raise FileNotFoundError(
            f"model folder {local} (source {spec.source!r} of {spec.model_id!r}) has no config.json; "
            "the trained demo models (models/demo-*) come with the repository (`make demo-models` retrains "
            "them); the random-weight tiny ones are built by `mai-build-tiny` (or `make models`)"
        )
    kwargs: dict[str, Any] = {
        "model_loading_config": {"model_id": spec.model_id, "model_source": str(local or spec.source)},
        "accelerator_config": {"kind": spec.device},
        "engine_kwargs": engine_kwargs(spec),
        "placement_group_config": {"bundle_per_worker": engine_bundle(spec)},
        "deployment_config": deployment_options(spec, drain_s),
        "runtime_env": {"env_vars": replica_env(spec)},
        "server_cls": MODEL_SERVER,
    }
    if spec.accelerator_type:
        kwargs["accelerator_type"] = spec.accelerator_type
    if tracing is not None:
        kwargs["engine_kwargs"]["otlp_traces_endpoint"] = tracing.endpoint
        kwargs["runtime_env"]["env_vars"]["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = tracing.protocol
    return kwargs


def build_vlm_deployment(
    spec: ModelDeployment, role: str, drain_s: float, tracing: EngineTracing | None = None
):
    """The bound deployment of one model, named ``"<role>:<model_id>"``: a ray.serve.llm LLMServer,
    or the EmulatedVLM when ``engine: emulated``; a retiring replica has ``drain_s`` for its calls;
    ``tracing``: where its engine's request spans go."""
    if spec.engine == "emulated":
        return build_emulated_deployment(spec, role, drain_s)
    from ray.serve.llm import LLMConfig, build_llm_deployment

    kwargs = llm_config_kwargs(spec, drain_s, tracing)
    return build_llm_deployment(LLMConfig(**kwargs), name_prefix=f"{role}:")


def build_emulated_deployment(spec: ModelDeployment, role: str, drain_s: float):
    """EmulatedVLM with the same Serve options and pinning as the LLMServer it stands in for."""
    from .emulated_vlm import EmulatedVLM

    options = deployment_options(spec, drain_s)
    if spec.prefix_cache_routing:  # the prefix-cache router needs an engine's KV cache
        options.pop("request_router_config", None)
    options["ray_actor_options"] = {"num_cpus": spec.actor_num_cpus or 0}
    if spec.pin_resources:
        options["placement_group_bundles"] = [{"CPU": 0, **spec.pin_resources}]
    return EmulatedVLM.options(  # type: ignore[attr-defined]  # serve.deployment made it a Deployment
        name=f"{role}:{spec.model_id}", **options
    ).bind(spec.emulation, role, spec.model_id)


def build_scorer_deployment(
    settings: ScorerSettings,
    source: str,
    drain_s: float,
    mm_processor_kwargs: Mapping[str, Any] | None = None,
):
    """The AttentionScorer for sparse reasoning transfer (deployments/scorer.py), scoring with the
    checkpoint at ``source``, its processor under ``mm_processor_kwargs`` (the engine's image budget),
    on the nodes that advertise its ``pin_resources``."""
    from .scorer import AttentionScorer

    actor: dict[str, Any] = {"num_cpus": settings.num_cpus, "num_gpus": settings.num_gpus}
    if settings.pin_resources:
        actor["resources"] = dict(settings.pin_resources)
    return AttentionScorer.options(  # type: ignore[attr-defined]  # serve.deployment made it a Deployment
        autoscaling_config=settings.autoscaling.to_serve(),
        ray_actor_options=actor,
        graceful_shutdown_timeout_s=drain_s,
    ).bind(settings, source, dict(mm_processor_kwargs or {}))
