"""Training examples for the demo models: easy-vqa questions in the paper's prompt families.

Pure functions only (no torch, no files): what each image shows, a short grounded rationale for a
question about it, and the chat messages + target text of one training example. The messages are
built by ``serve_app.prompts``, so the models learn exactly the prompts the server sends.

- Simple: ``[[answer]]``.
- Reasoning: a rationale built from what the image shows (its colour and shape, read off
  easy-vqa's own answers for the same image), then ``[[answer]]``.
- Stage 2 (the model's own reasoning in context): the answer that reasoning reached.
- Reasoning transfer (a smaller model's reasoning in context, sometimes wrong): the true answer, so
  the large model learns to use the reference where it is right and its own eyes where it is not.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from serve_app.answers import infer_kind
from serve_app.prompts import TEMPLATES, TRANSFER_TEMPLATES, PromptKind, TransferForm, build_messages

COLOURS = ("red", "green", "blue", "yellow", "black", "gray", "teal", "brown")
SHAPES = ("circle", "rectangle", "triangle")
_NEGATED = re.compile(r"\bnot\b|^is no\b")
_COLOUR_WORD = re.compile(r"\bcolou?r\b")


@dataclass(frozen=True)
class ImageFacts:
    """What one easy-vqa image shows: one shape of one colour."""

    colour: str
    shape: str


@dataclass(frozen=True)
class QA:
    image_id: int
    question: str
    answer: str


@dataclass(frozen=True)
class Example:
    messages: list[dict]
    target: str


def _mentioned(question: str, vocabulary: Sequence[str]) -> str | None:
    words = set(re.findall(r"[a-z]+", question.lower()))
    return next((word for word in vocabulary if word in words), None)


def asks_colour(question: str) -> bool:
    return bool(_COLOUR_WORD.search(question.lower()))


def question_type(question: str, answer: str) -> str:
    """easy-vqa's three kinds of question, by the answer they want: yes/no, color or shape."""
    if answer in ("yes", "no"):
        return "yes/no"
    return "color" if asks_colour(question) else "shape"


def is_negated(question: str) -> bool:
    """ "is there not a red shape?", "does the image not contain ...", "is no circle present?"."""
    return bool(_NEGATED.search(question.lower()))


def facts_from_answers(qas: Iterable[QA]) -> ImageFacts | None:
    """The colour and shape of one image, read off its questions and answers; None when the answers
    do not pin both down."""
    colour = shape = None
    for qa in qas:
        said_colour, said_shape = _mentioned(qa.question, COLOURS), _mentioned(qa.question, SHAPES)
        if qa.answer in COLOURS:
            colour, shape = qa.answer, shape or said_shape
        elif qa.answer in SHAPES:
            shape, colour = qa.answer, colour or said_colour
        elif qa.answer in ("yes", "no") and (qa.answer == "yes") != is_negated(qa.question):
            colour, shape = colour or said_colour, shape or said_shape
    return ImageFacts(colour, shape) if colour and shape else None


def facts_by_image(qas: Iterable[QA]) -> dict[int, ImageFacts]:
    """What each image shows, for the images whose answers pin it down."""
    groups: dict[int, list[QA]] = {}
    for qa in qas:
        groups.setdefault(qa.image_id, []).append(qa)
    return {image: facts for image, group in groups.items() if (facts := facts_from_answers(group))}


def answer_from_facts(facts: ImageFacts, question: str) -> str | None:
    """The answer ``facts`` imply for an easy-vqa question (None if the question is not one of its
    kinds). Used to keep a wrong rationale consistent with the answer it reaches."""
    asked_colour, asked_shape = _mentioned(question, COLOURS), _mentioned(question, SHAPES)
    if infer_kind(question) == "yes_no":
        if asked_colour is None and asked_shape is None:
            return None
        return "yes" if _shows(facts, asked_colour, asked_shape) != is_negated(question) else "no"
    if asks_colour(question):
        return facts.colour
    if "shape" in question.lower():
        return facts.shape
    return None


def _shows(facts: ImageFacts, colour: str | None, shape: str | None) -> bool:
    """Whether the image has the asked colour and shape (an attribute not asked about matches)."""
    return colour in (None, facts.colour) and shape in (None, facts.shape)


