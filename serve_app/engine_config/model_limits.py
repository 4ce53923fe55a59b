"""What the served models refuse, learnt from them when the application is built, so that the ingress
refuses it first with a 400 that says why (instead of an engine error in some stage).

- Images: the models' image processor resizes every image with its own ``smart_resize`` (Qwen2-VL's,
  which Qwen3-VL's processor uses), which raises for some shapes (an aspect ratio over 200 in the
  versions pinned here). The largest aspect ratio and the smallest side it takes are found by asking
  that very function, with the processor's own patch and merge sizes and the pixel bounds of the
  model's image budget (``image_budget.py``: the processor's settings under the config's
  ``mm_processor_kwargs``). An image over the budget is resized by the processor, not refused.
- Prompts: each engine's context length (``max_model_len`` in ``engine_kwargs``) less the largest
  stage's needs: the transfer prompt holds a whole reasoning (its budget) and wants its own answer
  budget, plus ``limits.max_images`` images' tokens at the budget's bound and ``TEMPLATE_TOKENS`` for the
  instructions.
  What is left bounds the question and system messages, counted in UTF-8 bytes: a byte-level BPE never
  makes more tokens than bytes, so the bound is safe whatever the tokenizer (it refuses some prompts
  that would fit, never admits one that would not). A context that leaves too little is refused at
  start, with the numbers.

A limit set in the config is kept; a model whose processor cannot be read (a hub id without network)
leaves its limit unset, and the engine's own refusal is still a 400 (serve_app/clients/llm_server.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from deployments.settings import local_folder

from ..config import AppConfig, ModelDeployment
from .image_budget import ImageBudget, image_budget, patch_factor, pixel_bounds

logger = logging.getLogger("ray.serve")

TEMPLATE_TOKENS = 512  # the longest prompt template, its chat markup and the image's markers, with room
MIN_PROMPT_BYTES = 64  # less room than this for the question is a context too small for the budgets
_RATIO_PROBE_LIMIT = 1_000_000


@dataclass(frozen=True)
class ContextBudget:
    """One engine's context, spent: the image, the largest stage, the templates, and what is left for
    the question and system messages."""

    model_id: str
    context_tokens: int
    image: ImageBudget
    stage_tokens: int
    template_tokens: int = TEMPLATE_TOKENS
    images: int = 1  # the images a cascade request may carry (limits.max_images), each at the bound

    @property
    def question_tokens(self) -> int:
        images = self.image.max_tokens * self.images
        return self.context_tokens - images - self.stage_tokens - self.template_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "model_id": self.model_id,
            "context_tokens": self.context_tokens,
            **self.image.as_dict(),
            "images": self.images,
            "largest_stage_tokens": self.stage_tokens,
            "template_tokens": self.template_tokens,
            "left_for_the_question": self.question_tokens,
        }


class ContextTooSmallError(ValueError):
    """An engine's context cannot hold the image, the largest stage and a question."""


def with_model_limits(config: AppConfig) -> AppConfig:
    """``config`` with the limits it leaves unset learnt from its models' processors and engines; a
    context too small for the configured budgets raises ``ContextTooSmallError``."""
    limits = config.limits
    update: dict[str, Any] = {}
    models = (config.small, config.large)
    processors = [_image_processor(model) for model in models]
    rules = [
        geometry(processor, _mm_kwargs(model))
        for model, processor in zip(models, processors, strict=True)
        if processor is not None
    ]
    if limits.max_image_aspect_ratio is None and rules:
        ratios = [ratio for ratio, _ in rules if ratio is not None]
        update["max_image_aspect_ratio"] = min(ratios) if ratios else None
    if limits.min_image_side == 1 and rules:
        update["min_image_side"] = max(side for _, side in rules)
    left = prompt_bytes_left(context_budgets(config, processors))  # refuses a context too small
    if limits.max_prompt_bytes is None:
        update["max_prompt_bytes"] = left
    return config.model_copy(update={"limits": limits.model_copy(update=update)})


def _mm_kwargs(model: ModelDeployment) -> Mapping[str, Any]:
    return model.engine_kwargs.get("mm_processor_kwargs") or {}


