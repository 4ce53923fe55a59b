"""Either/or questions: "Is it red or blue?", "Is the shape a circle or a triangle?" ask to choose
between the options they name, never for yes or no ("Is the shape red or not?" still does).

The options are read from the asked sentence (the last one ending in "?", or, in a text with no "?"
at all, its last sentence: people leave it out), which opens with an
auxiliary verb as a yes/no question does: the option after the last "or" runs to the question mark,
or to a preposition that starts a phrase after it ("a cat or a dog in the picture"); the option
before it has as many words ("a circle or a triangle"), and a list before it is split on commas
("red, green or blue"). An option is named without its article ("circle", "triangle"). Pure, no I/O.
"""

from __future__ import annotations

import re

# An auxiliary verb opens a yes/no question, contracted negatives too ("Isn't it red?", "Can't you
# see a circle?", "Won't ...").
YES_NO_START = re.compile(
    r"^(?:(?:is|are|was|were|does|do|did|could|would|should|has|have|had|must|might|need)(?:n['’]t)?"
    r"|can(?:['’]t|not)?|won['’]t|will|am|may|ain['’]t)(?![\w'’])",
    re.IGNORECASE,
)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_OR = re.compile(r"\s+or\s+", re.IGNORECASE)
_PREPOSITIONS = frozenset(
    "in on at of for from with within inside outside near by under over above below behind to "
    "into onto than compared".split()
)
_NEGATION = frozenset({"not", "no", "neither", "none"})
_ARTICLES = frozenset({"a", "an", "the"})
_MAX_OPTION_WORDS = 4


def asked_sentence(text: str) -> str:
    """The sentence a question asks: the last ending in "?" (trailing instructions do not count)."""
    sentences = [part.strip() for part in _SENTENCE_BREAK.split(text.strip()) if part.strip()]
    questions = [sentence for sentence in sentences if sentence.endswith("?")]
    return (questions or sentences or [""])[-1]


def either_or_options(question: str) -> tuple[str, ...]:
    """The options an either/or question names, in its order; () when it is not one."""
    asked = asked_sentence(question)
    if asked.endswith("?"):
        asked = asked[:-1]
    elif "?" in question:  # a question mark elsewhere: this sentence is not the one asked
        return ()
    if not YES_NO_START.match(asked):
        return ()
    parts = _OR.split(asked.strip().rstrip("."))
    if len(parts) != 2:
        return ()
    before, after = parts
    last = _option_after(after.split())
    if not last or last[0].casefold() in _NEGATION or len(last) > _MAX_OPTION_WORDS:
        return ()
    listed = [item.strip() for item in before.split(",")]
    head = listed[0].split()[1:]  # past the auxiliary verb
    first = head[-len(last) :] if len(head) >= len(last) else head
    if _leads_with_article(last) and not _leads_with_article(first):
        first = head[-1:]
    named = (" ".join(first), *listed[1:], " ".join(last))
    options = [without_article(option.strip(" ,")) for option in named]
    if any(not option for option in options) or len({o.casefold() for o in options}) < len(options):
        return ()
    return tuple(options)


def _option_after(words: list[str]) -> list[str]:
    for index, word in enumerate(words[1:], start=1):
        if word.casefold() in _PREPOSITIONS:
            return words[:index]
    return words


def without_article(option: str) -> str:
    """``option`` without a leading article: "a circle" -> "circle" (a lone word stays)."""
    words = option.split()
    return " ".join(words[1:] if len(words) > 1 and _leads_with_article(words) else words)


def _leads_with_article(words: list[str]) -> bool:
    return bool(words) and words[0].casefold() in _ARTICLES


def choices_note(question: str, choices: tuple[str, ...]) -> str | None:
    """What the trace says when a request's own ``choices`` differ from the options its either/or
    question names: the request's choices win. None when they do not differ (or it names none)."""
    named = either_or_options(question)
    if not named or not choices or _folded(named) == _folded(choices):
        return None
    return (
        f"the question names the options {', '.join(named)}; the request's choices "
        f"({', '.join(choices)}) were used"
    )


def _folded(options: tuple[str, ...]) -> list[str]:
    return sorted(without_article(" ".join(option.casefold().split())) for option in options)
