"""Answer extraction, normalisation and agreement.

Pure functions, no I/O. They follow what the field's evaluators score (lmms-eval's ChartQA relaxed
accuracy, InfoVQA/DocVQA ANLS, POPE yes/no, MMBench option extraction) and fix their known quirks:
"Yes." is yes, "12%" and "12" can agree, "(C)" / "c." / "Answer: C" are all option C.

What scoring (does a prediction match the gold answer? ``evaluation/scoring.py``) and verification (do
two *model* answers say the same thing? ``verification.py``, a stricter rule) share: extraction,
option letters, yes/no, numbers, normalisation and validity. The answer kind a question wants is
read from the question's text (``question_parsing.infer_kind``).
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Sequence
from typing import Literal, get_args

# The kinds of answer a question may want: the matcher that verifies and scores it. The API's
# ``answer_type`` takes them (serve_app/edge/protocol.py), the trace and statistics name them.
AnswerKind = Literal["choice", "yes_no", "number", "text"]
ANSWER_KINDS: tuple[AnswerKind, ...] = get_args(AnswerKind)

_BOXED = re.compile(r"\\boxed\{([^{}]*)\}")
_ANSWER_IS = re.compile(r"(?:final\s+answer|answer)\s*(?:is|:)\s*:?\s*(?P<ans>[^\n]+)", re.IGNORECASE)
_PLACEHOLDERS = {"answer", "..."}
_MAX_BARE_WORDS = 6
_MAX_BARE_CHARS = 64
_EDGE_NOISE = " \t\r\n\"'`*_“”‘’"
_TRAILING_PUNCT = ".,;:!?。"
ARTICLES = frozenset({"a", "an", "the"})  # what ``without_article`` drops


def as_text(value: object) -> str | None:
    """An answer as text: a string as it is, a number or bool written out, anything else None."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool | int | float):
        return str(value)
    return None


def _collapse(text: str) -> str:
    return " ".join(text.split())


def _clean(text: str) -> str:
    """Strip whitespace, quotes, markdown emphasis and trailing sentence punctuation."""
    previous = None
    while previous != text:
        previous = text
        text = text.strip(_EDGE_NOISE).rstrip(_TRAILING_PUNCT)
    return _collapse(text)


# ---------------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------------


def extract_answer(text: object) -> str | None:
    """The answer a model gave in ``text``.

    The last non-empty ``[[...]]`` wins. Without brackets: ``\\boxed{...}``, then the last
    "Answer: X" / "The answer is X", then a short bare reply ("Yes.", "C", "400"). ``None`` when the
    text holds nothing usable (a long explanation with no marked answer, or nothing at all).
    """
    located = _locate_answer(as_text(text))
    return None if located is None else _clean(located[0][located[1] : located[2]])


def answer_span(text: str | None) -> tuple[int, int] | None:
    """Where in ``text`` the answer ``extract_answer`` reads stands (start, end), or None."""
    located = _locate_answer(text)
    return None if located is None else located[1:]


def _locate_answer(text: str | None) -> tuple[str, int, int] | None:
    """The answer's place: ``text`` (or ``text`` with its bracketed parts blanked, the same offsets)
    and the answer's start and end in it."""
    if text is None:
        return None
    spans = bracketed(text)
    for start, end in reversed(spans):
        answer = _clean(text[start:end])
        if answer and answer.lower() not in _PLACEHOLDERS:
            return text, start, end
    unbracketed = _blanked(text, spans)  # offsets kept
    boxed = list(_BOXED.finditer(unbracketed))
    if boxed and _clean(boxed[-1].group(1)):
        return unbracketed, *boxed[-1].span(1)
    stated = list(_ANSWER_IS.finditer(unbracketed))
    if stated:
        answer = _clean(stated[-1].group("ans"))
        if answer and len(answer.split()) <= _MAX_BARE_WORDS:
            return unbracketed, *stated[-1].span("ans")
    bare = _clean(unbracketed)
    if (
        bare
        and "\n" not in unbracketed.strip()
        and len(bare.split()) <= _MAX_BARE_WORDS
        and len(bare) <= _MAX_BARE_CHARS
        and bare.lower() not in _PLACEHOLDERS
    ):
        return unbracketed, len(unbracketed) - len(unbracketed.lstrip()), len(unbracketed.rstrip())
    return None


