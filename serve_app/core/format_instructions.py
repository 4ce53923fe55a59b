"""The answer-format instructions clients append to a question, and the reply each one asks for.

Harnesses and chat clients write their own answer format into the question ("...\\nAnswer the question
using a single word or phrase."). The cascade's stages each carry the paper's own instruction (Appendix
C), so a client's instruction is recognised, taken out of the question, and honoured once, in the
reply. The forms are a table: each names where it comes from. A form is recognised only as the last
sentence or line of the text, whole; anything else stays in the question as sent.

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from .answers import is_valid, option_letter, yes_no


class Reply(StrEnum):
    """What a form asks the reply to be."""

    SHORT = "short"  # a single word, phrase or number
    LETTER = "letter"  # the letter of one of the options
    YES_NO = "yes_no"  # yes or no


@dataclass(frozen=True)
class InstructionForm:
    name: str
    phrases: tuple[str, ...]  # the wordings, compared case- and whitespace-insensitively
    reply: Reply
    source: str


# The forms, from lmms-eval 0.7.3's task configs (the six tasks of the paper's datasets and their
# model-specific variants), the datasets' own question texts, and the usual chat conventions.
FORMS: tuple[InstructionForm, ...] = (
    InstructionForm(
        "single_word_or_phrase",
        ("Answer the question using a single word or phrase.",),
        Reply.SHORT,
        "lmms-eval pope, infovqa and mmmu (open questions) post_prompt; LLaVA-1.5's short-answer prompt",
    ),
    InstructionForm(
        "single_word",
        ("Answer the question with a single word.",),
        Reply.SHORT,
        "lmms-eval chartqa post_prompt",
    ),
    InstructionForm(
        "single_word_or_number",
        ("Please answer directly with a single word or number.",),
        Reply.SHORT,
        "RealWorldQA's open questions (the dataset's text)",
    ),
    InstructionForm(
        "concise",
        ("Your response must be concise.",),
        Reply.SHORT,
        "lmms-eval pope post_prompt for plm",
    ),
    InstructionForm(
        "select_from_options",
        ("Please select the correct answer from the options above.",),
        Reply.SHORT,
        "lmms-eval mmmu open_ended_prompt for qwen3_vl",
    ),
    InstructionForm(
        "option_letter_directly",
        (
            "Answer with the option's letter from the given choices directly.",
            "Answer with the option letter from the given choices directly.",
        ),
        Reply.LETTER,
        "lmms-eval mmbench post_prompt and mmmu multiple_choice_prompt; LLaVA-1.5's multiple-choice prompt",
    ),
    InstructionForm(
        "option_letter_only",
        ("Answer with the option letter only.",),
        Reply.LETTER,
        "lmms-eval mmmu post_prompt for qwen3_vl",
    ),
    InstructionForm(
        "option_letter_nothing_else",
        ("Please answer directly with only the letter of the correct option and nothing else.",),
        Reply.LETTER,
        "RealWorldQA's multiple-choice questions (the dataset's text; lmms-eval realworldqa REPLACE_PROMPT)",
    ),
    InstructionForm(
        "yes_or_no",
        (
            "Please answer yes or no.",
            "Answer yes or no.",
            "Answer with yes or no.",
            "Please answer with yes or no.",
        ),
        Reply.YES_NO,
        "MME's questions; the usual chat convention for yes/no questions",
    ),
    InstructionForm(
        "answer_cue",
        ("Answer:",),
        Reply.SHORT,
        "lmms-eval chartqa post_prompt for qwen_vl",
    ),
)

# A label some harnesses put before the question ("Question: ..."): lmms-eval mmmu pre_prompt for qwen3_vl.
QUESTION_LABEL = re.compile(r"^\s*question\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Instruction:
    """A client's format instruction found in a question: its form and the text as sent."""

    form: str
    text: str
    reply: Reply
    source: str


def _pattern(phrase: str) -> str:
    """A phrase as a regex: any case, any whitespace between words, either apostrophe, the final
    full stop optional."""
    words = [re.escape(word).replace("'", "['’]") for word in phrase.removesuffix(".").split()]
    return r"\s+".join(words) + (r"\.?" if phrase.endswith(".") else "")


_COMPILED = tuple(
    (form, re.compile(r"(?:" + "|".join(map(_pattern, form.phrases)) + r")\s*$", re.IGNORECASE))
    for form in FORMS
)


def _ends_a_sentence(text: str) -> bool:
    """What may stand before an instruction: nothing, a line break, or the end of a sentence (then
    only whitespace)."""
    kept = text.rstrip()
    return not kept or kept[-1] in ".?!:)]" or "\n" in text[len(kept) :]


def trailing_instruction(text: str) -> tuple[str, Instruction | None]:
    """``text`` without the format instruction that ends it, and that instruction; ``(text, None)``
    when it ends in none of ``FORMS``, or when the phrase is not a sentence or line of its own."""
    for form, pattern in _COMPILED:
        match = pattern.search(text)
        if match is None or not _ends_a_sentence(text[: match.start()]):
            continue
        instruction = Instruction(form.name, match.group(0).strip(), form.reply, form.source)
        return text[: match.start()].rstrip(), instruction
    return text, None


def reply_in_format(
    answer: str, instruction: Instruction | None, kind: str, choices: Sequence[str] = ()
) -> str:
    """The answer as the client's instruction asks: the option letter for a question with options,
    "Yes" or "No" for a yes/no question, else the short answer itself. Without an instruction, or
    when the answer is not one of its kind, the answer is returned unchanged."""
    if instruction is None or not is_valid(answer, kind, choices=choices):
        return answer
    if kind == "choice":
        return option_letter(answer, choices) or answer
    if kind == "yes_no":
        return "Yes" if yes_no(answer) == "yes" else "No"
    return answer
