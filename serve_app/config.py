"""The application's arguments (the ``args:`` of a Serve config file), validated.

Unknown keys are errors that name the key; every default is written here, not in code elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from deployments.memory import scorer_need_of, shared_gpu_problems
from deployments.settings import Autoscaling, ModelDeployment, ScorerSettings, Strict, local_folder
from deployments.vlm import images_per_prompt

from .cache.settings import CacheSettings
from .core.audit import AuditSettings
from .core.contracts import REASON_BASELINES, CascadeOptions, UnknownSelectorError, check_transfer_selector
from .core.decision import ClassSettings, OverloadSettings, check_floors
from .core.grammar_bounds import GrammarLimits
from .core.lifecycle import DRAINED, Drains
from .core.plan_choice import AdaptiveSettings
from .core.plans import Plan
from .core.roles import LARGE, SMALL
from .core.scaling import AppAutoscaling, ScalingPolicy
from .telemetry.settings import TelemetrySettings

# The application-level autoscaling policy of ``autoscaling.policy: coupled``: Ray Serve reads it from
# the application's entry in a config file (beside ``args``), never from the builder.
COUPLED_POLICY = "serve_app.fleet.autoscaling_policy:coupled_policy"


class IngressDeployment(Strict):
    autoscaling: Autoscaling = Autoscaling(min_replicas=1, max_replicas=2, target_ongoing_requests=32)
    max_ongoing_requests: int = Field(256, ge=1)
    max_queued_requests: int = Field(1024, ge=1)
    num_cpus: float = Field(0.0, ge=0)
    # The requests one ingress replica runs at once before API keys share it by weight. Unset (null):
    # learned from its answers' latency, at most the models' capacity over the ingress's min_replicas.
    capacity: int | None = Field(None, ge=1)
    # A request past its key's share while other keys have work waits its turn this long (seconds)
    # before a 429 fair_share; 0: refused at once (both: serve_app/core/admission.py).
    share_wait_s: float = Field(10.0, ge=0, le=600, allow_inf_nan=False)
    # Seconds a retiring replica (a scale-down, a config edit, an upgrade) has to finish its requests before
    # Serve stops it. Unset: derived by the application from its timeouts (serve_app/core/lifecycle.py);
    # set, at least that.
    graceful_shutdown_timeout_s: float | None = Field(None, gt=0, allow_inf_nan=False)


class Readiness(Strict):
    """A request that arrives before every model deployment answers (serve_app/edge/readiness.py) waits
    up to ``wait_s`` for them, before its ``request_timeout_s`` starts; then it gets a 503 naming those
    still loading. 0: one quick check, no wait."""

    wait_s: float = Field(30.0, ge=0, le=3600, description="seconds a request waits for the models")


class Limits(Strict):
    """What a request may carry. Beyond these the request gets a 4xx and no model is called."""

    # Images of a cascade request, its conversation's included (every stage reads them all): at most
    # what both engines take (limit_mm_per_prompt); a request with more passes through under mai.
    max_images: int = Field(1, ge=1, le=64)
    # User and assistant turns a cascade request may carry before its question (every stage reads
    # them); a longer conversation passes through under mai. 0: one turn only.
    max_context_turns: int = Field(16, ge=0, le=256)
    max_passthrough_images: int | None = Field(
        None,
        ge=1,
        description="images of a request passed to a model unchanged (default: what the engines take, "
        "their limit_mm_per_prompt image count)",
    )
    # A request passed to a model unchanged (serve_app/edge/passthrough_body.py): at most this many
    # choices (n), and this many tokens per choice (max_tokens, max_completion_tokens, min_tokens; also
    # the budget of a request that sets none, which the engine would otherwise fill to its context).
    max_passthrough_n: int = Field(8, ge=1)
    max_passthrough_tokens: int = Field(4096, ge=1)
    grammar: GrammarLimits = GrammarLimits()  # what such a request may ask the grammar compiler
    # ... and at most this many tokens in all its choices may decode (n times the tokens per choice):
    # what one request may ask of an engine, and reserve of its key's tokens_per_minute.
    max_passthrough_decode_tokens: int = Field(16384, ge=1)
    max_image_bytes: int = Field(10 * 1024 * 1024, ge=1)
    max_image_pixels: int = Field(4096 * 4096, ge=1)
    max_question_chars: int = Field(8000, ge=1)
    # What the models themselves refuse, checked before any model runs. Unset (null), they are learnt
    # from the served models when the app is built (serve_app/engine_config/model_limits.py): the image
    # processor's largest aspect ratio and smallest side, and the prompt bytes that fit the engines' context
    # length after the largest stage budget. Set, the value here is used as it is.
    max_image_aspect_ratio: float | None = Field(None, gt=1)
    min_image_side: int = Field(1, ge=1)
    max_prompt_bytes: int | None = Field(None, ge=1)
    max_body_bytes: int = Field(
        16 * 1024 * 1024, ge=1024, description="largest request body; larger ones get 413"
    )
    # A body must have arrived whole this long after its request (else 408); a replica reads at most
    # this many bodies at once of one API key, or of one client address without a key (else 429).
    body_timeout_s: float = Field(30.0, gt=0, allow_inf_nan=False)
    max_body_reads_per_client: int = Field(32, ge=1)
    # The JSON body: how deep arrays and objects may nest, how many keys and values (array elements
    # and object members) it may hold in all, how many characters a number may have. Read off the
    # bytes in linear time before it is parsed; past them, a 400 (never a parser's recursion,
    # int-size error or a body that parses into more objects than its bytes suggest).
    max_json_depth: int = Field(32, ge=4, le=500)
    max_json_keys: int = Field(10_000, ge=16)
    max_json_values: int = Field(100_000, ge=16)
    max_json_number_digits: int = Field(64, ge=16, le=4000)
    # Remote (http/https) image URLs: off by default. When on, only hosts on the allowlist
    # ("images.example.com", "*.example.com"), never private/loopback/link-local addresses unless
    # remote_image_allow_private_networks (a trusted in-cluster image store), downloads capped at
    # max_image_bytes and remote_image_timeout_s.
    allow_remote_images: bool = False
    remote_image_hosts: list[str] = Field(default_factory=list)
    remote_image_timeout_s: float = Field(10.0, gt=0)
    remote_image_allow_private_networks: bool = False

    @model_validator(mode="after")
    def _remote_needs_hosts(self) -> Limits:
        if self.allow_remote_images and not self.remote_image_hosts:
            raise ValueError("allow_remote_images needs remote_image_hosts: the hosts images come from")
        return self


class Security(Strict):
    """Who may call the API and from where (serve_app/edge/keys.py). Keys come from an environment
    variable (comma-separated), a file (one key per line, e.g. a mounted Kubernetes secret) and/or a
    keys file of named keys with quotas. A server listening beyond loopback starts only with a key, or
    with ``anonymous: true``. CORS is off unless origins are listed."""

    api_keys_env: str | None = Field("MAI_API_KEYS", description="environment variable holding API keys")
    api_keys_file: str | None = Field(
        None, description="file holding API keys, one per line or comma-separated; read again when it changes"
    )
    keys_file: str | None = Field(None, description="YAML or JSON file of named keys with quotas")
    # Serve without keys on a non-loopback address: said in the start-up log and in /v1/models.
    anonymous: bool = False
    cors_allow_origins: list[str] = Field(default_factory=list)
    # The API's OpenAPI schema at GET /openapi.json (behind the API key), for clients and fuzzers.
    # Off by default; the interactive pages (/docs, /redoc) are never served (they load a CDN's assets).
    openapi: bool = False


class TransferSelection(Strict):
    """Selectors a request may choose with ``transfer_selector`` besides ``full``: ``budget`` always,
    ``attention`` when ``attention: true`` (which deploys the scorer)."""

    budget_head_words: int = Field(48, ge=0)
    budget_tail_words: int = Field(48, ge=0)
    attention: bool = False
    delta: float = Field(0.8, gt=0, le=1, description="share of the reasoning's attention mass to keep")
    layer: int = Field(-1, description="the scorer layer whose attention ranks the tokens (-1: the last)")
    scorer: ScorerSettings = ScorerSettings()

    def available(self) -> tuple[str, ...]:
        """The selectors a request may name: ``attention`` only when its scorer is deployed."""
        return ("full", "budget", "attention") if self.attention else ("full", "budget")


class CascadeConfig(CascadeOptions):
    """The server's cascade defaults (a request may override some, ``CascadeOptions``), and what only
    the server sets: audits of early-exit answers (serve_app/core/audit.py; 0 = off), the choice of
    plan per question class (serve_app/core/plan_choice.py; off by default) and how the cascade bends
    when the large model is overloaded (serve_app/core/decision.py; off by default)."""

    audit: AuditSettings = AuditSettings()
    adaptive: AdaptiveSettings = AdaptiveSettings()
    overload: OverloadSettings = OverloadSettings()
    # Another name for ``adaptive.default: eager`` (with ``adaptive.mode: off``): every request starts
    # the small model's reasoning together with stage 1. Deprecated (engine_check.old_settings).
    eager_reasoning: bool = False

    @model_validator(mode="after")
    def _one_place_for_the_plan(self) -> CascadeConfig:
        if self.plan is not None:
            raise ValueError(
                "cascade.plan is a request option; the server's plan is cascade.adaptive.default "
                "(with cascade.adaptive.mode: off, every request runs it)"
            )
        if self.eager_reasoning and self.adaptive.mode != "off":
            raise ValueError(
                "cascade.eager_reasoning is for cascade.adaptive.mode: off; with the controller on, "
                "list eager in cascade.adaptive.plans (or make it cascade.adaptive.default)"
            )
        if self.eager_reasoning and self.adaptive.default is not Plan.EAGER:
            if "default" in self.adaptive.model_fields_set:
                raise ValueError(
                    "cascade.eager_reasoning: true is cascade.adaptive.default: eager; it contradicts "
                    f"the configured default {self.adaptive.default.value!r}: set one of them"
                )
            # The server's eager_reasoning is another name for the default plan eager.
            adaptive = self.adaptive.model_copy(update={"default": Plan.EAGER})
            object.__setattr__(self, "adaptive", AdaptiveSettings.model_validate(adaptive.model_dump()))
        return self

    @model_validator(mode="after")
    def _floors_under_thresholds(self) -> CascadeConfig:
        check_floors(self.overload.relax_to, self)
        return self

    def request_options(self, update: Mapping[str, Any]) -> CascadeOptions:
        """A request's options, built once: the server's defaults under the request's own (``update``,
        its policy among them); its plan is the ingress's to set, unless the request forces one. The
        server's ``stage2_answer`` is the cascade's and transfer's: the ``*-reason`` baselines keep the
        paper's Stage 2 prompt unless the request itself names another way."""
        options = self.model_dump(exclude=SERVER_ONLY) | dict(update)
        if options.get("stage2_answer") is None and options.get("policy") not in REASON_BASELINES:
            options["stage2_answer"] = self.stage2_answer
        return CascadeOptions.model_validate(options)


