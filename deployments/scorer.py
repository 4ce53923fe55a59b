"""AttentionScorer: the Ray Serve deployment that selects reasoning tokens by attention for sparse
reasoning transfer (the scoring itself is deployments/attention.py)."""

from __future__ import annotations

import asyncio
import logging

from ray import serve

from .attention import ReasoningScorer
from .settings import ScorerSettings

logger = logging.getLogger("ray.serve")


@serve.deployment(name="AttentionScorer", ray_actor_options={"num_cpus": 0})
class AttentionScorer:
    """One prefill per call; CPU or GPU per its settings."""

    def __init__(self, settings: ScorerSettings, source: str):
        self.scorer = ReasoningScorer(
            source,
            device=settings.device,
            dtype=settings.dtype,
            max_reasoning_tokens=settings.max_reasoning_tokens,
        )
        logger.info(
            "AttentionScorer loaded %s on %s (%d layers)", source, settings.device, self.scorer.layers
        )

    async def check_health(self) -> None:
        """The ingress's readiness check (and Serve's health check): the checkpoint is loaded once the
        replica exists."""

    async def select(
        self, image_url: str | None, question: str, reasoning: str, delta: float, layer: int
    ) -> dict:
        return await asyncio.to_thread(
            self.scorer.select, image_url, question, reasoning, delta=delta, layer=layer
        )
