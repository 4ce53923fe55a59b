"""Transfer selectors (the paper's §5.3): what of the small model's reasoning the large model reads.

- ``full``: all of it (the default);
- ``budget``: cheap, no model: the first and last words of the reasoning, and every word in between
  that holds a number or names an option letter; gaps marked with " … ".
- ``attention``: the reasoning tokens the final prompt position attends to most, up to a share
  ``delta`` of the attention mass, scored by the AttentionScorer deployment (deployments/scorer.py).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .contracts import Question, Selection, TransferSelector

GAP = " … "


class UnknownSelectorError(ValueError):
    """A transfer selector that is not available here."""


def check_transfer_selector(name: str, available: Mapping[str, Any] | tuple[str, ...]) -> None:
    """The one check of a selector name, against the selectors available (a mapping or names)."""
    if name not in available:
        raise UnknownSelectorError(
            f"unknown transfer_selector {name!r}; available here: {', '.join(sorted(available))}"
        )


def count_words(text: str) -> int:
    return len(text.split())


async def keep_full_reasoning(reasoning: str, question: Question) -> str:
    return reasoning


DEFAULT_SELECTORS: Mapping[str, TransferSelector] = {"full": keep_full_reasoning}
_KEY_WORD = re.compile(r"\d|^\(?[A-Z][.):]?$|^\[\[.*\]\]$")


def budget_select(reasoning: str, head_words: int, tail_words: int) -> Selection:
    """Keep the first ``head_words`` and last ``tail_words`` words and every number or option letter."""
    words = reasoning.split()
    keep = [
        i < head_words or i >= len(words) - tail_words or bool(_KEY_WORD.search(word.strip(",;")))
        for i, word in enumerate(words)
    ]
    pieces: list[str] = []
    run: list[str] = []
    for word, kept in zip(words, keep, strict=True):
        if kept:
            run.append(word)
        elif run:
            pieces.append(" ".join(run))
            run = []
    if run:
        pieces.append(" ".join(run))
    text = GAP.join(pieces)
    if keep and not keep[0]:
        text = GAP.strip() + " " + text
    return Selection(text, len(words), sum(keep))


def budget_selector(head_words: int, tail_words: int) -> TransferSelector:
    async def select(reasoning: str, question: Question) -> Selection:
        return budget_select(reasoning, head_words, tail_words)

    return select


def attention_selector(
    score: Callable[..., Awaitable[dict[str, Any]]], delta: float, layer: int
) -> TransferSelector:
    """``score(image_url, question, reasoning, delta, layer)`` is the scorer deployment's ``select``."""

    async def select(reasoning: str, question: Question) -> Selection:
        result = await score(question.image_url, question.question, reasoning, delta, layer)
        return Selection(result["text"], result["tokens_before"], result["tokens_after"], unit="tokens")

    return select
