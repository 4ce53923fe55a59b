"""The paper's prompt templates (Appendix C) and the chat messages built from them.

Two families: ``short`` ("...answer the question using a single word or phrase...", POPE-style and
open answers) and ``choice`` ("...answer with the option's letter from the given choices...").
Every message is laid out image -> question (with lettered options) -> instruction, so all stages
of one request share the image+question prefix and hit the engine's prefix cache.

The question and the instruction go in one text part, joined as the model's ``PromptLayout`` says:
chat templates (Qwen-VL's among them) render a message's text parts back to back, so the separation
the paper uses (Appendix C, after lmms-eval: the instruction on a line of its own) has to be in the
text itself, whatever the model's family.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal


@dataclass(frozen=True)
class Turn:
    """An earlier turn of a conversation, as the client sent it: every stage's prompt carries it before
    the question, in the model family's chat layout (``build_messages``). A user turn may carry
    images (where they first appeared); an assistant turn is text."""

    role: Literal["user", "assistant"]
    text: str
    images: tuple[str, ...] = ()


class PromptKind(StrEnum):
    SIMPLE = "simple"
    EXPLAIN = "explain"
    REASONING = "reasoning"
    STAGE2 = "stage2"
    TRANSFER = "transfer"


class TransferForm(StrEnum):
    """The two reasoning-transfer prompts of Appendix C."""

    ACCORDING = "according"  # "According to previous thinking: ..." (POPE, ChartQA)
    REFERENCE = "reference"  # "The following is a reference answer from a smaller model ..."


class PromptLayout(StrEnum):
    """How the question and the instruction meet in the text the model reads."""

    SEPARATE_LINE = "separate_line"  # the paper's: the instruction on a line of its own
    JOINED = "joined"  # back to back, with nothing between (how two text parts render in Qwen's template)


LAYOUT_SEPARATORS: dict[PromptLayout, str] = {PromptLayout.SEPARATE_LINE: "\n", PromptLayout.JOINED: ""}

SHORT, CHOICE = "short", "choice"

# Appendix C, verbatim. "{reasoning}" is the stage-1 response of the reasoning model.
TEMPLATES: dict[tuple[PromptKind, str], str] = {
    (PromptKind.SIMPLE, SHORT): (
        "Without thinking, directly answer the question using a single word or phrase in the "
        "format: [[answer]]"
    ),
    (PromptKind.SIMPLE, CHOICE): (
        "Without thinking, directly answer with the option's letter from the given choices in "
        "the format: [[answer]]."
    ),
    (PromptKind.EXPLAIN, SHORT): (
        "Provide a simple explanation, then answer the question using a single word or phrase "
        "in the format: [[answer]]"
    ),
    (PromptKind.EXPLAIN, CHOICE): (
        "Provide a simple explanation, then answer with the option's letter from the given "
        "choices directly in the format: [[answer]]"
    ),
    (PromptKind.REASONING, SHORT): (
        "Please think step by step, provide a detailed explanation, then answer the question "
        "using a single word or phrase in the format: [[answer]]"
    ),
    (PromptKind.REASONING, CHOICE): (
        "Please think step by step, provide a detailed explanation, then answer with the "
        "option's letter from the given choices directly in the format: [[answer]]"
    ),
    (PromptKind.STAGE2, SHORT): (
        "According to previous thinking: {reasoning}\n Answer the question using a single word or phrase."
    ),
    (PromptKind.STAGE2, CHOICE): (
        "According to previous thinking: {reasoning}\n Answer with the option's letter from the "
        "given choices directly."
    ),
}

TRANSFER_TEMPLATES: dict[tuple[TransferForm, str], str] = {
    # The "according" form is the Stage 2 prompt given to the large model.
    (TransferForm.ACCORDING, SHORT): TEMPLATES[(PromptKind.STAGE2, SHORT)],
    (TransferForm.ACCORDING, CHOICE): TEMPLATES[(PromptKind.STAGE2, CHOICE)],
    # Short-answer wording as in Appendix B.6, Example 3; choice wording as in Appendix C.
    (TransferForm.REFERENCE, SHORT): (
        "The following is a reference answer from a smaller model (it might be wrong or "
        "incomplete): {reasoning}\n\n\n\n Please answer the question yourself, using the "
        "reference only if it seems reasonable.\n Answer the question using a single word or "
        "phrase."
    ),
    (TransferForm.REFERENCE, CHOICE): (
        "The following is a reference answer from a smaller model (it might be wrong or "
        "incomplete): {reasoning}\n\n\n\n Please answer the question yourself, using the "
        "reference only if it seems reasonable.\n Answer with the option's letter from the "
        "given choices directly in the format: [[answer]]."
    ),
}


def family_of(kind: str) -> str:
    """The prompt family of an answer kind: option letters for ``choice``, short answers else."""
    return CHOICE if kind == "choice" else SHORT


def default_transfer_form(kind: str) -> TransferForm:
    """The paper's choice: "according" for POPE (yes/no) and ChartQA (numbers), "reference" for
    MMBench/MMMU (choice) and InfoVQA/RealWorldQA (open text)."""
    return TransferForm.ACCORDING if kind in ("yes_no", "number") else TransferForm.REFERENCE


def question_text(question: str, choices: Sequence[str] = ()) -> str:
    """The question followed by its options, one per line, lettered "A. ...", "B. ...", ..."""
    lines = [question.strip()]
    lines += [f"{chr(ord('A') + i)}. {choice}" for i, choice in enumerate(choices)]
    return "\n".join(lines)


def instruction(
    prompt_kind: PromptKind,
    kind: str,
    *,
    reasoning: str | None = None,
    transfer_form: TransferForm | None = None,
) -> str:
    """The instruction text for one stage. Stage 2 and transfer need the ``reasoning``."""
    family = family_of(kind)
    if prompt_kind in (PromptKind.STAGE2, PromptKind.TRANSFER):
        if reasoning is None:
            raise ValueError(f"the {prompt_kind} prompt needs the reasoning text")
        if prompt_kind is PromptKind.STAGE2:
            template = TEMPLATES[(prompt_kind, family)]
        else:
            template = TRANSFER_TEMPLATES[(transfer_form or default_transfer_form(kind), family)]
        return template.replace("{reasoning}", reasoning)
    return TEMPLATES[(prompt_kind, family)]


def build_messages(
    images: Sequence[str],
    question: str,
    choices: Sequence[str],
    kind: str,
    prompt_kind: PromptKind,
    *,
    reasoning: str | None = None,
    transfer_form: TransferForm | None = None,
    system: Sequence[str] = (),
    layout: PromptLayout = PromptLayout.SEPARATE_LINE,
    context: Sequence[Turn] = (),
) -> list[dict]:
    """The OpenAI chat messages of one stage: the client's ``system`` messages, the conversation before
    the question (``context``: each turn as sent, a user turn's images before its text), then the
    question's message: its ``images``, then one text part of the question (+ options) and the
    instruction joined as ``layout`` says. Everything before that last text part is the same in every
    stage of a request, and in the next turn of its conversation up to the question's own text."""
    if isinstance(images, str):
        raise TypeError("images is a sequence of image URLs, not one URL")
    text = LAYOUT_SEPARATORS[layout].join(
        (
            question_text(question, choices),
            instruction(prompt_kind, kind, reasoning=reasoning, transfer_form=transfer_form),
        )
    )
    return [
        *({"role": "system", "content": text} for text in system),
        *(_message(turn.role, turn.images, turn.text) for turn in context),
        _message("user", images, text),
    ]


def _message(role: str, images: Sequence[str], text: str) -> dict:
    """One chat message in the multimodal layout Qwen-VL's and Gemma 3's templates read: images, then text."""
    if role == "assistant":
        return {"role": role, "content": text}
    content: list[dict] = [{"type": "image_url", "image_url": {"url": url}} for url in images]
    if text or not content:
        content.append({"type": "text", "text": text})
    return {"role": role, "content": content}
