"""The attention scorer's client over a DeploymentHandle of the AttentionScorer deployment
(deployments/scorer.py): what the attention transfer selector calls to score reasoning tokens."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..telemetry import spans
from ..telemetry.settings import TelemetrySettings
from .failures import engine_call


def attention_scorer(
    handle: Any, telemetry: TelemetrySettings | None = None
) -> Callable[..., Awaitable[dict[str, Any]]]:
    """The AttentionScorer deployment's ``select`` as the attention selector's ``score``: its failures
    are the ``EngineError`` family, like a model's; each call a ``mai.scorer`` span in the request's
    trace."""
    settings = telemetry or TelemetrySettings()

    async def score(*args: Any) -> dict[str, Any]:
        with spans.span("mai.scorer", settings=settings, kind="client"), engine_call("the attention scorer"):
            return await handle.select.remote(*args)

    return score
