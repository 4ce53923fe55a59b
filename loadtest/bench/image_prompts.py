"""Images for measuring prompts: a synthetic PNG of a given side, different in every call (so that no
engine serves it from its prefix cache), and how many prompt tokens it costs a served model, by the
model's image processor under the config's ``mm_processor_kwargs``
(serve_app/engine_config/image_budget.py)."""

from __future__ import annotations

import base64
import io
import sys
from collections.abc import Mapping
from typing import Any

PALETTE = ((200, 30, 30), (30, 140, 60), (40, 70, 200), (230, 180, 20), (140, 60, 170), (20, 170, 180))


def synthetic_png(side: int, index: int) -> str:
    """A ``side`` x ``side`` PNG data URL: a coloured circle on white, its corner pixel encoding
    ``index`` so that no two calls send the same image."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (side, side), (255, 255, 255))
    margin = side // 4
    ImageDraw.Draw(image).ellipse(
        (margin, margin, side - margin, side - margin), fill=PALETTE[index % len(PALETTE)]
    )
    image.putpixel((0, 0), (index & 255, (index >> 8) & 255, (index >> 16) & 255))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def image_tokens(
    processor: Any,
    side: int,
    mm_processor_kwargs: Mapping[str, Any] | None = None,
    model_config: Mapping[str, Any] | None = None,
) -> int | None:
    """Prompt tokens of a ``side`` x ``side`` image: for the ``smart_resize`` families (Qwen2-VL,
    Qwen2.5-VL, Qwen3-VL) the resized image's squares of (patch x merge) pixels; for a family of fixed
    image tokens (Gemma 3) its budget; None for a family whose rule is unknown."""
    from serve_app.engine_config.image_budget import (
        UnknownImageFamilyError,
        image_budget,
        patch_factor,
        pixel_bounds,
    )

    resize = getattr(sys.modules.get(type(processor).__module__), "smart_resize", None)
    if resize is not None and hasattr(processor, "patch_size"):
        factor = patch_factor(processor)
        low, high = pixel_bounds(processor, mm_processor_kwargs)
        height, width = resize(side, side, factor=factor, min_pixels=low, max_pixels=high)
        return (height // factor) * (width // factor)
    try:
        return image_budget(processor, mm_processor_kwargs, model_config).max_tokens
    except UnknownImageFamilyError:
        return None


def model_image_tokens(
    source: str, mm_processor_kwargs: Mapping[str, Any], sides: tuple[int, ...]
) -> dict[int, int | None]:
    """side -> prompt tokens of an image of that side for the model at ``source`` (a local folder or a
    hub id); every side None when its processor cannot be read here."""
    from deployments.settings import local_folder

    folder = str(local_folder(source) or source)
    try:
        from transformers import AutoConfig, AutoImageProcessor

        processor = AutoImageProcessor.from_pretrained(folder)
        model_config = AutoConfig.from_pretrained(folder).to_dict()
    except Exception:  # a hub id without network, a folder without a processor
        return dict.fromkeys(sides)
    return {side: image_tokens(processor, side, mm_processor_kwargs, model_config) for side in sides}
