"""How many tokens one image costs a model: the one place the image budget is read.

A model's image budget is its family's processor rule applied to the processor's own settings, as the
config's ``engine_kwargs.mm_processor_kwargs`` override them (vLLM passes them to the same processor).
The prompt-size check and the ingress's image limits (``model_limits.py``) are derived from it, and so
is the refusal at start of a context too small for the configured budgets.

Families, by their image processor:
- Qwen2-VL, Qwen2.5-VL, Qwen3-VL (``smart_resize``): an image is resized to at most ``max_pixels``
  (``size.longest_edge``; vLLM's ``qwen3_vl.py`` passes it to ``smart_resize``) in squares of
  (patch size x merge size) pixels, one token each: at most ``max_pixels // factor**2`` tokens.
- Gemma 3 (SigLIP): every image is resized to one square and pooled to the model's
  ``mm_tokens_per_image`` (config.json) tokens, whatever its size; with pan-and-scan on, up to
  ``pan_and_scan_max_num_crops`` crops more of the same size (vLLM's ``gemma3_mm.py``,
  ``get_num_image_tokens``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ImageBudget:
    """What one image may cost a model, and the settings it comes from."""

    family: str  # the image processor's class name
    max_tokens: int  # prompt tokens of the largest image, after the processor resized it
    max_pixels: int | None = None  # the pixel bound resized images stay within (None: fixed size)
    min_pixels: int | None = None
    pixels_per_token: int | None = None  # a token's square of pixels (None: fixed size)

    def as_dict(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "max_image_tokens": self.max_tokens,
            "max_pixels": self.max_pixels,
            "min_pixels": self.min_pixels,
            "pixels_per_token": self.pixels_per_token,
        }


class UnknownImageFamilyError(ValueError):
    """A processor whose image-token rule this module does not know."""


def image_budget(
    processor: Any,
    mm_processor_kwargs: Mapping[str, Any] | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> ImageBudget:
    """The budget of one image under ``processor`` (the model's image processor) with the config's
    ``mm_processor_kwargs``; ``model_config`` is the checkpoint's config.json, for the families whose
    image tokens it fixes."""
    overrides = dict(mm_processor_kwargs or {})
    family = type(processor).__name__
    if _is_smart_resize(processor):
        factor = patch_factor(processor)
        low, high = pixel_bounds(processor, overrides)
        return ImageBudget(family, high // factor**2, high, low, factor**2)
    if family.startswith("Gemma3ImageProcessor"):
        return _gemma3(processor, overrides, model_config or {})
    raise UnknownImageFamilyError(
        f"no image-token rule for {family}: set limits.max_prompt_bytes and check the model's image "
        "tokens yourself"
    )


def _gemma3(processor: Any, overrides: Mapping[str, Any], model_config: Mapping[str, Any]) -> ImageBudget:
    per_crop = model_config.get("mm_tokens_per_image")
    if not isinstance(per_crop, int) or per_crop <= 0:
        raise UnknownImageFamilyError("a Gemma 3 checkpoint without mm_tokens_per_image in its config.json")
    pan_and_scan = overrides.get("do_pan_and_scan", getattr(processor, "do_pan_and_scan", False))
    crops = (
        int(overrides.get("pan_and_scan_max_num_crops", getattr(processor, "pan_and_scan_max_num_crops", 0)))
        if pan_and_scan
        else 0
    )
    return ImageBudget(type(processor).__name__, (crops + 1) * per_crop)


def _is_smart_resize(processor: Any) -> bool:
    import sys

    module = sys.modules.get(type(processor).__module__)
    return hasattr(module, "smart_resize") and hasattr(processor, "patch_size")


def patch_factor(processor: Any) -> int:
    """Pixels a side of one image token: the patch size times the merge size."""
    return int(processor.patch_size) * int(getattr(processor, "merge_size", 1))


def pixel_bounds(processor: Any, overrides: Mapping[str, Any] | None = None) -> tuple[int, int]:
    """(min, max) pixels of a resized image: the processor's ``size`` edges (or ``min_pixels`` /
    ``max_pixels``), with vLLM's override order: ``size``, then ``min_pixels`` / ``max_pixels``."""
    overrides = overrides or {}
    size = dict(getattr(processor, "size", None) or {})
    size.update(overrides.get("size") or {})
    low = size.get("shortest_edge") or getattr(processor, "min_pixels", None) or 56 * 56
    high = size.get("longest_edge") or getattr(processor, "max_pixels", None) or 28 * 28 * 1280
    low = overrides.get("min_pixels", low)
    high = overrides.get("max_pixels", high)
    for key, value in (("min_pixels", low), ("max_pixels", high)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"mm_processor_kwargs.{key} must be a positive number of pixels, got {value!r}")
    if low > high:
        raise ValueError(f"mm_processor_kwargs: min_pixels {low} exceeds max_pixels {high}")
    return int(low), int(high)