Destination = Literal["auto", "cascade", "passthrough"]  # ``mai_destination``, ``mai.destination``
# What only the server sets of the cascade: no request's options.
SERVER_ONLY = {"audit", "adaptive", "overload", "eager_reasoning", "stage2_answer"}
# Settings renamed, old -> new: read as the new for one release (engine_check.old_settings warns).
RENAMED_SETTINGS: Mapping[str, str] = {"mai_route": "mai_destination"}


class AppConfig(Strict):
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)  # cache.url's password
    small: ModelDeployment
    large: ModelDeployment
    cascade: CascadeConfig = CascadeConfig()
    ingress: IngressDeployment = IngressDeployment()
    limits: Limits = Limits()
    security: Security = Security()
    transfer_selection: TransferSelection = TransferSelection()
    autoscaling: AppAutoscaling = AppAutoscaling()
    readiness: Readiness = Readiness()
    # Which clients' task tags (``mai.task``) make question classes of their own (serve_app/core/decision.py).
    classes: ClassSettings = ClassSettings()
    telemetry: TelemetrySettings = TelemetrySettings()  # what the spans may carry (docs/observability.md)
    cache: CacheSettings = CacheSettings()  # answers reused and shared (docs/cache.md)
    request_timeout_s: float = Field(300.0, gt=0)
    # Where `mai` sends a request: auto (the cascade when MAI fits it, else the large model unchanged:
    # serve_app/edge/routing.py), or always one. A request's `mai.destination` overrides it.
    mai_destination: Destination = "auto"
    # The generated tokens' logprobs: each answer's confidence (cascade.min_confidence, confident_large).
    answer_logprobs: bool = True

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        data = dict(data)
        for old, new in ((old, new) for old, new in RENAMED_SETTINGS.items() if old in data):
            value = data.pop(old)
            if data.setdefault(new, value) != value:
                raise ValueError(f"{old} ({value!r}) and {new} ({data[new]!r}) differ: set {new} alone")
        return data

    @model_validator(mode="after")
    def _distinct_models(self) -> AppConfig:
        if self.small.model_id == self.large.model_id:
            raise ValueError("small and large need different model_id values")
        return self

    @model_validator(mode="after")
    def _passthrough_images_the_engines_take(self) -> AppConfig:
        """Passthrough's image limit is the engines' (``limit_mm_per_prompt``): more would pass the
        ingress and fail at the engine. The cascade's must fit both engines: every stage carries them."""
        engines = min(images_per_prompt(model) for model in (self.small, self.large))
        if self.limits.max_images > engines:
            raise ValueError(
                f"limits.max_images {self.limits.max_images} exceeds the {engines} image(s) a prompt may "
                "carry to both engines (engine_kwargs.limit_mm_per_prompt.image): raise that, or lower this"
            )
        configured = self.limits.max_passthrough_images
        if configured is None:
            limits = self.limits.model_copy(update={"max_passthrough_images": engines})
            object.__setattr__(self, "limits", limits)
        elif configured > engines:
            raise ValueError(
                f"limits.max_passthrough_images {configured} exceeds the {engines} image(s) a prompt may "
                "carry to the engines (engine_kwargs.limit_mm_per_prompt.image): raise that, or lower this"
            )
        return self

    @model_validator(mode="after")
    def _engines_sharing_a_gpu_fit_it(self) -> AppConfig:
        """Engines on fractions of one GPU fit it together (deployments/memory.py): their start shares,
        and on a GPU one names, their memory and a GPU scorer's beside them."""
        scorer, need = self.transfer_selection.scorer, None
        if self.transfer_selection.attention and scorer.device == "gpu" and scorer.num_gpus < 1:
            mm = self.scorer_mm_processor_kwargs()
            need = scorer_need_of(self.scorer_source(), scorer.dtype, scorer.max_reasoning_tokens, mm)
        problems = shared_gpu_problems(self.small, self.large, need)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _replicas_drain_their_calls(self) -> AppConfig:
        for part in DRAINED:
            self.drain_s(part)  # a configured one shorter than the derived one is refused
        return self

    @model_validator(mode="after")
    def _default_selector_deployed(self) -> AppConfig:
        selector = self.cascade.transfer_selector
        try:
            check_transfer_selector(selector, self.transfer_selection.available())
        except UnknownSelectorError as exc:
            raise ValueError(
                f"cascade.transfer_selector {selector!r} is not available ({exc}); attention needs "
                "transfer_selection.attention: true"
            ) from None
        return self

    @model_validator(mode="after")
    def _confidence_needs_logprobs(self) -> AppConfig:
        if not self.answer_logprobs and (self.cascade.min_confidence > 0 or self.cascade.confident_large):
            raise ValueError(
                "cascade.min_confidence and cascade.confident_large need answer confidences: "
                "set answer_logprobs: true"
            )
        return self

    @model_validator(mode="after")
    def _audit_priority_needs_priority_engines(self) -> AppConfig:
        """vLLM 0.32 takes a request priority under FCFS scheduling without a word and ignores it, so an
        audit priority is refused unless both vLLM engines schedule by priority (the emulated engines
        always do)."""
        if self.cascade.audit.priority == 0:
            return self
        fcfs = [
            f"{role}.engine_kwargs.scheduling_policy"
            for role, model in ((SMALL, self.small), (LARGE, self.large))
            if model.engine != "emulated" and model.engine_kwargs.get("scheduling_policy") != "priority"
        ]
        if fcfs:
            raise ValueError(
                f"cascade.audit.priority {self.cascade.audit.priority} needs the engines to schedule by "
                f"priority: set {' and '.join(fcfs)}: priority (or cascade.audit.priority: 0)"
            )
        return self

    def drain_s(self, part: str) -> float:
        """The graceful shutdown timeout of ``part`` (a model's role, ``ingress`` or ``scorer``): its
        configured ``graceful_shutdown_timeout_s``, else derived from the timeouts (core/lifecycle.py)."""
        limits = self.limits
        images = (limits.max_passthrough_images or 1) if limits.allow_remote_images else 0
        held_s = limits.body_timeout_s + self.ingress.share_wait_s + self.readiness.wait_s
        timeouts = tuple(self.cascade.timeouts.model_dump().values())
        drains = Drains(self.request_timeout_s, timeouts, held_s + images * limits.remote_image_timeout_s)
        if part == "scorer":
            return drains.of(
                "transfer_selection.scorer", self.transfer_selection.scorer.graceful_shutdown_timeout_s
            )
        return drains.of(part, getattr(self, part).graceful_shutdown_timeout_s)

    def model_capacity(self) -> int:
        """The requests the model deployments take at once: the smaller of the two models' requests in
        flight (``max_ongoing_requests`` per replica, times its most replicas). A cascade request
        holds at most one call on each model; past this many, calls wait in Serve's queues."""
        return min(
            spec.max_ongoing_requests * spec.autoscaling.max_replicas for spec in (self.small, self.large)
        )

    def scorer_mm_processor_kwargs(self) -> dict[str, Any]:
        """The scorer's processor arguments: its own, else those of the model whose checkpoint it
        scores with, so that an image costs it what it costs that engine."""
        scorer = self.transfer_selection.scorer
        if scorer.mm_processor_kwargs is not None:
            return dict(scorer.mm_processor_kwargs)
        for model in (self.small, self.large):
            if (scorer.source or self.small.source) == model.source:
                return dict(model.engine_kwargs.get("mm_processor_kwargs") or {})
        return {}

    def scorer_source(self) -> str:
        """The scorer's checkpoint: its own source, else the small model's (a local folder resolved)."""
        source = self.transfer_selection.scorer.source or self.small.source
        local = local_folder(source)
        return str(local) if local is not None else source


def load_app_config(args: dict[str, Any]) -> AppConfig:
    """Validate ``args``; a ``ValueError`` names every offending key."""
    return AppConfig.model_validate(args)


def check_application(application: dict[str, Any]) -> AppConfig:
    """An application entry of a Serve config file: its ``args`` validated, and its
    ``autoscaling_policy`` the one ``args.autoscaling.policy`` needs (coupled: ours; per-deployment:
    none, so that each deployment's own applies)."""
    config = load_app_config(application.get("args", {}))
    named = (application.get("autoscaling_policy") or {}).get("policy_function")
    coupled = config.autoscaling.policy is ScalingPolicy.COUPLED
    if coupled and named != COUPLED_POLICY:
        raise ValueError(
            "args.autoscaling.policy is coupled: the application needs "
            f"autoscaling_policy: {{policy_function: {COUPLED_POLICY}}} (found {named!r})"
        )
    if not coupled and named is not None:
        raise ValueError(
            f"autoscaling_policy {named!r} is set, but args.autoscaling.policy is "
            f"{config.autoscaling.policy.value}: set it to coupled, or remove autoscaling_policy"
        )
    return config
