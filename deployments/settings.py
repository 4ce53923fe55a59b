"""Validated settings of a model deployment (and the autoscaling shared by every deployment)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .gpus import GPUS
from .memory import card_problems, need_of
from .paper_profile import Dataset, ModelSize

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Autoscaling(Strict):
    """Queue-depth autoscaling: Serve adds replicas while the ongoing requests per replica stay
    above ``target_ongoing_requests``."""

    min_replicas: int = Field(1, ge=0)
    initial_replicas: int | None = Field(None, ge=0)
    max_replicas: int = Field(1, ge=1)
    target_ongoing_requests: float = Field(..., gt=0)
    upscale_delay_s: float = Field(30.0, ge=0)
    downscale_delay_s: float = Field(600.0, ge=0)
    look_back_period_s: float = Field(30.0, gt=0)
    # How often replicas and handles report their metrics to the autoscaler. Serve 2.60 reads it
    # from here (deprecated there, yet its replacement environment variables are not read); None:
    # Serve's default, 10 s.
    metrics_interval_s: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> Autoscaling:
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"min_replicas ({self.min_replicas}) exceeds max_replicas ({self.max_replicas})")
        if (
            self.initial_replicas is not None
            and not self.min_replicas <= self.initial_replicas <= self.max_replicas
        ):
            raise ValueError("initial_replicas must lie between min_replicas and max_replicas")
        if self.metrics_interval_s is not None and self.metrics_interval_s >= self.look_back_period_s:
            raise ValueError("metrics_interval_s must be under look_back_period_s (the window it fills)")
        return self

    def to_serve(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class EmulationSettings(Strict):
    """The emulated engine (deployments/emulated_vlm.py): the paper's H100 profile of one model size."""

    profile: ModelSize = Field(..., description="which Qwen3-VL size to emulate: 2b, 4b or 8b")
    dataset: Dataset = Field("chartqa", description="whose token counts and route shares to replay")
    seed: int = 0
    max_num_seqs: int = Field(64, ge=1, description="sequences decoded at once; the rest wait")
    batch_slowdown: float = Field(0.02, ge=0, description="per-token time x (1 + this x (batch - 1))")
    time_scale: float = Field(1.0, ge=0, description="multiplies every latency; 0 answers at once")
    image_tokens: int = Field(256, ge=0, description="prompt tokens per image (256 = a 512x512 image)")
    token_spread: float = Field(0.3, ge=0, description="coefficient of variation of completion tokens")
    decode_chunk_tokens: int = Field(16, ge=1, description="tokens per sleep while decoding")
    # Scripted answer confidences (logprobs), so the calibrated verification is load-tested too. They
    # are a script, not a measurement: a share of stage-1 agreements is scripted as wrong, and its
    # answers' confidences are drawn lower by about confidence_separation.
    wrong_agreement_share: float = Field(0.14, ge=0, le=1, description="stage-1 agreements scripted as wrong")
    confidence_separation: float = Field(
        0.3, ge=0, le=1, description="how much less sure a wrong agreement is"
    )


class StageAffinity(Strict):
    """Stage-affinity routing (deployments/affinity.py): every call of one cascade request to this model
    goes to one replica, whose prefix cache holds the request's image and question."""

    enabled: bool = True
    max_queue: int | None = Field(
        None,
        ge=1,
        description="a replica with this many requests queued or running is passed over for the less "
        "loaded of two (default: half of max_ongoing_requests, at least 1)",
    )
    pin_ttl_s: float = Field(
        900.0, gt=0, description="how long a request keeps its replica after its last call"
    )