def rationale(facts: ImageFacts, question: str) -> str:
    """A short grounded explanation: what the image shows, then the fact the question turns on."""
    seen = f"The image shows a {facts.colour} {facts.shape}."
    asked_colour, asked_shape = _mentioned(question, COLOURS), _mentioned(question, SHAPES)
    if infer_kind(question) == "yes_no":
        thing = " ".join(word for word in (asked_colour, asked_shape or "shape") if word)
        return f"{seen} There is {'a' if _shows(facts, asked_colour, asked_shape) else 'no'} {thing}."
    if asks_colour(question):
        return f"{seen} Its color is {facts.colour}."
    return f"{seen} Its shape is a {facts.shape}."


def reasoning_text(facts: ImageFacts, question: str) -> str:
    """What the Reasoning prompt should produce: the rationale, then the answer it reaches."""
    return f"{rationale(facts, question)} [[{answer_from_facts(facts, question)}]]"


def perturbed(
    facts: ImageFacts, rng: random.Random, *, shape_error: float, colour_error: float
) -> ImageFacts:
    """``facts`` as a weaker model might see them: the shape and the colour each wrong at a rate."""
    colour, shape = facts.colour, facts.shape
    if rng.random() < colour_error:
        colour = rng.choice([c for c in COLOURS if c != colour])
    if rng.random() < shape_error:
        shape = rng.choice([s for s in SHAPES if s != shape])
    return ImageFacts(colour, shape)


VALIDATION_IMAGES = 200  # the last easy-vqa train images: never trained on, for choices and calibration


def held_out_images(image_ids: Iterable[int], count: int = VALIDATION_IMAGES) -> set[int]:
    """The train images the demo models never see: the last ``count`` image ids."""
    ordered = sorted(set(image_ids))
    if len(ordered) <= count:
        raise ValueError(f"{len(ordered)} images leave none for training after {count} held out")
    return set(ordered[-count:])


def display_question(question: str) -> str:
    """easy-vqa questions as the evaluation sends them and the demo models learn them: first letter
    upper-case."""
    return question[:1].upper() + question[1:]


@dataclass(frozen=True)
class PromptMix:
    """How often each prompt family is drawn for one model's training examples."""

    simple: float
    reasoning: float
    stage2: float
    transfer: float
    # How wrong the reference reasoning in a transfer example is (a smaller model's mistakes).
    shape_error: float = 0.35
    colour_error: float = 0.1

    def draw(self, rng: random.Random) -> PromptKind:
        kinds = (PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.STAGE2, PromptKind.TRANSFER)
        return rng.choices(kinds, weights=(self.simple, self.reasoning, self.stage2, self.transfer))[0]


def make_example(
    image_url: str | None,
    qa: QA,
    facts: ImageFacts,
    prompt_kind: PromptKind,
    rng: random.Random,
    mix: PromptMix,
) -> Example:
    """One training example of ``prompt_kind`` for ``qa`` (whose image shows ``facts``)."""
    question = display_question(qa.question)
    kind = infer_kind(question)
    reasoning = None
    transfer_form = None
    if prompt_kind is PromptKind.SIMPLE:
        target = f"[[{qa.answer}]]"
    elif prompt_kind is PromptKind.REASONING:
        target = reasoning_text(facts, qa.question)
    elif prompt_kind is PromptKind.STAGE2:
        # The model's own reasoning, right or wrong: stage 2 reports the answer it reached.
        seen = perturbed(facts, rng, shape_error=mix.shape_error, colour_error=mix.colour_error)
        reasoning = reasoning_text(seen, qa.question)
        target = f"[[{answer_from_facts(seen, qa.question)}]]"
    else:
        # A smaller model's reasoning: the answer is the true one, whatever the reference says.
        seen = perturbed(facts, rng, shape_error=mix.shape_error, colour_error=mix.colour_error)
        reasoning = reasoning_text(seen, qa.question)
        transfer_form = rng.choice((TransferForm.ACCORDING, TransferForm.REFERENCE))
        target = f"[[{qa.answer}]]"
    messages = build_messages(
        image_url, question, (), kind, prompt_kind, reasoning=reasoning, transfer_form=transfer_form
    )
    return Example(messages, target)


def tokenizer_corpus(qas: Sequence[QA], facts: dict[int, ImageFacts]) -> list[str]:
    """Text the demo tokenizer learns its merges from: every prompt template, the questions and
    the rationales, so that prompts and answers are a few tokens each."""
    lines = list(TEMPLATES.values()) + list(TRANSFER_TEMPLATES.values())
    for qa in qas[:5000]:
        lines.append(display_question(qa.question))
        if qa.image_id in facts:
            lines.append(reasoning_text(facts[qa.image_id], qa.question))
    return lines * 2
