"""The composition root: the application builder ``serve run`` imports (``import_path:
serve_app.app:build_app``), over the model tier that ``mai-batch`` serves too (``model_tier``).

small VLM (LLMServer) ─┐
                       ├─► MAIIngress (FastAPI) ◄── HTTP
large VLM (LLMServer) ─┘        │
                        StatsHolder (the statistics of every ingress replica: audits, plans, overload),
                        KeyLedger (every API key's quotas and usage), AttentionScorer (when configured)
"""

from __future__ import annotations

import logging
from typing import Any

from ray.serve import Application

from deployments.vlm import EngineTracing, build_scorer_deployment, build_vlm_deployment

from .config import AppConfig, load_app_config
from .core.lifecycle import FLEET_DRAIN_S
from .core.roles import LARGE, SMALL
from .edge.access import KeyLedgerDeployment
from .edge.api import MAIIngress
from .edge.keys import KeyRing, check_exposure
from .engine_config.engine_check import old_settings
from .engine_config.model_limits import with_model_limits
from .fleet.stats_holder import StatsHolderDeployment
from .telemetry.settings import check_tracing

logger = logging.getLogger("ray.serve")


def model_tier(
    config: AppConfig,
    small: Application | None = None,
    large: Application | None = None,
    *,
    tracing: EngineTracing | None = None,
) -> dict[str, Application]:
    """The model tier of ``config``, each deployment bound once, by its ``TIER`` name: the two models
    (``small``/``large``: others with the same ``chat``, the tests' scripted ones), the attention
    scorer when transfer selection needs it, the statistics holder and the key ledger. The server binds
    the ingress to it (``build_ingress``); ``mai-batch`` serves it as it is (batch/model_tier.py).
    ``tracing``: where the engines send their request spans (``telemetry.settings.check_tracing``)."""
    cascade = config.cascade
    tier = {
        SMALL: small
        if small is not None
        else build_vlm_deployment(config.small, SMALL, config.drain_s(SMALL), tracing),
        LARGE: large
        if large is not None
        else build_vlm_deployment(config.large, LARGE, config.drain_s(LARGE), tracing),
        "stats": StatsHolderDeployment.options(  # type: ignore[attr-defined]  # a Deployment
            graceful_shutdown_timeout_s=FLEET_DRAIN_S
        ).bind(
            cascade.audit, cascade.adaptive, overload_enabled=cascade.overload.enabled, classes=config.classes
        ),
        "ledger": KeyLedgerDeployment.options(graceful_shutdown_timeout_s=FLEET_DRAIN_S).bind(),
    }
    scorer = build_scorer(config)
    if scorer is not None:
        tier["scorer"] = scorer
    return tier


def build_ingress(config: AppConfig, tier: dict[str, Application], access: str | None = None) -> Application:
    """Bind the ingress to the model tier (``model_tier``); ``access``: how callers reach it (``keys``,
    or ``anonymous``; default: what ``exposure`` finds), which each replica holds to on its own."""
    access = access if access is not None else exposure(config)
    ingress = config.ingress
    return MAIIngress.options(
        autoscaling_config=ingress.autoscaling.to_serve(),
        max_ongoing_requests=ingress.max_ongoing_requests,
        max_queued_requests=ingress.max_queued_requests,
        ray_actor_options={"num_cpus": ingress.num_cpus},
        graceful_shutdown_timeout_s=config.drain_s("ingress"),
    ).bind(tier[SMALL], tier[LARGE], config, tier.get("scorer"), tier["stats"], tier["ledger"], access)


def build_scorer(config: AppConfig) -> Application | None:
    if not config.transfer_selection.attention:
        return None
    return build_scorer_deployment(
        config.transfer_selection.scorer,
        config.scorer_source(),
        config.drain_s("scorer"),
        config.scorer_mm_processor_kwargs(),
    )


def exposure(config: AppConfig) -> str:
    """How callers reach the API (``keys`` or ``anonymous``), checked against the address Serve's
    proxies listen on: beyond loopback, keys or ``security.anonymous: true`` (serve_app/edge/keys.py).
    Every key source is read here too, so a malformed one fails the start, naming it."""
    import ray
    from ray.serve.context import _get_global_client

    # Without a running Ray (the app built to be inspected), no proxy listens anywhere yet.
    client = _get_global_client(raise_if_no_controller_running=False) if ray.is_initialized() else None
    host = client.http_config.host if client is not None else "127.0.0.1"
    access = check_exposure(host, KeyRing(config.security), config.security)
    if access == "anonymous":
        logger.warning("MAI serves without API keys on %s: every caller is anonymous", host)
    return access


def build_app(args: dict[str, Any]) -> Application:
    """The application of a config: its limits completed from what the models refuse (model_limits),
    its tracing checked (a variable it cannot honour fails the start, named)."""
    config = with_model_limits(load_app_config(args))
    for warning in old_settings(args):  # once, as the application starts
        logger.warning("MAI config: %s", warning)
    return build_ingress(config, model_tier(config, tracing=check_tracing()))
