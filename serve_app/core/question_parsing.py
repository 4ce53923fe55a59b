"""A client's question read as the paper reads it: the bare question, its options, its answer kind,
and the client's answer-format instruction set aside for the reply.

The paper puts its own templates (Appendix C) around the bare question; clients and harnesses send
the question with their own instruction and, for multiple choice, the options written into the text.
``parse_question`` takes those apart:

1. a "Question:" label before the question is dropped;
2. a known format instruction ending the text (``format_instructions.FORMS``) is set aside;
3. options written into the text (``listed_choices``) become the choices, with the label before them
   ("Options:"), and an instruction between the question and the options is set aside as in 2;
4. what is left is the question. An instruction that cannot apply (a letter with no options, yes or
   no to a question with options) is not taken: the text stays as sent.

Pure functions, no I/O. ``QuestionFormatError`` names what a client must fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .answers import infer_kind
from .contracts import Question
from .either_or import either_or_options
from .format_instructions import QUESTION_LABEL, Instruction, Reply, trailing_instruction
from .listed_choices import split_choices, without_label


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
    text: str, choices: Sequence[str] | None = None, kind: str | None = None, image_url: str | None = None
) -> Question:
    """The cascade's question for a client's ``text`` (``parse_question``), with its image, its
    answer kind (``kind`` when the request gives one, else ``answer_kind``) and its options."""
    parsed = parse_question(text, choices)
    kind, options, named = answer_kind(parsed.text, parsed.choices, kind, parsed.instruction)
    return Question(
        question=parsed.text,
        image_url=image_url,
        choices=options,
        kind=kind,
        instruction=parsed.instruction,
        choices_from_text=parsed.choices_from_text,
        options_named=named,
    )


def answer_kind(
    text: str, choices: tuple[str, ...], kind: str | None, instruction: Instruction | None
) -> tuple[str, tuple[str, ...], bool]:
    """The one place a question's answer kind is decided: ``(kind, choices, options_named)``. The
    request's own ``kind`` wins; with options (the request's or those written in the text), a choice;
    a client's yes-or-no instruction, yes/no; an either/or question ("Is it red or blue?") is a choice
    between the options it names (``options_named``); else what the question asks (``infer_kind``:
    a number, yes/no, or open text)."""
    if kind is not None:
        return kind, choices, False
    if choices:
        return "choice", choices, False
    if instruction is not None and instruction.reply is Reply.YES_NO:
        return "yes_no", (), False
    named = either_or_options(text)
    if named:
        return "choice", named, True
    return infer_kind(text), (), False


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
    if instruction.reply is Reply.LETTER:
        return bool(choices)
    if instruction.reply is Reply.YES_NO:
        return not choices
    return True


def _folded(choices: Sequence[str]) -> tuple[str, ...]:
    """Options as compared: any case, any spacing, no final full stop."""
    return tuple(" ".join(choice.split()).casefold().rstrip(".") for choice in choices)


def _letters(choices: Sequence[str]) -> str:
    return ", ".join(f"{chr(ord('A') + i)}. {choice}" for i, choice in enumerate(choices))
