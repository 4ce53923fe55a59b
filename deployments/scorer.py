"""AttentionScorer: the Ray Serve deployment that selects reasoning tokens by attention for sparse
reasoning transfer (the scoring itself is deployments/attention.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import serve

from .attention import ReasoningScorer
from .driver import require_driver
from .settings import ScorerSettings

logger = logging.getLogger("ray.serve")


@serve.deployment(name="AttentionScorer", ray_actor_options={"num_cpus": 0})
class AttentionScorer:
    """One prefill per call; CPU or GPU per its settings. ``mm_processor_kwargs``: those of the engine
    whose checkpoint it scores with, so that an image costs it the tokens it costs that engine."""

    def __init__(
        self, settings: ScorerSettings, source: str, mm_processor_kwargs: dict[str, Any] | None = None
    ):
        if settings.device == "gpu":  # the driver, before the checkpoint is read (deployments/driver.py)
            require_driver()
        self.scorer = ReasoningScorer(
            source,
            device=settings.device,
            dtype=settings.dtype,
            max_reasoning_tokens=settings.max_reasoning_tokens,
            mm_processor_kwargs=mm_processor_kwargs,
        )
        logger.info(
            "AttentionScorer loaded %s on %s in %s (%d layers), processor kwargs %s",
            source,
            settings.device,
            self.scorer.dtype,
            self.scorer.layers,
            mm_processor_kwargs or {},
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