def _model_config(model: ModelDeployment) -> dict[str, Any]:
    """The checkpoint's config.json (for the families whose image tokens it fixes); {} if unread."""
    source = local_folder(model.source) or model.source
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(str(source)).to_dict()
    except Exception:  # a hub id without network: the families that need it say so
        return {}


def _image_processor(model: ModelDeployment) -> Any | None:
    if model.engine != "vllm":
        return None
    source = local_folder(model.source) or model.source
    try:
        from transformers import AutoImageProcessor

        return AutoImageProcessor.from_pretrained(str(source))
    except Exception as exc:  # a hub id without network, a folder without a processor
        logger.warning(
            "no image limits learnt from %s (%s): the engine's refusals still give 400s", source, exc
        )
        return None


def _resize_rule(processor: Any, overrides: Mapping[str, Any]) -> Callable[[int, int], Any] | None:
    """The processor's ``smart_resize(height, width)`` with its own factor and the budget's pixel
    bounds."""
    resize = getattr(sys.modules.get(type(processor).__module__), "smart_resize", None)
    if resize is None:
        return None
    factor = patch_factor(processor)
    low, high = pixel_bounds(processor, overrides)
    return lambda height, width: resize(height, width, factor=factor, min_pixels=low, max_pixels=high)


def geometry(processor: Any, overrides: Mapping[str, Any] | None = None) -> tuple[float | None, int]:
    """(largest aspect ratio, smallest side) the processor's resize takes under the config's
    ``mm_processor_kwargs``; (None, 1) when it has none or refuses nothing."""
    rule = _resize_rule(processor, overrides or {})
    if rule is None:
        return None, 1

    def takes(height: int, width: int) -> bool:
        try:
            rule(height, width)
        except ValueError:
            return False
        return True

    side = next((s for s in range(1, 257) if takes(s, s)), 1)
    if takes(side, side * _RATIO_PROBE_LIMIT):
        return None, side
    low, high = 1, _RATIO_PROBE_LIMIT  # takes(side, side * low), not takes(side, side * high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if takes(side, side * middle) else (low, middle)
    return float(low), side


def context_budgets(config: AppConfig, processors: list[Any | None]) -> list[ContextBudget] | None:
    """Each vLLM engine's context budget; None when one cannot be known (an emulated engine, no
    ``max_model_len``, a processor that could not be read)."""
    budgets = config.cascade.max_tokens
    stage_tokens = max(
        budgets.reasoning + budgets.transfer, budgets.explain, budgets.reasoning + budgets.stage2
    )
    found = []
    for model, processor in zip((config.small, config.large), processors, strict=True):
        length = model.engine_kwargs.get("max_model_len")
        if model.engine != "vllm" or length is None or processor is None:
            return None
        image = image_budget(processor, _mm_kwargs(model), _model_config(model))
        images = config.limits.max_images
        found.append(ContextBudget(model.model_id, int(length), image, stage_tokens, images=images))
    return found


def prompt_bytes_left(budgets: list[ContextBudget] | None) -> int | None:
    """UTF-8 bytes of question and system messages that fit every engine's context after the largest
    stage's needs; None when a budget is unknown. Raises ``ContextTooSmallError`` naming the numbers
    when an engine's context leaves less than ``MIN_PROMPT_BYTES``."""
    if budgets is None:
        return None
    for budget in budgets:
        if budget.question_tokens < MIN_PROMPT_BYTES:
            raise ContextTooSmallError(
                f"{budget.model_id}: max_model_len {budget.context_tokens} leaves {budget.question_tokens} "
                f"tokens for the question after {budget.images} image(s) (limits.max_images) of up to "
                f"{budget.image.max_tokens} tokens (max_pixels {budget.image.max_pixels}), the largest "
                f"stage's {budget.stage_tokens} (cascade.max_tokens) and {budget.template_tokens} for the "
                f"templates; at least {MIN_PROMPT_BYTES} are needed: raise max_model_len, lower "
                "engine_kwargs.mm_processor_kwargs.max_pixels, limits.max_images or cascade.max_tokens"
            )
    return min(budget.question_tokens for budget in budgets)
