"""A client's question read as the paper reads it: the bare question, its options, its answer kind,
and the client's answer-format instruction set aside for the reply. Everything here reads the
question's text.

The paper puts its own templates (Appendix C) around the bare question; clients and harnesses send
the question with their own instruction and, for multiple choice, the options written into the text.
``parse_question`` takes those apart:

1. a "Question:" label before the question is dropped;
2. a known format instruction ending the text (``instructions.FORMS``) is set aside;
3. options written into the text (``split_choices``) become the choices, with the label before them
   ("Options:"), and an instruction between the question and the options is set aside as in 2;
4. what is left is the question. An instruction that cannot apply (a letter with no options, yes or
   no to a question with options) is not taken: the text stays as sent.

Options written into a question's text: "A. cat" lines (also "A) cat", "(A) cat", "A: cat"), or one
line of "(A) cat (B) dog" after the question or an "Options:" label.

Either/or questions: "Is it red or blue?", "Is the shape a circle or a triangle?" ask to choose
between the options they name, never for yes or no ("Is the shape red or not?" still does). The
options are read from the asked sentence (the last one ending in "?", or, in a text with no "?" at
all, its last sentence: people leave it out), which opens with an auxiliary verb as a yes/no question
does: the option after the last "or" runs to the question mark, or to a preposition that starts a
phrase after it ("a cat or a dog in the picture"); the option before it has as many words ("a circle
or a triangle"), and a list before it is split on commas ("red, green or blue"). An option is named
without its article ("circle", "triangle").

Pure functions, no I/O. ``QuestionFormatError`` names what a client must fix.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .answers import ARTICLES, as_text, without_article
from .contracts import Question
from .instructions import (
    QUESTION_LABEL,
    Instruction,
    ReplyForm,
    generates,
    imperative_kind,
    trailing_instruction,
)


class QuestionFormatError(ValueError):
    """The question cannot be read: nothing left but an instruction, or options that contradict the
    request's own. ``code`` names the problem for the API."""

    def __init__(self, message: str, code: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class ParsedQuestion:
    text: str  # the question, without label, instruction or options
    choices: tuple[str, ...]  # the options: the request's, else those written in the text
    instruction: Instruction | None  # the client's format instruction, None when none was recognised
    choices_from_text: tuple[str, ...]  # the options read from the text, () when none were written


def parse_question(text: str, choices: Sequence[str] | None = None) -> ParsedQuestion:
    """Read ``text`` (with the request's own ``choices``, if any) as described above."""
    given = tuple(choice.strip() for choice in choices) if choices else ()
    parsed = _read(text, given, take_instruction=True)
    if parsed.instruction is not None and not _applies(parsed.instruction, parsed.choices):
        parsed = _read(text, given, take_instruction=False)
    if not parsed.text:
        what = (
            f"an answer-format instruction ({parsed.instruction.text!r})" if parsed.instruction else "options"
        )
        raise QuestionFormatError(
            f"the question text is only {what}, with no question; send the question itself",
            code="missing_question",
        )
    return parsed


def read_question(
    text: str, choices: Sequence[str] | None = None, kind: str | None = None, images: Sequence[str] = ()
) -> Question:
    """The cascade's question for a client's ``text`` (``parse_question``), with its images, its
    answer kind (``kind`` when the request gives one, else ``answer_kind``) and its options."""
    parsed = parse_question(text, choices)
    kind, question_choices, named, basis = answer_kind(parsed.text, parsed.choices, kind, parsed.instruction)
    return Question(
        question=parsed.text,
        images=tuple(images),
        choices=question_choices,
        kind=kind,
        kind_basis=basis,
        instruction=parsed.instruction,
        choices_from_text=parsed.choices_from_text,
        options_named=named,
    )


def asks_open_generation(text: str) -> bool:
    """Whether a client's ``text`` asks for open generation (``instructions.generates``) in any of its
    sentences, read as the question is: a "Question:" label before it dropped. The one place routing
    learns it (``edge/routing.py``)."""
    unlabelled = QUESTION_LABEL.sub("", text, count=1)
    return any(generates(sentence) for sentence in _SENTENCE_BREAK.split(unlabelled) if sentence.strip())


def answer_kind(
    text: str, choices: tuple[str, ...], kind: str | None, instruction: Instruction | None
) -> tuple[str, tuple[str, ...], bool, str]:
    """The one place a question's answer kind is decided: ``(kind, choices, options_named, basis)``.
    The request's own ``kind`` wins; with options (the request's or those written in the text), a
    choice; a client's yes-or-no instruction, yes/no; an either/or question ("Is it red or blue?") is
    a choice between the options it names (``options_named``); else what the question asks
    (``infer_kind``). ``basis``: which of these decided (the trace's ``kind_basis``)."""
    if kind is not None:
        return kind, choices, False, "request"
    if choices:
        return "choice", choices, False, "options"
    if instruction is not None and instruction.reply is ReplyForm.YES_NO:
        return "yes_no", (), False, "instruction"
    named = either_or_choices(text)
    if named:
        return "choice", named, True, "either_or"
    inferred, basis = read_kind(text)
    return inferred, (), False, basis


_NUMBER_CUES = re.compile(
    r"\b(?:how\s+(?:many|much|old|long|far|tall|high|often)|what\s+(?:is\s+the\s+)?"
    r"(?:percentage|percent|number|value|total|sum|difference|average|mean|median|ratio|"
    r"rate|count|amount|year)|in\s+which\s+year|what\s+year)\b",
    re.IGNORECASE,
)


def infer_kind(question: object, choices: Sequence[str] | None = None) -> str:
    """Guess the answer kind of a question: ``choice`` when options are given, listed in the
    question or named by an either/or question ("Is it red or blue?"), else what ``read_kind`` reads."""
    text = as_text(question) or ""
    if choices or split_choices(text)[1] or either_or_choices(text):
        return "choice"
    return read_kind(text)[0]


def read_kind(text: str) -> tuple[str, str]:
    """The kind the asked sentence asks for, and what decided it: ``number`` for quantity questions
    ("How many ...?", "What percentage ...?"; basis ``number_cue``); an instruction's kind by its
    verb ("Count the shapes.", "Say whether it is red."; basis ``imperative:<verb>``,
    serve_app/core/instructions.py); ``yes_no`` for a question opening with an auxiliary verb ("Is
    there ...?"; basis ``auxiliary_verb``); else ``text`` (basis ``default``). The last sentence ending
    in "?" is the one read (else the last sentence), so trailing instructions do not count."""
    asked = asked_sentence(text)
    if _NUMBER_CUES.search(asked):
        return "number", "number_cue"
    ordered = imperative_kind(asked)
    if ordered is not None:
        return ordered.kind, f"imperative:{ordered.verb}"
    if YES_NO_START.match(asked):
        return "yes_no", "auxiliary_verb"
    return "text", "default"


def _read(text: str, given: tuple[str, ...], *, take_instruction: bool) -> ParsedQuestion:
    body = QUESTION_LABEL.sub("", text.strip(), count=1) if take_instruction else text.strip()
    instruction = None
    if take_instruction:
        body, instruction = trailing_instruction(body)
    # With the request's own choices, only options that end the text can be the same options written
    # out; lettered lines followed by more text (statements, a dialogue) are part of the question.
    body, listed = split_choices(body, trailing=bool(given))
    if take_instruction and instruction is None:
        body, instruction = trailing_instruction(body)
    if take_instruction and instruction is not None and not listed:
        body = without_label(body)  # an empty "Options:" before the instruction (lmms-eval's mmmu, qwen3_vl)
    if given and listed and _folded(given) != _folded(listed):
        raise QuestionFormatError(
            f"the options written in the question ({_letters(listed)}) differ from the request's choices "
            f"({_letters(given)}); send them once, in the text or as choices",
            code="conflicting_choices",
        )
    return ParsedQuestion(body.strip(), given or listed, instruction, listed)


def _applies(instruction: Instruction, choices: tuple[str, ...]) -> bool:
    """A letter needs options; yes or no needs a question without them."""
    if instruction.reply is ReplyForm.LETTER:
        return bool(choices)
    if instruction.reply is ReplyForm.YES_NO:
        return not choices
    return True


def _folded(choices: Sequence[str]) -> tuple[str, ...]:
    """Options as compared: any case, any spacing, no final full stop."""
    return tuple(" ".join(choice.split()).casefold().rstrip(".") for choice in choices)


def _letters(choices: Sequence[str]) -> str:
    return ", ".join(f"{chr(ord('A') + i)}. {choice}" for i, choice in enumerate(choices))


# ---------------------------------------------------------------------------------------------
# Options written in the text
# ---------------------------------------------------------------------------------------------

# Matched against a line without trailing whitespace: no backtracking over long runs of spaces.
_CHOICE_LINE = re.compile(r"^\s*\(?([A-Z])[.):]\s+(\S.*)$")
# An inline mark stands alone: "(A) cat", never "P(A)" or "(A),".
_INLINE_LETTER = re.compile(r"(?:^|(?<=\s))\(([A-Z])\)\s+")
# What may stand before inline options: nothing, the end of the question, or a label.
_BEFORE_INLINE = re.compile(r"(?:^|[?:])\s*$")
# The label harnesses put before the options: lmms-eval mmbench's sys_prompt ("There are several
# options:"), mmmu's qwen3_vl format ("Options:"), and the usual "Choices:".
_OPTIONS_LABEL = re.compile(
    r"(?:^|(?<=[.?!])\s+)(?:there\s+are\s+several\s+options|options|choices)\s*:\s*\Z",
    re.IGNORECASE | re.MULTILINE,
)


def _lettered(letters: list[str]) -> bool:
    """Two or more letters running A, B, C, ... without gaps."""
    return len(letters) >= 2 and letters == [chr(ord("A") + i) for i in range(len(letters))]


def split_choices(question: str, *, trailing: bool = False) -> tuple[str, tuple[str, ...]]:
    """Split a question that lists lettered options into the question text and the options.

    One option a line ("A. cat", "B. dog", ...): the options must run A, B, C, ... without gaps and be
    the last lettered lines; lines after them (an instruction such as "Answer with the option's
    letter", as lmms-eval's MMBench and RealWorldQA prompts add) stay in the question text, unless
    ``trailing``: then options must end the text, and lettered lines followed by more text are part of
    the question (statements, a dialogue). Else the last line may list them inline, "(A) cat (B) dog",
    after the question or a label. A label ending the text before the options ("Options:", "There are
    several options:") goes with them. Otherwise the question is returned whole with no options."""
    lines = [line.rstrip() for line in question.rstrip().splitlines()]
    found = [_CHOICE_LINE.match(line) for line in lines]
    end = len(lines)
    while end and not found[end - 1]:
        end -= 1
    start = end
    while start and found[start - 1]:
        start -= 1
    matches = [match for match in found[start:end] if match]
    if _lettered([match.group(1) for match in matches]):
        if trailing and any(line.strip() for line in lines[end:]):
            return question.strip(), ()
        text = "\n".join(
            line for line in [without_label("\n".join(lines[:start])), *lines[end:]] if line.strip()
        )
        return text.strip(), tuple(match.group(2) for match in matches)
    return _inline_choices(question)


def _inline_choices(question: str) -> tuple[str, tuple[str, ...]]:
    lines = question.rstrip().splitlines()
    last = lines[-1] if lines else ""
    marks = list(_INLINE_LETTER.finditer(last))
    if not marks or not _lettered([mark.group(1) for mark in marks]):
        return question.strip(), ()
    choices = tuple(
        last[mark.end() : following.start() if following else len(last)].strip()
        for mark, following in zip(marks, [*marks[1:], None], strict=True)
    )
    if any(not option for option in choices) or not _BEFORE_INLINE.search(
        without_label(last[: marks[0].start()])
    ):
        return question.strip(), ()
    return without_label("\n".join([*lines[:-1], last[: marks[0].start()]])), choices


def without_label(text: str) -> str:
    """``text`` without an options label ("Options:") ending it."""
    return _OPTIONS_LABEL.sub("", text.rstrip()).strip()


# ---------------------------------------------------------------------------------------------
# Either/or questions
# ---------------------------------------------------------------------------------------------

# An auxiliary verb opens a yes/no question, contracted negatives too ("Isn't it red?", "Can't you
# see a circle?", "Won't ...").
YES_NO_START = re.compile(
    r"^(?:(?:is|are|was|were|does|do|did|could|would|should|has|have|had|must|might|need)(?:n['’]t)?"
    r"|can(?:['’]t|not)?|won['’]t|will|am|may|ain['’]t)(?![\w'’])",
    re.IGNORECASE,
)
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n+")
_OR = re.compile(r"(?<!\s)\s+or\s+", re.IGNORECASE)  # from a run's first space only: linear
_PREPOSITIONS = frozenset(
    "in on at of for from with within inside outside near by under over above below behind to "
    "into onto than compared".split()
)
_NEGATION = frozenset({"not", "no", "neither", "none"})
_MAX_OPTION_WORDS = 4


# A word that joins a follow-up to what came before ("And is it red?", "So, which shape is it?"): the
# sentence is read after it ("OK then, ..." after both). At most two words, anchored: linear.
_LINKING_WORD = re.compile(
    r"^(?:(?:and|so|but|then|also|now|well|okay|ok)(?:,\s*|\s+)){1,2}(?=\w)", re.IGNORECASE
)


def asked_sentence(text: str) -> str:
    """The sentence a question asks: the last ending in "?" (trailing instructions do not count),
    without a linking word opening it ("And is it red?" asks "is it red?")."""
    sentences = [part.strip() for part in _SENTENCE_BREAK.split(text.strip()) if part.strip()]
    questions = [sentence for sentence in sentences if sentence.endswith("?")]
    return _LINKING_WORD.sub("", (questions or sentences or [""])[-1], count=1)


def either_or_choices(question: str) -> tuple[str, ...]:
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
    choices = [without_article(option.strip(" ,")) for option in named]
    if any(not option for option in choices) or len({o.casefold() for o in choices}) < len(choices):
        return ()
    return tuple(choices)


def _option_after(words: list[str]) -> list[str]:
    for index, word in enumerate(words[1:], start=1):
        if word.casefold() in _PREPOSITIONS:
            return words[:index]
    return words


def _leads_with_article(words: list[str]) -> bool:
    return bool(words) and words[0].casefold() in ARTICLES


def choices_note(question: str, choices: tuple[str, ...]) -> str | None:
    """What the trace says when a request's own ``choices`` differ from the options its either/or
    question names: the request's choices win. None when they do not differ (or it names none)."""
    named = either_or_choices(question)
    if not named or not choices or _folded_without_articles(named) == _folded_without_articles(choices):
        return None
    return (
        f"the question names the options {', '.join(named)}; the request's choices "
        f"({', '.join(choices)}) were used"
    )


def _folded_without_articles(choices: tuple[str, ...]) -> list[str]:
    """Options as an either/or question's and a request's are compared: in any order, any case, any
    spacing, without their articles."""
    return sorted(without_article(" ".join(option.casefold().split())) for option in choices)
