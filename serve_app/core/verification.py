"""Verification: whether two *model* answers say the same thing, so that the cascade may stop.

Scoring a served answer against gold (the evaluation's ``relaxed_match`` and ``anls``,
evaluation/scoring.py) is lenient on purpose: the field's evaluators forgive a typo. Verification
must not be: a false agreement serves a wrong answer at the cheapest exit. So it is its own rule,
stricter than scoring:

- ``choice``: the same option (by letter or by the option's text);
- ``yes_no``: the same verdict; a hedge ("not sure", "no idea", "maybe") is no verdict;
- ``number``: integers exactly ("2018" / "2019" differ); decimals within ``decimal_tolerance`` of
  the larger (relative); a unit written on both sides must be the same unit;
- ``text``: the same normalized words. A shorter answer whose words all stand in the longer agrees
  ("New York" / "New York City") unless the longer adds a negation or an alternative ("red" / "not
  red", "cat" / "cat and dog"); two different words never agree, however many letters they share
  ("rectangle" / "triangle"); answers whose numbers differ never agree ("1.5 million" / "1.6 million").

An answer that is not valid for its kind (``answers.is_valid``: a hedge, nothing read, a letter that
is no option) never agrees, not even with itself. Symmetric, pure, never raises.

What the cascade weighs with an agreement: how sure a model was of its answer (``answer_confidence``),
the probability of the answer's tokens, from the logprobs the engine returns for the tokens it
generated (no extra decoding). Pure functions.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

from .answers import answer_span, answer_words, is_valid, normalize, parse_number
from .contracts import CascadeOptions, TokenLogprob
from .prompts import PromptKind

# The cascade's default (``CascadeOptions.decimal_tolerance``), read from its one definition.
DEFAULT_DECIMAL_TOLERANCE: float = CascadeOptions.model_fields["decimal_tolerance"].default

# Words that turn a longer answer against the shorter one it contains: a negation, or an alternative.
# ("t" is what is left of "isn't", "don't" once the apostrophe splits the word.)
NEGATIONS = frozenset({"not", "no", "never", "neither", "nor", "without", "non", "none", "nothing", "t"})
ALTERNATIVES = frozenset({"and", "or", "but", "plus", "both", "either", "except", "versus", "vs", "also"})


def agree(
    a: object,
    b: object,
    kind: str,
    *,
    choices: Sequence[str] | None = None,
    decimal_tolerance: float = DEFAULT_DECIMAL_TOLERANCE,
) -> bool:
    """Whether answers ``a`` and ``b`` to a question of ``kind`` say the same thing (module docstring)."""
    if not (isinstance(a, str) and isinstance(b, str)):
        return False
    if not (is_valid(a, kind, choices=choices) and is_valid(b, kind, choices=choices)):
        return False
    if kind == "number":
        return _numbers_agree(a, b, decimal_tolerance)
    if kind in ("choice", "yes_no"):
        return normalize(a, kind, choices=choices) == normalize(b, kind, choices=choices)
    return _texts_agree(a, b)


def _texts_agree(a: str, b: str) -> bool:
    a_words, b_words = _compared_words(a), _compared_words(b)
    if not a_words or not b_words:
        return False
    if a_words == b_words:
        return True
    shorter, longer = sorted((a_words, b_words), key=len)
    if _numbers_of(shorter) != _numbers_of(longer):
        return False
    if Counter(shorter) - Counter(longer):  # a word of the shorter is not in the longer
        return False
    added = set(longer) - set(shorter)
    return not added & (NEGATIONS | ALTERNATIVES)


def _compared_words(answer: str) -> list[str]:
    """The answer's words, a number without its thousands separators ("1,234" is "1234")."""
    return [word.replace(",", "") if word[0].isdigit() else word for word in answer_words(answer)]


def _numbers_of(tokens: list[str]) -> list[str]:
    return sorted(token for token in tokens if token[0].isdigit())


def _numbers_agree(a: str, b: str, tolerance: float) -> bool:
    a_number, b_number = parse_number(a), parse_number(b)
    if a_number is None or b_number is None:
        return False
    a_unit, b_unit = _unit(a), _unit(b)
    if a_unit and b_unit and a_unit != b_unit:
        return False
    (a_value, a_percent), (b_value, b_percent) = a_number, b_number
    pairs = [(a_value, b_value)]
    if a_percent != b_percent:  # "12%" and "12" are the same figure written two ways
        pairs.append((a_value * (100 if a_percent else 1), b_value * (100 if b_percent else 1)))
    exact = _is_integer(a) and _is_integer(b)
    return any(_close(x, y, 0.0 if exact else tolerance) for x, y in pairs)


def _close(x: float, y: float, tolerance: float) -> bool:
    return x == y or abs(x - y) <= tolerance * max(abs(x), abs(y))


def _is_integer(answer: str) -> bool:
    """The answer is written as a whole number (no decimal point, no exponent): a count, a year."""
    digits = [token for token in answer_words(answer) if token[0].isdigit()]
    return len(digits) == 1 and "." not in digits[0] and not re.search(r"\d[eE][+\-]?\d", answer)


def _unit(answer: str) -> str:
    """The words after the number ("kg", "million"), lower-cased; "" when none."""
    tokens = answer_words(answer)
    last_number = max((i for i, token in enumerate(tokens) if token[0].isdigit()), default=-1)
    return " ".join(token for token in tokens[last_number + 1 :] if token not in {"about", "approximately"})


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


def confidence_read(prompt_kind: PromptKind, options: CascadeOptions) -> bool:
    """Whether the answer of a call of ``prompt_kind`` has its confidence read under ``options``. The
    short answers' always are (stage 1's verification and ``confident_large``, the trace, a
    calibration's replay: a few tokens each), and a Stage 2 call's. A reasoning call's inline answer is
    compared under ``min_confidence`` only: its 2,048 tokens' logprobs are asked for then, or when the
    client asks for them (a calibration does). An explanation or a transfer is served, never compared."""
    if prompt_kind is PromptKind.REASONING:
        return options.resolved_stage2_answer() == "inline" and options.min_confidence > 0
    return prompt_kind in (PromptKind.SIMPLE, PromptKind.STAGE2)
