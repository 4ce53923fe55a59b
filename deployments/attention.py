"""Attention-based selection of reasoning tokens (the paper's §5.3, sparse reasoning transfer).

vLLM returns no attention weights, so this runs one prefill with transformers: the transfer prompt
(image, question, the small model's reasoning, the instruction), and reads the attention that the
prompt's final position gives each reasoning token at one layer, averaged over heads. The reasoning
tokens are ranked by it and the smallest set whose share of the reasoning's attention reaches
``delta`` is kept, in its original order.

The prefill never holds an attention matrix: every layer runs PyTorch's scaled-dot-product attention,
and the one layer read also computes the softmax row of the final position (``last_row_attention``,
as transformers' eager attention computes it), so memory grows with the sequence, not its square.

The scorer sees an image as the engine it scores for does: its processor is loaded with the engine's
``mm_processor_kwargs`` (``load_processor``), and its weights are in bfloat16 on a GPU, float32 on the
CPU, unless a dtype is set (``scorer_dtype``).

``ReasoningScorer`` is the plain class, no Ray here; ``deployments/scorer.py`` is the Ray Serve
deployment around it, so the ingress stays light.
"""

from __future__ import annotations

import base64
import io
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

GAP = " … "  # between runs of kept tokens that were not adjacent
TORCH_DEVICES = {"cpu": "cpu", "gpu": "cuda"}  # the configuration's device names -> torch's
DEFAULT_DTYPES = {"cpu": "float32", "cuda": "bfloat16"}  # by torch device, when no dtype is set
DTYPES = ("float32", "bfloat16", "float16")  # the torch dtypes a scorer may load its weights in
ATTENTION = "mai_last_row"  # the attention implementation registered below, by this name

_capture = threading.local()  # per calling thread: the attention module read and the row it gave


def torch_device(device: str) -> str:
    """torch's name for a configured device: ``gpu`` (the configuration's word, as for the model
    deployments) is torch's ``cuda``."""
    if device not in TORCH_DEVICES:
        raise ValueError(f"scorer device must be one of {sorted(TORCH_DEVICES)}, got {device!r}")
    return TORCH_DEVICES[device]


def scorer_dtype(device: str, dtype: str | None = None) -> str:
    """The torch dtype the scorer loads its weights in: ``dtype`` when set, else bfloat16 on a GPU (the
    engines' dtype for the released checkpoints) and float32 on the CPU."""
    chosen = DEFAULT_DTYPES[torch_device(device)] if dtype is None else dtype
    if chosen not in DTYPES:
        raise ValueError(f"scorer dtype must be one of {list(DTYPES)}, got {chosen!r}")
    return chosen


def load_processor(source: str, mm_processor_kwargs: Mapping[str, Any] | None = None):
    """The checkpoint's processor under the engine's ``mm_processor_kwargs``, given to
    ``from_pretrained`` as vLLM gives them (``cached_processor_from_config``): Qwen3-VL's ``max_pixels``
    and ``min_pixels`` become its image processor's size, so an image costs the scorer the tokens it
    costs the engine."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(source, **dict(mm_processor_kwargs or {}))


def select_by_mass(weights: Sequence[float], delta: float) -> list[int]:
    """Indices of the fewest weights whose sum reaches ``delta`` of the total, in ascending order.
    Ties are broken by position (earlier first), so the result is deterministic. Empty for no weights;
    everything when the weights carry no mass."""
    if not 0 < delta <= 1:
        raise ValueError(f"delta must be in (0, 1], got {delta}")
    total = float(sum(weights))
    if not weights:
        return []
    if total <= 0:
        return list(range(len(weights)))
    ranked = sorted(range(len(weights)), key=lambda i: (-weights[i], i))
    kept, mass = [], 0.0
    for index in ranked:
        kept.append(index)
        mass += weights[index]
        if mass >= delta * total - 1e-12:
            break
    return sorted(kept)


def runs(indices: Sequence[int]) -> list[list[int]]:
    """Consecutive runs of sorted indices: [1, 2, 5] -> [[1, 2], [5]]."""
    grouped: list[list[int]] = []
    for index in indices:
        if grouped and index == grouped[-1][-1] + 1:
            grouped[-1].append(index)
        else:
            grouped.append([index])
    return grouped


def last_row_attention(query, key, attention_mask, scaling: float):
    """Attention weights of the last query position over every key, ``(batch, heads, keys)``, computed
    as transformers' eager attention computes that row: softmax in float32, back to the query's dtype.
    ``query`` is ``(batch, heads, queries, dim)``; ``key`` ``(batch, kv_heads, keys, dim)``, each key
    head shared by ``heads // kv_heads`` consecutive query heads; ``attention_mask`` None (causal: the
    last position sees every key), boolean (True attends) or additive, ``(batch, 1, queries, keys)``."""
    import torch

    batch, kv_heads, length, dim = key.shape
    last = query[:, :, -1, :].reshape(batch, kv_heads, -1, dim)  # (batch, kv_heads, group, dim)
    scores = (torch.matmul(last, key.transpose(2, 3)) * scaling).reshape(batch, -1, length)
    if attention_mask is not None:
        row = attention_mask[:, :, -1, :length]  # (batch, 1, keys)
        scores = scores.masked_fill(~row, float("-inf")) if row.dtype == torch.bool else scores + row
    return torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)


def _attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """PyTorch's scaled-dot-product attention; the module being read also keeps its last row."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if module is getattr(_capture, "module", None):
        _capture.row = last_row_attention(
            query, key, attention_mask, module.scaling if scaling is None else scaling
        )
    return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


