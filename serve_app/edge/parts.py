"""The parts of an ingress replica, built from the config by one factory: the cascade over the two
models (each behind its load counter), the auditor, the plan controller, the overload guard, the
demand meter, the question classes and the answer cache, all recording into one ``Metrics``.
``MAIIngress`` builds them over its deployment handles; the tests build the same parts over scripted
clients and a recording ``Metrics``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deployments.trace_context import log_trace_ids

from ..cache.keys import serving_identity
from ..cache.reuse import AnswerCache, CacheCounters, store_of
from ..config import AppConfig
from ..core.cascade import Cascade
from ..core.contracts import TransferSelector, VLMClient
from ..core.decision import QuestionClasses
from ..core.prompts import PromptLayout
from ..core.roles import LARGE, ROLES, SMALL
from ..telemetry.spans import StageSpans
from .learning import Auditor, PlanController
from .observers import DemandMeter, InFlight, IngressMetrics, Metrics, OverloadGuard


@dataclass
class IngressParts:
    cascade: Cascade
    small_calls: InFlight  # each model's calls in flight from this replica: the load audits give way to
    large_calls: InFlight
    metrics: Metrics
    auditor: Auditor
    plans: PlanController  # each cascade request's plan, learnt per question class
    overload: OverloadGuard  # the large model's queue bends the cascade
    demand: DemandMeter  # what the models are asked for, for coupled autoscaling
    classes: QuestionClasses  # the class a request's task tag counts under, bounded
    answers: AnswerCache | None = None  # answers reused and shared (None: config.cache.enabled is off)


# What a model's entry says of the answers it gives (the rest places and sizes it). The engine's
# arguments are all in: most change nothing an answer holds, but some do (dtype, max_pixels, ...).
MODEL_IDENTITY = {"model_id", "source", "revision", "engine", "emulation", "engine_kwargs", "prompt_layout"}


def identity_of(config: AppConfig) -> str:
    """The serving identity an answer cache's keys carry (cache/keys.py): the models and every setting
    that changes an answer (the cascade's but its audits and stage timeouts, the transfer's selection,
    the classes, the answers' logprobs) and the cache's namespace. Scaling, limits and keys are not."""
    return serving_identity(
        {
            "models": {
                role: getattr(config, role).model_dump(mode="json", include=MODEL_IDENTITY) for role in ROLES
            },
            "cascade": config.cascade.model_dump(mode="json", exclude={"audit", "timeouts"}),
            "transfer_selection": config.transfer_selection.model_dump(mode="json"),
            "classes": config.classes.model_dump(mode="json"),
            "answer_logprobs": config.answer_logprobs,
            "namespace": config.cache.namespace,
        }
    )


def answer_cache_of(config: AppConfig, *, prometheus: bool = False) -> AnswerCache | None:
    """The answer cache the config asks for (a Redis is checked once: one that does not answer starts
    the cache off, logged, and is tried again later), None when it is off."""
    settings = config.cache
    if not settings.enabled:
        return None
    return AnswerCache(
        store_of(settings),
        identity=identity_of(config),
        shared=settings.shared,
        coalesce=settings.coalesce,
        counters=CacheCounters(prometheus=prometheus),
    )


def build_parts(
    config: AppConfig,
    small: VLMClient,
    large: VLMClient,
    metrics: Metrics,
    *,
    selectors: Mapping[str, TransferSelector] | None = None,
    shared_stats: bool = False,
    large_queue: Callable[[], int] | None = None,
    clock: Callable[[], float] | None = None,
) -> IngressParts:
    """The parts over the ``small`` and ``large`` clients. ``shared_stats``: a statistics holder pools
    the replicas' books. ``large_queue`` and ``clock`` replace what the overload guard reads (the large
    model's calls in flight from this replica, the monotonic clock)."""
    log_trace_ids()  # the replica's log records made inside a sampled trace name it
    small_calls, large_calls = InFlight(small), InFlight(large)
    layouts = {
        SMALL: PromptLayout(config.small.prompt_layout),
        LARGE: PromptLayout(config.large.prompt_layout),
    }
    stage_spans = StageSpans({SMALL: config.small.model_id, LARGE: config.large.model_id}, config.telemetry)
    cascade = Cascade(small_calls, large_calls, selectors=selectors, layouts=layouts, stage_spans=stage_spans)
    audit = config.cascade.audit
    auditor = Auditor(
        cascade,
        audit,
        lambda: (small_calls.count, large_calls.count),
        metrics,
        timeout_s=config.request_timeout_s,
        telemetry=config.telemetry,
    )
    guard_options: dict[str, Any] = {"clock": clock} if clock is not None else {}
    overload = OverloadGuard(
        config.cascade.overload, large_queue or (lambda: large_calls.count), metrics, **guard_options
    )
    return IngressParts(
        cascade=cascade,
        small_calls=small_calls,
        large_calls=large_calls,
        metrics=metrics,
        auditor=auditor,
        plans=PlanController(config.cascade.adaptive, audit, auditor.book, shared=shared_stats),
        overload=overload,
        demand=DemandMeter(config.autoscaling.policy, config.autoscaling.tau_s),
        classes=QuestionClasses(config.classes),
        answers=answer_cache_of(config, prometheus=isinstance(metrics, IngressMetrics)),
    )
