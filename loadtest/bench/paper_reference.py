"""The paper's figures for a served model, to read a measurement beside: which of the paper's Qwen3-VL
sizes (2B, 4B, 8B on one H100) a model is, its time to first token at a prompt's length (Table 3,
interpolated) and its average decoding speed (Table 4)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from deployments import paper_profile

# The paper's pair, for a model whose name gives no size: the cascade's small and large models.
PAPER_PAIR = {"small": "2b", "large": "8b"}
_SIZE = re.compile(r"(?<![0-9a-z.])(\d+(?:\.\d+)?)b(?![a-z0-9])")


@dataclass(frozen=True)
class PaperSize:
    size: str | None  # "2b", "4b", "8b"; None: the paper has no figures for this model
    basis: str  # how it was chosen, for the table

    @property
    def label(self) -> str:
        return "–" if self.size is None else f"{self.size[:-1]}B"


def paper_size(role: str, *names: str) -> PaperSize:
    """The paper's model size for a served model: the size its names (source, model id) give, e.g.
    ``Qwen/Qwen3-VL-2B-Instruct`` is 2B; none when that size is not in the paper; the paper's pair
    (2B small, 8B large) when the names give no size."""
    for name in names:
        found = _SIZE.search(name.lower())
        if found:
            size = f"{found.group(1)}b"
            if size in paper_profile.MODELS:
                return PaperSize(size, f"{size[:-1]}B by its name")
            return PaperSize(None, f"{size[:-1]}B, which the paper did not measure")
    pair = PAPER_PAIR[role]
    return PaperSize(pair, f"the paper's {role} model ({pair[:-1]}B): its name gives no size")


def table3_range() -> tuple[int, int]:
    """The context lengths Table 3 measured, in tokens: outside them its TTFT is extrapolated."""
    tokens = [point for points in paper_profile.TTFT_MS.values() for point, _ in points]
    return min(tokens), max(tokens)


def paper_ttft_ms(size: str, prompt_tokens: float) -> tuple[float, bool]:
    """Table 3's TTFT at ``prompt_tokens`` (interpolated) and whether that is outside what it measured."""
    low, high = table3_range()
    return round(paper_profile.ttft_ms(size, prompt_tokens), 2), not low <= prompt_tokens <= high


def paper_decode_tokens_per_s(size: str) -> float:
    """Table 4's average decoding speed."""
    return paper_profile.DECODE_TOKENS_PER_S[size]