def register_attention() -> None:
    """Make ``ATTENTION`` a transformers attention implementation, with scaled-dot-product masks."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTENTION, _attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


class ReasoningScorer:
    """Loads a Qwen3-VL checkpoint and selects reasoning tokens by one layer's attention."""

    MARK = "\u0000MAI-REASONING\u0000"

    def __init__(
        self,
        source: str,
        *,
        device: str = "cpu",
        dtype: str | None = None,
        max_reasoning_tokens: int = 4096,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
    ):
        import torch
        from transformers import Qwen3VLForConditionalGeneration

        register_attention()
        self.torch = torch
        self.device = torch_device(device)
        self.dtype = scorer_dtype(device, dtype)
        self.max_reasoning_tokens = max_reasoning_tokens
        self.processor = load_processor(source, mm_processor_kwargs)
        self.model = (
            Qwen3VLForConditionalGeneration.from_pretrained(
                source, attn_implementation=ATTENTION, dtype=getattr(torch, self.dtype)
            )
            .to(self.device)  # type: ignore[arg-type]  # transformers' stub types .to as the model's own call
            .eval()
        )
        self.layers = self.model.config.text_config.num_hidden_layers

    def select(
        self, image_url: str | None, question: str, reasoning: str, *, delta: float = 0.8, layer: int = -1
    ) -> dict[str, Any]:
        """``{"text", "tokens_before", "tokens_after", "mass", "seconds"}`` for one reasoning."""
        started = time.perf_counter()
        tokenizer = self.processor.tokenizer
        reasoning_ids = tokenizer(reasoning, add_special_tokens=False).input_ids[: self.max_reasoning_tokens]
        if not reasoning_ids:
            return {"text": "", "tokens_before": 0, "tokens_after": 0, "mass": 0.0, "seconds": 0.0}
        weights = self.attention(image_url, question, reasoning_ids, layer)
        kept = select_by_mass(weights, delta)
        text = GAP.join(tokenizer.decode([reasoning_ids[i] for i in run]).strip() for run in runs(kept))
        total = sum(weights)
        return {
            "text": text,
            "tokens_before": len(reasoning_ids),
            "tokens_after": len(kept),
            "mass": sum(weights[i] for i in kept) / total if total > 0 else 1.0,
            "seconds": time.perf_counter() - started,
        }

    def inputs(
        self, image_url: str | None, question: str, reasoning_ids: list[int]
    ) -> tuple[dict[str, Any], int]:
        """The transfer prompt's model inputs, and the position of its first reasoning token."""
        torch = self.torch
        content: list[dict[str, Any]] = [{"type": "image"}] if image_url else []
        content.append({"type": "text", "text": f"{question}\nReasoning: {self.MARK}\nAnswer the question."})
        text = self.processor.apply_chat_template(
            [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
        )
        before, after = text.split(self.MARK)
        images = [_decode_image(image_url)] if image_url else None
        prefix = self.processor(text=[before], images=images, return_tensors="pt")
        middle = torch.tensor([reasoning_ids])
        suffix = self.processor.tokenizer(after, add_special_tokens=False, return_tensors="pt").input_ids
        input_ids = torch.cat([prefix.input_ids, middle, suffix], dim=1)
        inputs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if images:
            inputs |= {
                "pixel_values": prefix.pixel_values,
                "image_grid_thw": prefix.image_grid_thw,
                "mm_token_type_ids": torch.cat(
                    [prefix.mm_token_type_ids, torch.zeros_like(middle), torch.zeros_like(suffix)], dim=1
                ),
            }
        return {key: value.to(self.device) for key, value in inputs.items()}, prefix.input_ids.shape[1]

    def attention(
        self, image_url: str | None, question: str, reasoning_ids: list[int], layer: int
    ) -> list[float]:
        """The head-averaged attention the prompt's final position gives each reasoning token at
        ``layer`` (-1: the last). One prefill without the language-model head or a KV cache."""
        if not -self.layers <= layer < self.layers:
            raise ValueError(f"layer {layer} does not exist: the scorer model has {self.layers} layers")
        inputs, start = self.inputs(image_url, question, reasoning_ids)
        _capture.module, _capture.row = self.model.model.language_model.layers[layer].self_attn, None
        try:
            with self.torch.no_grad():
                self.model.model(**inputs, use_cache=False)
            row = _capture.row
        finally:
            _capture.module = _capture.row = None
        if row is None:
            raise RuntimeError(f"layer {layer} of the scorer model computed no attention")
        final_row = row[0].float().mean(dim=0)  # heads averaged
        return final_row[start : start + len(reasoning_ids)].tolist()


def _decode_image(image_url: str):
    from PIL import Image

    payload = image_url.split(",", 1)[1] if image_url.startswith("data:") else image_url
    return Image.open(io.BytesIO(base64.b64decode(payload))).convert("RGB")
