"""The parts of an ingress replica, built from the config by one factory: the cascade over the two
models (each behind its load counter), the auditor, the plan controller, the overload guard, the
demand meter and the question classes, all recording into one ``Metrics``. ``MAIIngress`` builds them
over its deployment handles; the tests build the same parts over scripted clients and a recording
``Metrics``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deployments.trace_context import log_trace_ids

from ..config import AppConfig
from ..core.cascade import Cascade
from ..core.contracts import TransferSelector, VLMClient
from ..core.decision import QuestionClasses
from ..core.prompts import PromptLayout
from ..core.roles import LARGE, SMALL
from ..telemetry.spans import StageSpans
from .learning import Auditor, PlanController
from .observers import DemandMeter, InFlight, Metrics, OverloadGuard


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
    )
