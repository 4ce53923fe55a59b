"""A checkpoint's architecture as the memory estimates read it (deployments/memory.py): its config.json
(the text model's under ``text_config``, the vision tower's under ``vision_config``), its processor's
largest image, and its parameters: a local folder's safetensors headers, else counted from config.json
(Qwen3-VL: the text model and the vision tower, equal to what transformers builds of it). A hub id whose
config files the project vendors (``configs/checkpoints``) is read there. Pure: no torch."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Hub ids whose config files the project vendors (configs/checkpoints/README.md).
VENDORED = {
    "Qwen/Qwen3-VL-2B-Instruct": ROOT / "configs" / "checkpoints" / "qwen3-vl-2b",
    "Qwen/Qwen3-VL-8B-Instruct": ROOT / "configs" / "checkpoints" / "qwen3-vl-8b",
}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "auto": None}


@dataclass(frozen=True)
class Architecture:
    """What the estimates read of a checkpoint's config.json (the text model's under text_config)."""

    parameters: int | None  # None: not countable from what is there
    stored_bytes: int | None  # the safetensors' bytes, when there are any
    dtype_bytes: int  # the checkpoint's dtype
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    vocab: int
    vision_hidden: int = 0
    vision_intermediate: int = 0
    merge: int = 1
    patch: int = 14
    image_outputs: int = 1  # the image's embeddings kept: the main one and Qwen3-VL's deepstack ones
    out_hidden: int = 0
    max_pixels: int | None = None  # the processor's
    context: int = 32768  # max_position_embeddings
    quantized: bool = False

    def kv_bytes_per_token(self, kv_dtype_bytes: int) -> int:
        return self.layers * 2 * self.kv_heads * self.head_dim * kv_dtype_bytes

    def image_tokens(self, max_pixels: int | None, context: int) -> int:
        pixels = max_pixels or self.max_pixels
        side = self.patch * self.merge
        return context if pixels is None else min(context, pixels // (side * side))


def checkpoint_folder(source: str, local: Path | None) -> Path | None:
    """Where a model's config.json is read: its local folder, or the vendored copy of a known hub id."""
    folder = local if local is not None else VENDORED.get(source)
    return folder if folder is not None and (folder / "config.json").is_file() else None


def read_architecture(folder: Path) -> Architecture:
    config = json.loads((folder / "config.json").read_text())
    text = config.get("text_config", config)
    vision = config.get("vision_config") or {}
    hidden, heads = text["hidden_size"], text["num_attention_heads"]
    dtype = str(text.get("dtype") or text.get("torch_dtype") or config.get("torch_dtype") or "bfloat16")
    counted, stored = safetensors_size(folder)
    arch = Architecture(
        parameters=counted,
        stored_bytes=stored,
        dtype_bytes=DTYPE_BYTES.get(dtype) or 2,
        hidden=hidden,
        intermediate=text["intermediate_size"],
        heads=heads,
        kv_heads=text.get("num_key_value_heads", heads),
        head_dim=text.get("head_dim") or hidden // heads,
        layers=text["num_hidden_layers"],
        vocab=text["vocab_size"],
        vision_hidden=vision.get("hidden_size", 0),
        vision_intermediate=vision.get("intermediate_size", 0),
        merge=vision.get("spatial_merge_size", 1),
        patch=vision.get("patch_size", 14),
        image_outputs=1 + len(vision.get("deepstack_visual_indexes", [])),
        out_hidden=vision.get("out_hidden_size", hidden),
        max_pixels=_processor_pixels(folder),
        context=text.get("max_position_embeddings", 32768),
        quantized="quantization_config" in config or "quantization_config" in text,
    )
    if counted is None and config.get("model_type") == "qwen3_vl":
        arch = _with(arch, parameters=qwen3_vl_parameters(config))
    return arch


def _with(arch: Architecture, **changes: Any) -> Architecture:
    return Architecture(**{**arch.__dict__, **changes})


def _processor_pixels(folder: Path) -> int | None:
    """The image processor's largest image, from preprocessor_config.json or processor_config.json."""
    for name, key in (("preprocessor_config.json", None), ("processor_config.json", "image_processor")):
        if (folder / name).is_file():
            processor = json.loads((folder / name).read_text())
            processor = processor.get(key) or {} if key else processor
            size = processor.get("size") or {}
            pixels = processor.get("max_pixels") or size.get("longest_edge") or size.get("max_pixels")
            if pixels:
                return int(pixels)
    return None


def safetensors_size(folder: Path) -> tuple[int | None, int | None]:
    """Parameters and bytes of a folder's safetensors files, from their headers; (None, None) without."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None, None
    count = size = 0
    for path in files:
        with path.open("rb") as handle:
            header = json.loads(handle.read(int.from_bytes(handle.read(8), "little")))
        for name, tensor in header.items():
            if name != "__metadata__":
                count += math.prod(tensor["shape"])
                size += tensor["data_offsets"][1] - tensor["data_offsets"][0]
    return count, size


def qwen3_vl_parameters(config: Mapping[str, Any]) -> int:
    """Qwen3-VL's parameters from its config.json: the text model (embeddings, decoder layers with
    q/k norms, the LM head unless tied) and the vision tower (patch and position embeddings, blocks,
    the merger and one deepstack merger per deepstack layer)."""
    text, vision = config["text_config"], config["vision_config"]
    h, inter, vocab = text["hidden_size"], text["intermediate_size"], text["vocab_size"]
    heads, kv = text["num_attention_heads"], text["num_key_value_heads"]
    d = text.get("head_dim") or h // heads
    bias = (heads * d + 2 * kv * d + h) if text.get("attention_bias") else 0
    layer = h * heads * d + 2 * h * kv * d + heads * d * h + bias + 2 * d + 3 * h * inter + 2 * h
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    text_total = vocab * h * (1 if tied else 2) + text["num_hidden_layers"] * layer + h
    vh, vi, out = vision["hidden_size"], vision["intermediate_size"], vision["out_hidden_size"]
    p = vision["patch_size"]
    patch = vision["in_channels"] * vision["temporal_patch_size"] * p * p * vh + vh
    block = 4 * vh + 3 * vh * vh + 3 * vh + vh * vh + vh + 2 * vh * vi + vi + vh
    merged = vh * vision["spatial_merge_size"] ** 2

    def merger(norm: int) -> int:
        return 2 * norm + merged * merged + merged + merged * out + out

    deepstack = len(vision.get("deepstack_visual_indexes", []))
    vision_total = (
        patch
        + vision["num_position_embeddings"] * vh
        + vision["depth"] * block
        + merger(vh)
        + deepstack * merger(merged)
    )
    return text_total + vision_total


def architecture_of(source: str, local: Path | None) -> Architecture | None:
    """The architecture of a model's checkpoint, when its config.json is at hand (local or vendored)."""
    folder = checkpoint_folder(source, local)
    if folder is None:
        return None
    try:
        return read_architecture(folder)
    except (KeyError, TypeError, ValueError):  # a config.json without a decoder's shapes: not estimated
        return None
