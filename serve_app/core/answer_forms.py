"""Answers valid by construction: the closed form of an answer kind, as the engines' structured outputs
(vLLM's ``structured_outputs: {"regex": ...}``) constrain a stage's completion.

Where the kind is closed — yes/no, a choice (the option letters, or the options an either/or question
names), a number — every stage whose answer is verified or served asks its engine for that form. The
``[[answer]]`` format stays: a short answer is exactly ``[[<answer>]]``; a reasoning or an explanation
is free text without ``[[`` up to its constrained ``[[<answer>]]``. Open text is not constrained.

What it does to an answer's confidence: vLLM masks the tokens the grammar forbids before it computes
the logprobs it reports, so a constrained token's probability is the model's renormalised over the
tokens the form allows (a forced token has probability 1). Confidences therefore rise; thresholds
calibrated without constraints do not carry over (``mai-eval calibrate`` runs with the server's
setting). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .prompts import PromptKind

# Prompt kinds whose completion is free text up to its final [[answer]].
FREE_TEXT_FIRST = (PromptKind.REASONING, PromptKind.EXPLAIN)
# The free text before it: anything but "[[", so the first "[[" a reasoning writes opens its answer
# (a bracket the text could hold would let a model write [[circle]] to a yes/no question and run on).
# No lookahead: the engines' regex grammars (xgrammar, guidance) have none.
_FREE_TEXT = r"(?:[^\[]|\[[^\[])*"
_NUMBER = r"-?[0-9]+(?:\.[0-9]+)?"


class AnswerFormError(ValueError):
    """Options no grammar can tell apart (none, an empty one, or the same twice)."""


@dataclass(frozen=True)
class AnswerForm:
    """The answers a question of a closed kind admits, as the regex of what stands in ``[[ ]]``."""

    kind: str
    pattern: str

    def regex(self, prompt_kind: PromptKind) -> str:
        """The whole completion's regex for a stage of ``prompt_kind``."""
        bracketed = rf"\[\[{self.pattern}\]\]"
        return _FREE_TEXT + bracketed if prompt_kind in FREE_TEXT_FIRST else bracketed


def answer_form(kind: str, choices: Sequence[str] = (), *, options_named: bool = False) -> AnswerForm | None:
    """The closed form of ``kind``'s answers (None for open text). ``choices``: the options; named by
    an either/or question (``options_named``), the answer is an option's text, else its letter."""
    if kind == "yes_no":
        return AnswerForm(kind, "(?:[Yy]es|[Nn]o)")
    if kind == "number":
        return AnswerForm(kind, _NUMBER)
    if kind != "choice":
        return None
    check_choices(choices)
    if options_named:
        return AnswerForm(kind, "(?:" + "|".join(re.escape(option.strip()) for option in choices) + ")")
    letters = "".join(chr(ord("A") + index) for index in range(len(choices)))
    return AnswerForm(kind, f"[{letters}]")


# An open answer asked for alone: a short text in [[ ]], without brackets or a line break, opening
# with neither a space nor a dot (so never "[[ ]]" or "[[...]]", which read as no answer), that fits
# the short budgets (32 tokens by default).
OPEN_TEXT = AnswerForm("text", r"[^\[\]\n\s.][^\[\]\n]{0,79}")


def repair_form(kind: str, choices: Sequence[str] = (), *, options_named: bool = False) -> AnswerForm:
    """The form an answer is asked for when no stage gave a valid one: the kind's closed form, or a
    short open text for ``text``."""
    return answer_form(kind, choices, options_named=options_named) or OPEN_TEXT


def check_choices(choices: Sequence[str]) -> None:
    """Options a grammar can tell apart: at least one, none empty, no two the same (ignoring case and
    surrounding spaces); else ``AnswerFormError`` naming the problem."""
    if not choices:
        raise AnswerFormError("a choice needs options, got none")
    seen: dict[str, int] = {}
    for index, option in enumerate(choices):
        key = option.strip().casefold()
        if not key:
            raise AnswerFormError(f"option {index} is empty")
        if key in seen:
            raise AnswerFormError(f"options {seen[key]} and {index} are the same ({option.strip()!r})")
        seen[key] = index