class ModelDeployment(Strict):
    """One VLM deployment: a ray.serve.llm LLMServer running vLLM."""

    model_id: str = Field(..., min_length=1, description="the name the engine serves the model under")
    source: str = Field(
        ..., min_length=1, description="a Hugging Face repo id, or a local folder ('./...' or '/...')"
    )
    revision: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{40}$",
        description="the hub commit the weights, config and tokenizer are read at (a hub source only); "
        "without it they are whatever the repo holds when a replica starts",
    )
    device: Literal["gpu", "cpu"] = "gpu"
    # "emulated" replaces the engine by EmulatedVLM (load tests without GPUs); never for real serving.
    engine: Literal["vllm", "emulated"] = "vllm"
    emulation: EmulationSettings | None = None
    accelerator_type: str | None = Field(None, description="e.g. 'L4', 'A10G', 'H100' (GPU only)")
    # Pinning: a custom resource the replica's placement-group bundle asks for, e.g. {"mai_small": 1};
    # only the node (or KubeRay worker group) that advertises it can host the model.
    pin_resources: dict[str, float] = Field(default_factory=dict)
    # Resources of the engine's bundle besides the pin (default: one GPU, or one CPU on cpu).
    bundle: dict[str, float] | None = None
    actor_num_cpus: float | None = Field(None, ge=0, description="num_cpus of the LLMServer actor itself")
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(
        default_factory=dict, description="environment of the replica (e.g. VLLM_CPU_KVCACHE_SPACE)"
    )
    autoscaling: Autoscaling = Autoscaling(target_ongoing_requests=16)
    max_ongoing_requests: int = Field(64, ge=1)
    max_queued_requests: int = Field(
        256, ge=1, description="beyond this the caller gets a fast 503, not a queue"
    )
    # Seconds a retiring replica (a scale-down, a config edit, an upgrade) has to finish its calls before
    # Serve stops it. Unset: derived by the application from its timeouts (serve_app/core/lifecycle.py);
    # set, at least that.
    graceful_shutdown_timeout_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    # Off by default: on Ray 2.60 ray.serve.llm's PrefixCacheAffinityRouter stops routing to a replica
    # with free capacity once callers cancel requests (eager plans, audits, timeouts, client
    # disconnects): measured on the CPU stack, 160 eager requests at concurrency 8 finished in 22 s
    # without it and stalled for good with it (docs/scaling.md, "Stage affinity").
    prefix_cache_routing: bool = Field(
        False, description="route requests with the same prefix to the same replica"
    )
    stage_affinity: StageAffinity = StageAffinity()
    # How the model reads a prompt's question and instruction (serve_app/core/prompts.py, PromptLayout):
    # separate_line is the paper's (the instruction on a line of its own), and the demo models were trained
    # on it (models/demo-*/mai-demo.json); joined, back to back, is for a model trained that way.
    prompt_layout: Literal["separate_line", "joined"] = "separate_line"

    @model_validator(mode="after")
    def _consistent(self) -> ModelDeployment:
        if self.device == "cpu" and self.accelerator_type:
            raise ValueError("accelerator_type is for GPU deployments; remove it or set device: gpu")
        if (self.engine == "emulated") != (self.emulation is not None):
            raise ValueError("engine: emulated needs an emulation: section, and only it takes one")
        if self.autoscaling.target_ongoing_requests > self.max_ongoing_requests:
            raise ValueError("autoscaling.target_ongoing_requests must not exceed max_ongoing_requests")
        if self.prefix_cache_routing and self.stage_affinity.enabled:
            raise ValueError(
                "prefix_cache_routing and stage_affinity are two request routers: set "
                "stage_affinity.enabled: false to use prefix_cache_routing"
            )
        if self.device == "gpu" and self.engine == "vllm" and not 0 < self.gpu_share() <= 1:
            raise ValueError(
                f"{self.model_id}: bundle GPU {self.gpu_share()} is not a share of one GPU: an engine worker "
                "runs on a fraction of a GPU or a whole one (0 < GPU <= 1); more GPUs per engine are "
                "engine_kwargs.tensor_parallel_size"
            )
        declared = self.env.get("VLLM_RAY_PER_WORKER_GPUS")
        if declared is not None and (not self.shares_a_gpu() or declared != str(self.gpu_share())):
            raise ValueError(
                f"{self.model_id}: env.VLLM_RAY_PER_WORKER_GPUS {declared!r} differs from the bundle's GPU "
                f"share {self.gpu_share()}; remove it: the server sets it from the bundle"
            )
        if self.shares_a_gpu() and "kv_cache_memory_bytes" not in self.engine_kwargs:
            raise ValueError(
                f"{self.model_id}: bundle GPU {self.gpu_share()} shares a GPU with another engine, so it "
                "needs engine_kwargs.kv_cache_memory_bytes: vLLM sizes its KV cache from memory measured "
                "over the whole device, and engines starting together miscount each other's"
            )
        budget = self.engine_kwargs.get("kv_cache_memory_bytes")
        if budget is not None and (not isinstance(budget, int) or budget <= 0):
            raise ValueError(
                f"{self.model_id}: engine_kwargs.kv_cache_memory_bytes must be a positive number of bytes, "
                f"got {budget!r}"
            )
        if self.device == "gpu" and self.engine == "vllm" and self.accelerator_type in GPUS:
            # On the GPU it names, the engine alone must fit (deployments/memory.py): vLLM would refuse
            # it only once it has loaded its weights, or not at all with a fixed KV budget.
            problems = card_problems(str(self.accelerator_type), [need_of(self.model_id, self)])
            if problems:
                raise ValueError("; ".join(problems))
        if self.revision is not None and self.local_source() is not None:
            raise ValueError(
                f"{self.model_id}: revision is for a hub source; {self.source!r} is a local folder"
            )
        pinned = sorted(set(self.engine_kwargs) & {"revision", "tokenizer_revision"})
        if pinned:
            raise ValueError(f"{self.model_id}: engine_kwargs.{pinned[0]} is set from the model's revision")
        fetching = sorted(set(self.engine_kwargs) & {"allowed_media_domains", "allowed_local_media_path"})
        if fetching:
            raise ValueError(
                f"{self.model_id}: engine_kwargs.{fetching[0]} is set by the server: the engines fetch no "
                "media (the ingress downloads allowed remote images itself: limits.allow_remote_images)"
            )
        if "VLLM_MEDIA_URL_ALLOW_REDIRECTS" in self.env:
            raise ValueError(f"{self.model_id}: env.VLLM_MEDIA_URL_ALLOW_REDIRECTS is set by the server")
        limits = self.engine_kwargs.get("limit_mm_per_prompt", {})
        unknown = sorted(set(limits) - {"image", "video", "audio"})
        if unknown:
            raise ValueError(
                f"{self.model_id}: engine_kwargs.limit_mm_per_prompt names {', '.join(unknown)}; "
                "the modalities are image, video and audio"
            )
        bound = self.stage_affinity.max_queue
        if bound is not None and bound > self.max_ongoing_requests:
            raise ValueError(
                f"stage_affinity.max_queue ({bound}) must not exceed max_ongoing_requests "
                f"({self.max_ongoing_requests}): a replica takes no more"
            )
        return self

    def gpu_share(self) -> float:
        """The share of a GPU the engine's bundle asks for (0 on CPU)."""
        if self.device != "gpu":
            return 0.0
        return float((self.bundle or {"GPU": 1.0}).get("GPU", 0.0))

    def shares_a_gpu(self) -> bool:
        """Whether the engine runs on a fraction of a GPU, beside another engine."""
        return self.engine == "vllm" and 0 < self.gpu_share() < 1

    def affinity_max_queue(self) -> int:
        """The stage-affinity queue bound: as configured, else half of max_ongoing_requests."""
        return self.stage_affinity.max_queue or max(1, self.max_ongoing_requests // 2)

    def local_source(self) -> Path | None:
        """The local folder ``source`` names, resolved (relative paths against the current folder,
        then the project root), or None for a hub repo id."""
        return local_folder(self.source)


def local_folder(source: str) -> Path | None:
    """The local folder a model ``source`` names (relative paths against the current folder, then the
    project root), or None for a hub repo id."""
    if not source.startswith((".", "/", "~")):
        return None
    path = Path(source).expanduser()
    if path.is_absolute():
        return path
    for base in (Path.cwd(), PROJECT_ROOT):
        if (base / path).exists():
            return (base / path).resolve()
    return (PROJECT_ROOT / path).resolve()


class ScorerSettings(Strict):
    """The AttentionScorer deployment: one transformers prefill per transfer, reading one layer's
    attention row."""

    source: str | None = Field(None, description="a Qwen3-VL checkpoint; default: the small model's source")
    device: Literal["cpu", "gpu"] = Field("cpu", description="gpu: torch's cuda device")
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="torch dtype of the weights; default bfloat16 on gpu, float32 on cpu"
    )
    mm_processor_kwargs: dict[str, Any] | None = Field(
        None,
        description="the scorer's processor arguments, as an engine's engine_kwargs.mm_processor_kwargs; "
        "default: those of the model whose checkpoint it scores with",
    )
    num_cpus: float = Field(1.0, ge=0)
    num_gpus: float = Field(0.0, ge=0)
    # A custom resource the scorer's actor asks for, as a model's pin_resources: the nodes that
    # advertise it host the scorer (e.g. the small model's, beside it on a fraction of its GPU).
    pin_resources: dict[str, float] = Field(default_factory=dict)
    max_reasoning_tokens: int = Field(4096, ge=1)
    # Seconds a retiring replica (a scale-down, a config edit, an upgrade) has to finish its calls before
    # Serve stops it. Unset: derived by the application from its timeouts (serve_app/core/lifecycle.py);
    # set, at least that.
    graceful_shutdown_timeout_s: float | None = Field(None, gt=0, allow_inf_nan=False)
    autoscaling: Autoscaling = Autoscaling(min_replicas=1, max_replicas=1, target_ongoing_requests=4)

    @model_validator(mode="after")
    def _gpu_for_gpu(self) -> ScorerSettings:
        if self.device == "gpu" and self.num_gpus <= 0:
            raise ValueError("a scorer on device gpu needs num_gpus > 0")
        return self
