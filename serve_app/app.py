"""The application builder ``serve run`` imports: ``import_path: serve_app.app:build_app``.

small VLM (LLMServer) ─┐
                       ├─► MAIIngress (FastAPI) ◄── HTTP
large VLM (LLMServer) ─┘        │
                        StatsHolder (the statistics of every ingress replica: audits, plans, overload)
"""

from __future__ import annotations

from typing import Any

from ray.serve import Application

from deployments.vlm import build_scorer_deployment, build_vlm_deployment

from .config import AppConfig, load_app_config
from .core.roles import LARGE, SMALL
from .edge.ingress import MAIIngress
from .edge.stats_holder import StatsHolderDeployment
from .engines.model_limits import with_model_limits


def build_ingress(
    config: AppConfig, small: Application, large: Application, scorer: Application | None = None
) -> Application:
    """Bind the ingress to two model deployments (LLMServers, or anything with the same ``chat``) and,
    for sparse reasoning transfer, the attention scorer."""
    ingress, cascade = config.ingress, config.cascade
    stats = StatsHolderDeployment.bind(  # type: ignore[attr-defined]  # a Deployment
        cascade.audit, cascade.adaptive, overload_enabled=cascade.overload.enabled, classes=config.classes
    )
    return MAIIngress.options(
        autoscaling_config=ingress.autoscaling.to_serve(),
        max_ongoing_requests=ingress.max_ongoing_requests,
        max_queued_requests=ingress.max_queued_requests,
        ray_actor_options={"num_cpus": ingress.num_cpus},
    ).bind(small, large, config, scorer, stats)


def build_scorer(config: AppConfig) -> Application | None:
    if not config.transfer_selection.attention:
        return None
    return build_scorer_deployment(
        config.transfer_selection.scorer, config.scorer_source(), config.scorer_mm_processor_kwargs()
    )


def build_app(args: dict[str, Any]) -> Application:
    """The application of a config: its limits completed from what the models refuse (model_limits)."""
    config = with_model_limits(load_app_config(args))
    return build_ingress(
        config,
        build_vlm_deployment(config.small, SMALL),
        build_vlm_deployment(config.large, LARGE),
        build_scorer(config),
    )