def bracketed(text: str) -> list[tuple[int, int]]:
    """Where the insides of ``text``'s ``[[...]]`` parts stand, left to right: each from a ``[[`` to
    the first ``]]`` after it. Linear: once no ``]]`` follows a ``[[``, none follows a later one."""
    spans: list[tuple[int, int]] = []
    position = 0
    while (opened := text.find("[[", position)) >= 0:
        closed = text.find("]]", opened + 2)
        if closed < 0:
            break
        spans.append((opened + 2, closed))
        position = closed + 2
    return spans


def _blanked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each bracketed part (brackets included) turned to spaces, offsets kept."""
    pieces, position = [], 0
    for start, end in spans:
        pieces += [text[position : start - 2], " " * (end - start + 4)]
        position = end + 2
    return "".join(pieces) + text[position:]


# ---------------------------------------------------------------------------------------------
# Option letters
# ---------------------------------------------------------------------------------------------

_LETTER_PREFIX = re.compile(
    r"^(?:the\s+)?(?:correct\s+|final\s+)?(?:answer|option|choice)\s*(?:is|:)?\s*:?\s*",
    re.IGNORECASE,
)
_PAREN_LETTER = re.compile(r"^\(([A-Za-z])\)(?:\s|$|[.:,])")
_UPPER_LETTER_MARK = re.compile(r"^([A-Z])[.):](?:\s|$)")
_LOWER_LETTER_MARK = re.compile(r"^([a-z])[.)](?:\s|$)")


def option_letter(answer: object, choices: Sequence[str] | None = None) -> str | None:
    """The option letter an answer names: "C", "(C)", "c.", "[[C]]", "Answer: C", "C. 400",
    or, with ``choices``, the text of an option ("400" -> the letter of the option "400")."""
    raw = as_text(answer)
    if raw is None:
        return None
    text = extract_answer(raw) if "[[" in raw else raw
    if text is None:
        return None
    text = _collapse(text.strip(_EDGE_NOISE))
    text = _LETTER_PREFIX.sub("", text).strip(_EDGE_NOISE)
    bare = text.strip("()[] ").rstrip(_TRAILING_PUNCT).strip("()[] ")
    if len(bare) == 1 and bare.isascii() and bare.isalpha():
        return bare.upper()
    # An option's own text before any letter pattern: "C. elegans" is that option, not option C.
    letter = _letter_of_text(text, choices)
    if letter is not None:
        return letter
    for pattern in (_PAREN_LETTER, _UPPER_LETTER_MARK, _LOWER_LETTER_MARK):
        match = pattern.match(text)
        if match:
            return match.group(1).upper()
    return None


def _letter_of_text(text: str, choices: Sequence[str] | None) -> str | None:
    """The letter of the option whose text ``text`` is, if any."""
    wanted = _clean(text).casefold()
    folded = [_clean(str(choice)).casefold() for choice in (choices or ())[:26]]
    for compared in (lambda option: option, without_article):  # "a cat" names the option "cat"
        for index, option in enumerate(folded):
            if wanted and compared(wanted) == compared(option):
                return chr(ord("A") + index)
    return None


def without_article(option: str) -> str:
    """``option`` without a leading article: "a circle" -> "circle" (a lone word stays)."""
    words = option.split()
    return " ".join(words[1:] if len(words) > 1 and words[0].casefold() in ARTICLES else words)


# ---------------------------------------------------------------------------------------------
# Yes / no
# ---------------------------------------------------------------------------------------------

_YES = {"yes", "y", "true", "correct", "yeah", "yep"}
_NO = {"no", "n", "false", "incorrect", "not", "nope"}
_WORD = re.compile(r"[^\W_]+", re.UNICODE)


def yes_no(answer: object) -> str | None:
    """ "yes" or "no" when the answer starts with one ("Yes.", "no, there is not"), else None."""
    raw = as_text(answer)
    if raw is None:
        return None
    words = _WORD.findall(raw.casefold())
    if not words:
        return None
    if words[0] in _YES:
        return "yes"
    if words[0] in _NO:
        return "no"
    return None


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------

# Linear on any text: no two adjacent repeats can take the same characters (the lead keeps the
# spaces before a sign, currency or number; a sign or currency, those after it; the unit, those after
# the number or percent sign), so a failed match never tries the ways to split a run between them.
_NUMBER = re.compile(
    r"^(?P<lead>[^\d+\-−.]*?)(?:(?P<sign>[+\-−])\s*)?(?:(?P<cur>[$€£¥])\s*)?"
    r"(?P<num>(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|\.\d+)"
    r"(?:[eE](?P<exp>[+\-]?\d+))?(?:\s*(?P<pct>%))?(?P<unit>[^\d]*)$"
)
_UNIT = re.compile(r"^[\w$€£¥°/ .²³]*$", re.UNICODE)
_LEAD = re.compile(r"^[\s$€£¥~≈]*(?:(?:about|approximately|approx\.?|around)[\s$€£¥~≈]*)?$", re.IGNORECASE)


def parse_number(answer: object) -> tuple[float, bool] | None:
    """``(value, had_percent_sign)`` for an answer that is one number, possibly with a currency
    sign, thousands separators, a percent sign or a unit ("$1,234", "12%", "3.5 kg"); else None.
    A percentage is returned as a fraction: "12%" -> (0.12, True)."""
    raw = as_text(answer)
    if raw is None:
        return None
    text = unicodedata.normalize("NFKC", raw).strip().strip(_EDGE_NOISE).rstrip(".").strip()
    match = _NUMBER.match(text)
    if not match or not _LEAD.match(match.group("lead")) or not _UNIT.match(match.group("unit").strip()):
        return None
    digits = match.group("num").replace(",", "")
    try:
        # One float of mantissa and exponent: 10 ** int(exp) would build an integer of any size.
        value = float(f"{digits}e{match.group('exp') or 0}")
    except (ValueError, OverflowError):
        return None
    if match.group("sign") in ("-", "−"):
        value = -value
    percent = bool(match.group("pct"))
    if percent:
        value /= 100.0
    if not math.isfinite(value):
        return None
    return value, percent


def _format_number(value: float) -> str:
    return format(value, ".12g")


# ---------------------------------------------------------------------------------------------
# Normalisation, agreement, kind inference
# ---------------------------------------------------------------------------------------------


def normalize(answer: object, kind: str, *, choices: Sequence[str] | None = None) -> str:
    """The canonical form of an answer for its kind: an option letter ("C"), "yes"/"no", a number
    ("0.12" for "12%"), or lowercased text with collapsed whitespace. An answer that does not fit
    its kind falls back to the text form. Unknown kinds are treated as ``text``."""
    raw = as_text(answer)
    if raw is None:
        return ""
    if kind == "choice":
        letter = option_letter(raw, choices)
        if letter is not None:
            return letter
    elif kind == "yes_no":
        verdict = yes_no(raw)
        if verdict is not None:
            return verdict
    elif kind == "number":
        number = parse_number(raw)
        if number is not None:
            return _format_number(number[0])
    return _clean(raw).casefold()


_TOKEN = re.compile(r"\d+(?:[.,]\d+)*|[^\W\d_]+", re.UNICODE)
# Replies that say the model does not know: no answer to a yes/no, number or open question.
HEDGES = frozenset(
    {
        "not sure",
        "unsure",
        "no idea",
        "n a",
        "na",
        "none",
        "maybe",
        "perhaps",
        "possibly",
        "unknown",
        "uncertain",
        "unclear",
        "not certain",
        "not clear",
        "cannot tell",
        "can t tell",
        "cant tell",
        "cannot say",
        "can t say",
        "hard to say",
        "hard to tell",
        "impossible to tell",
        "impossible to say",
        "cannot determine",
        "can t determine",
        "cannot be determined",
        "not known",
        "don t know",
        "dont know",
        "i don t know",
        "i dont know",
        "i do not know",
        "i m not sure",
        "i am not sure",
    }
)


def answer_words(answer: str) -> list[str]:
    """An answer's words: NFKC, case-folded, punctuation dropped, a number one word ("1,234.5")."""
    return _TOKEN.findall(unicodedata.normalize("NFKC", answer).casefold())


def is_hedge(answer: object) -> bool:
    """Whether the answer only says the model does not know ("Not sure.", "N/A", "I don't know")."""
    text = as_text(answer)
    return text is not None and " ".join(answer_words(text)) in HEDGES


def is_valid(answer: object, kind: str, *, choices: Sequence[str] | None = None) -> bool:
    """Whether ``answer`` answers a question of ``kind`` at all: yes or no for ``yes_no``; one of the
    options (by letter or text) for ``choice``; a number for ``number``; some words for ``text``.
    "maybe" to a yes/no question, "E" among two options, "unknown" for a number are not, and a hedge
    ("not sure", "no idea", ``HEDGES``) answers no question but a choice that offers it as an option."""
    text = as_text(answer)
    if text is None or not _clean(text):
        return False
    if kind == "choice":
        letter = option_letter(text, choices)
        return letter is not None and (not choices or ord(letter) - ord("A") < len(choices))
    if not answer_words(text) or is_hedge(text):
        return False
    if kind == "yes_no":
        return yes_no(text) is not None
    if kind == "number":
        return parse_number(text) is not None
    return True
