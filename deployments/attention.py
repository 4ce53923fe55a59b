"""Attention-based selection of reasoning tokens (the paper's §5.3, sparse reasoning transfer).

vLLM returns no attention weights, so this runs one prefill with transformers in eager attention mode:
the transfer prompt (image, question, the small model's reasoning, the instruction), and reads the
attention that the prompt's final position gives each reasoning token at one layer, averaged over
heads. The reasoning tokens are ranked by it and the smallest set whose share of the reasoning's
attention reaches ``delta`` is kept, in its original order.

``ReasoningScorer`` is the plain class, no Ray here; ``deployments/scorer.py`` is the Ray Serve
deployment around it, so the ingress stays light.
"""

from __future__ import annotations

import base64
import io
import time
from collections.abc import Sequence
from typing import Any

GAP = " … "  # between runs of kept tokens that were not adjacent


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


class ReasoningScorer:
    """Loads a Qwen3-VL checkpoint with eager attention and selects reasoning tokens by attention."""

    MARK = "\u0000MAI-REASONING\u0000"

    def __init__(
        self, source: str, *, device: str = "cpu", dtype: str = "float32", max_reasoning_tokens: int = 4096
    ):
        import torch
        from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

        self.torch = torch
        self.device = device
        self.max_reasoning_tokens = max_reasoning_tokens
        self.processor = AutoProcessor.from_pretrained(source)
        self.model = (
            Qwen3VLForConditionalGeneration.from_pretrained(
                source, attn_implementation="eager", dtype=getattr(torch, dtype)
            )
            .to(device)  # type: ignore[arg-type]  # transformers' stub types .to as the model's own call
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
        if not -self.layers <= layer < self.layers:
            raise ValueError(f"layer {layer} does not exist: the scorer model has {self.layers} layers")
        weights = self._attention(image_url, question, reasoning_ids, layer)
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

    def _attention(
        self, image_url: str | None, question: str, reasoning_ids: list[int], layer: int
    ) -> list[float]:
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
        with torch.no_grad():
            output = self.model(
                **{key: value.to(self.device) for key, value in inputs.items()}, output_attentions=True
            )
        final_row = output.attentions[layer][0].float().mean(dim=0)[-1]  # heads averaged, last position
        start = prefix.input_ids.shape[1]
        return final_row[start : start + len(reasoning_ids)].tolist()


def _decode_image(image_url: str):
    from PIL import Image

    payload = image_url.split(",", 1)[1] if image_url.startswith("data:") else image_url
    return Image.open(io.BytesIO(base64.b64decode(payload))).convert("RGB")
