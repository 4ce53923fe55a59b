"""What the served models refuse, learnt from them when the application is built, so that the ingress
refuses it first with a 400 that says why (instead of an engine error in some stage).

- Images: the models' image processor resizes every image with its own ``smart_resize`` (Qwen2-VL's,
  which Qwen3-VL's processor uses), which raises for some shapes (an aspect ratio over 200 in the
  versions pinned here). The largest aspect ratio and the smallest side it takes are found by asking
  that very function, with the processor's own patch and merge sizes and pixel bounds.
- Prompts: the engines' context length (``max_model_len`` in ``engine_kwargs``) less the largest stage's
  needs: the transfer prompt holds a whole reasoning (its budget) and wants its own answer budget,
  plus the image's tokens at the processor's pixel bound and ``TEMPLATE_TOKENS`` for the instructions.
  What is left bounds the question and system messages, counted in UTF-8 bytes: a byte-level BPE never
  makes more tokens than bytes, so the bound is safe whatever the tokenizer (it refuses some prompts
  that would fit, never admits one that would not).

A limit set in the config is kept; a model whose processor cannot be read (a hub id without network)
leaves its limit unset, and the engine's own refusal is still a 400 (serve_app/engines/client.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from deployments.settings import local_folder

from ..config import AppConfig, ModelDeployment

logger = logging.getLogger("ray.serve")

TEMPLATE_TOKENS = 512  # the longest prompt template, its chat markup and the image's markers, with room
_RATIO_PROBE_LIMIT = 1_000_000


def with_model_limits(config: AppConfig) -> AppConfig:
    """``config`` with the limits it leaves unset learnt from its models' processors and engines."""
    limits = config.limits
    update: dict[str, Any] = {}
    processors = [_image_processor(model) for model in (config.small, config.large)]
    rules = [geometry(processor) for processor in processors if processor is not None]
    if limits.max_image_aspect_ratio is None and rules:
        ratios = [ratio for ratio, _ in rules if ratio is not None]
        update["max_image_aspect_ratio"] = min(ratios) if ratios else None
    if limits.min_image_side == 1 and rules:
        update["min_image_side"] = max(side for _, side in rules)
    if limits.max_prompt_bytes is None:
        update["max_prompt_bytes"] = prompt_bytes_left(config, processors)
    return config.model_copy(update={"limits": limits.model_copy(update=update)})


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


def _resize_rule(processor: Any) -> Callable[[int, int], Any] | None:
    """The processor's ``smart_resize(height, width)`` with its own factor and pixel bounds."""
    resize = getattr(sys.modules.get(type(processor).__module__), "smart_resize", None)
    if resize is None:
        return None
    factor = _patch_factor(processor)
    low, high = _pixel_bounds(processor)
    return lambda height, width: resize(height, width, factor=factor, min_pixels=low, max_pixels=high)


def _patch_factor(processor: Any) -> int:
    """Pixels a side of one image token: the patch size times the merge size."""
    return int(processor.patch_size) * int(getattr(processor, "merge_size", 1))


def _pixel_bounds(processor: Any) -> tuple[int, int]:
    size = getattr(processor, "size", None) or {}
    low = size.get("shortest_edge") or getattr(processor, "min_pixels", None) or 56 * 56
    high = size.get("longest_edge") or getattr(processor, "max_pixels", None) or 28 * 28 * 1280
    return int(low), int(high)


def geometry(processor: Any) -> tuple[float | None, int]:
    """(largest aspect ratio, smallest side) the processor's resize takes; (None, 1) when it has none
    or refuses nothing."""
    rule = _resize_rule(processor)
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


def prompt_bytes_left(config: AppConfig, processors: list[Any | None]) -> int | None:
    """UTF-8 bytes of question and system messages that fit every engine's context after the largest
    stage's needs; None when an engine's context length is not configured."""
    lengths = [model.engine_kwargs.get("max_model_len") for model in (config.small, config.large)]
    if any(length is None for length in lengths) or any(
        model.engine != "vllm" for model in (config.small, config.large)
    ):
        return None
    budgets = config.cascade.max_tokens
    stage_needs = max(
        budgets.reasoning + budgets.transfer, budgets.explain, budgets.reasoning + budgets.stage2
    )
    image_tokens = max(
        (_pixel_bounds(p)[1] // _patch_factor(p) ** 2 for p in processors if p),
        default=0,
    )
    left = (
        min(int(length) for length in lengths if length is not None)
        - stage_needs
        - image_tokens
        - TEMPLATE_TOKENS
    )
    if left < 64:
        logger.warning(
            "the engines' context (%s tokens) leaves %s for the question after the stage budgets and the "
            "image; no prompt-size check",
            lengths,
            left,
        )
        return None
    return left
