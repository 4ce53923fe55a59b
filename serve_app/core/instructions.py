"""What a client's text instructs: the answer format it appends to a question, and the answer kind
(or open generation) an instruction's verb asks for.

**Answer-format instructions.** The reply each one asks for.

Harnesses and chat clients write their own answer format into the question ("...\\nAnswer the question
using a single word or phrase."). The cascade's stages each carry the paper's own instruction (Appendix
C), so a client's instruction is recognised, taken out of the question, and honoured once, in the
reply. The forms are a table: each names where it comes from. A form is recognised only as the last
sentence or line of the text, whole; anything else stays in the question as sent.

**Verbs.** The answer kind an instruction asks for, read by its verb: "Count the shapes." asks for a
number, "Name the colour." for open text, "Say whether it is red." for yes or no.

A sentence is read as an instruction when it opens with one of the verbs below, after an optional
"please" or a polite request, "can/could/will you (please)" ("would you" asks an opinion: "Would you
describe it as round?" is a yes/no question). Only the verb and what follows it at once decide:

- a counting verb asks for a number;
- a verb of telling followed by "whether" or "if" asks for yes or no;
- a verb of telling or naming (not one that composes: describe, explain, list, write) followed by
  "the number/count/total/amount of" asks for a number ("a number of" means several);
- a polite verb of telling followed by a clause ("Can you say it is round?") is no instruction: it
  stays the yes/no question it reads as; followed by a question word or a noun phrase ("Could you
  tell me what colour the car is?", "Can you tell me the colour?") it asks for open text;
- any other verb of telling or naming asks for open text.

An instruction or question asks for open generation (a description, an explanation, a story: text
no short answer holds, which ``mai`` sends to the large model alone) when it opens, after the same
polite forms, with a verb that composes (describe, explain, write, list, summarise, generate, compose,
create, caption, translate, compare, elaborate, discuss, narrate, draft), with "tell (me/us)" followed
by what asks for more than a short answer (about, a, an, why, how, what, more, something, anything,
everything, all, in detail, the story), or with "why" or "what happens"; unless its verb asks for a
closed kind ("Tell me whether it is red.", "Can you tell me the number of circles?"). This module is
the one reader of both: routing asks ``generates``, the question reader ``imperative_kind``.

General English, not any dataset's; linear-time patterns.

Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from .answers import is_valid, option_letter, yes_no


class ReplyForm(StrEnum):
    """What a form asks the reply to be."""

    SHORT = "short"  # a single word, phrase or number
    LETTER = "letter"  # the letter of one of the options
    YES_NO = "yes_no"  # yes or no


@dataclass(frozen=True)
class InstructionForm:
    name: str
    phrases: tuple[str, ...]  # the wordings, compared case- and whitespace-insensitively
    reply: ReplyForm
    source: str


# The forms, from lmms-eval 0.7.3's task configs (the six tasks of the paper's datasets and their
# model-specific variants), the datasets' own question texts, and the usual chat conventions.
FORMS: tuple[InstructionForm, ...] = (
    InstructionForm(
        "single_word_or_phrase",
        ("Answer the question using a single word or phrase.",),
        ReplyForm.SHORT,
        "lmms-eval pope, infovqa and mmmu (open questions) post_prompt; LLaVA-1.5's short-answer prompt",
    ),
    InstructionForm(
        "single_word",
        ("Answer the question with a single word.",),
        ReplyForm.SHORT,
        "lmms-eval chartqa post_prompt",
    ),
    InstructionForm(
        "single_word_or_number",
        ("Please answer directly with a single word or number.",),
        ReplyForm.SHORT,
        "RealWorldQA's open questions (the dataset's text)",
    ),
    InstructionForm(
        "concise",
        ("Your response must be concise.",),
        ReplyForm.SHORT,
        "lmms-eval pope post_prompt for plm",
    ),
    InstructionForm(
        "select_from_options",
        ("Please select the correct answer from the options above.",),
        ReplyForm.SHORT,
        "lmms-eval mmmu open_ended_prompt for qwen3_vl",
    ),
    InstructionForm(
        "option_letter_directly",
        (
            "Answer with the option's letter from the given choices directly.",
            "Answer with the option letter from the given choices directly.",
        ),
        ReplyForm.LETTER,
        "lmms-eval mmbench post_prompt and mmmu multiple_choice_prompt; LLaVA-1.5's multiple-choice prompt",
    ),
    InstructionForm(
        "option_letter_only",
        ("Answer with the option letter only.",),
        ReplyForm.LETTER,
        "lmms-eval mmmu post_prompt for qwen3_vl",
    ),
    InstructionForm(
        "option_letter_nothing_else",
        ("Please answer directly with only the letter of the correct option and nothing else.",),
        ReplyForm.LETTER,
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
        ReplyForm.YES_NO,
        "MME's questions; the usual chat convention for yes/no questions",
    ),
    InstructionForm(
        "answer_cue",
        ("Answer:",),
        ReplyForm.SHORT,
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
    reply: ReplyForm
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


_POLITE = r"(?:please\s+|(?P<polite>(?:can|could|will)\s+you\s+(?:please\s+)?))?"
_COUNTING = r"count|calculate|compute|tally|total|add\s+up"  # not "sum up": it summarises
_TELLING = (
    r"say|tell(?:\s+me|\s+us)?|state|answer|check|determine|decide|confirm|verify|judge|indicate|"
    r"report|find\s+out|work\s+out"
)
_NAMING = (
    r"name|describe|identify|give(?:\s+me|\s+us)?|list|write(?:\s+down)?|read(?:\s+out)?|explain|specify"
)
_VERB = re.compile(rf"^{_POLITE}(?P<verb>{_COUNTING}|{_TELLING}|{_NAMING})(?![\w'’])", re.IGNORECASE)
_COUNTING_VERB = re.compile(rf"^(?:{_COUNTING})$", re.IGNORECASE)
_TELLING_VERB = re.compile(rf"^(?:{_TELLING})$", re.IGNORECASE)
# Verbs that compose rather than report: "Describe the amount of damage." asks for words, not a number.
_COMPOSING_VERB = re.compile(r"^(?:describe|explain|list|write(?:\s+down)?)$", re.IGNORECASE)
_WHETHER = re.compile(r"^\s+(?:whether|if)(?![\w'’])", re.IGNORECASE)
_QUANTITY = re.compile(r"^\s+(?:the\s+)?(?:number|count|total|amount|sum)\s+of(?![\w'’])", re.IGNORECASE)
# What a polite verb of telling asks about when it asks for a thing: a question word or a noun phrase.
_WHAT = re.compile(
    r"^\s+(?:what|which|where|who|whom|whose|when|why|how|the|a|an|this|that|these|those|its|their)"
    r"(?![\w'’])",
    re.IGNORECASE,
)


_GENERATING = (
    r"describe|explain|write|list|summari[sz]e|generate|compose|create|caption|translate|compare|"
    r"elaborate|discuss|narrate|draft"
)
_TELLING_MORE = (
    r"tell(?:\s+(?:me|us))?\s+(?:about|a|an|why|how|what|more|something|anything|everything|all|"
    r"in\s+detail|the\s+story)"
)
_GENERATION = re.compile(
    rf"^{_POLITE}(?:{_GENERATING}|{_TELLING_MORE})(?![\w'’])|^(?:why|what\s+happens)(?![\w'’])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Imperative:
    kind: str  # one of answers.ANSWER_KINDS, never "choice"
    verb: str  # the verb it was read by, as written (lower case, single-spaced)


def imperative_kind(sentence: str) -> Imperative | None:
    """The kind ``sentence`` asks for when it is an instruction opening with a known verb, else None."""
    match = _VERB.match(sentence.strip())
    if match is None:
        return None
    verb = " ".join(match["verb"].lower().split())
    rest = sentence.strip()[match.end() :]
    if _COUNTING_VERB.match(verb):
        return Imperative("number", verb)
    if _QUANTITY.match(rest) and not _COMPOSING_VERB.match(verb):
        return Imperative("number", verb)
    if _WHETHER.match(rest):
        return Imperative("yes_no", verb)
    if _TELLING_VERB.match(verb) and not rest.strip(" .!?"):
        return None  # "Tell me." asks nothing
    if _TELLING_VERB.match(verb) and match["polite"] and not _WHAT.match(rest):
        return None  # "Can you say it is red?" is the yes/no question it reads as
    return Imperative("text", verb)


def generates(sentence: str) -> bool:
    """Whether ``sentence`` asks for open generation (described above): a composing verb, "tell me
    about ...", a "why" question; never one whose verb asks for a closed kind."""
    stripped = sentence.strip()
    if _GENERATION.match(stripped) is None:
        return False
    read = imperative_kind(stripped)
    return read is None or read.kind == "text"
