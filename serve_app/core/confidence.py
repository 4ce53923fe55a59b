"""How sure a model was of its answer: the probability of the answer's tokens, from the logprobs the
engine returns for the tokens it generated (no extra decoding). Pure functions."""

from __future__ import annotations

import math
from collections.abc import Sequence

from .answers import answer_span
from .contracts import TokenLogprob


def answer_confidence(text: str, tokens: Sequence[TokenLogprob] | None) -> float | None:
    """The probability of the answer ``extract_answer`` reads in ``text`` (the tokens inside
    ``[[...]]``, or the bare answer): exp of the sum of the logprobs of every generated token that
    overlaps it. None without logprobs, without an answer, or when the tokens do not spell ``text``."""
    if not tokens:
        return None
    spelled = "".join(token.token for token in tokens)
    offset = spelled.find(text) if text else -1
    span = answer_span(text)
    if offset < 0 or span is None:
        return None
    start, end = span[0] + offset, span[1] + offset
    total, overlapping, position = 0.0, False, 0
    for token in tokens:
        token_start, position = position, position + len(token.token)
        if token_start < end and position > start:
            total += token.logprob
            overlapping = True
    return math.exp(total) if overlapping else None
