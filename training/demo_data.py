"""Training examples for the demo models: easy-vqa questions in the paper's prompt families.

Pure functions only (no torch, no files): what each image shows, a short grounded rationale for a
question about it, and the chat messages + target text of one training example. The messages are
built by ``serve_app.prompts``, so the models learn exactly the prompts the server sends.

- Simple: ``[[answer]]``.
- Reasoning: several short steps built from what the image shows (its colour and shape, read off
  easy-vqa's own answers for the same image) and what the question asks, then ``[[answer]]``.
- Stage 2 (the model's own reasoning in context): the answer that reasoning reached.
- Reasoning transfer (a smaller model's reasoning in context, sometimes wrong): the true answer, so
  the large model learns to use the reference where it is right and its own eyes where it is not.

Yes/no questions are drawn balanced (``balanced_yes_no``): for each question form and the colour or
shape it names, as many yes as no, so the question text alone cannot answer them. Every question is
written the way clients type it (``question_variant``: any case, with or without its "?", stray
spaces), so the checkpoints answer them all alike.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

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


_CORNERS = {"circle": "no corners", "rectangle": "four corners", "triangle": "three corners"}


def rationale(facts: ImageFacts, question: str) -> str:
    """Grounded steps: what the image shows (the shape, its colour, its corners), what the question
    asks, and the fact the answer turns on."""
    steps = [
        "I look at the image.",
        "I see one shape.",
        f"Its color is {facts.colour}.",
        f"It has {_CORNERS[facts.shape]}, so it is a {facts.shape}.",
    ]
    asked_colour, asked_shape = _mentioned(question, COLOURS), _mentioned(question, SHAPES)
    if infer_kind(question) == "yes_no":
        thing = " ".join(word for word in (asked_colour, asked_shape or "shape") if word)
        negated = " not" if is_negated(question) else ""
        seen = _shows(facts, asked_colour, asked_shape)
        steps.append(f"The question asks if there is{negated} a {thing}.")
        if (asked_colour is None) != (asked_shape is None):
            # The value asked and the value seen side by side, then whether they match: the
            # comparison a small model must make, one step long.
            asked, shown = (asked_colour, facts.colour) if asked_colour else (asked_shape, facts.shape)
            steps.append(comparison_step(asked, shown, thing))
        else:
            steps.append(f"There is {'a' if seen else 'no'} {thing}.")
        if negated:
            steps.append(f"The question says not, so {'no' if seen else 'yes'} is right.")
    elif asks_colour(question):
        steps.append("The question asks for the color.")
    else:
        steps.append("The question asks for the shape.")
    return " ".join(steps)


def comparison_step(asked: str, shown: str, thing: str) -> str:
    """The value a yes/no question asks about beside the value the image shows, then whether they
    match and what that means for ``thing`` ("red shape", "circle")."""
    match = asked == shown
    return (
        f"It asks about {asked}; the image shows {shown}. "
        f"{'They match' if match else 'They differ'}, so there is {'a' if match else 'no'} {thing}."
    )


def comparison_drill(rng: random.Random) -> tuple[str, str]:
    """One ``comparison_step`` sentence for the comparison drill, as (the text up to the verdict, the
    whole sentence): colour or shape half and half, the value shown matching the value asked half the
    time."""
    values = COLOURS if rng.random() < 0.5 else SHAPES
    asked = rng.choice(values)
    shown = asked if rng.random() < 0.5 else rng.choice([v for v in values if v != asked])
    sentence = comparison_step(asked, shown, f"{asked} shape" if values is COLOURS else asked)
    return sentence[: sentence.index(" They ") + len(" They")], sentence


def reasoning_text(facts: ImageFacts, question: str) -> str:
    """What the Reasoning prompt should produce: the steps, then the answer they reach."""
    answer = answer_from_facts(facts, question)
    return f"{rationale(facts, question)} So the answer is {answer}. [[{answer}]]"


# easy-vqa's yes/no question forms; {} is "a <colour> shape" or "a <shape>".
YES_NO_FORMS = (
    "is there {}?",
    "is there {} in the image?",
    "does the image contain {}?",
    "is {} present?",
    "is there not {}?",
    "is there not {} in the image?",
    "does the image not contain {}?",
    "is no {} present?",
)


def yes_no_question(form: str, colour: str | None, shape: str | None) -> str:
    thing = f"{colour} shape" if colour else shape
    article = "" if form.startswith("is no") else "a "
    return form.format(article + thing)


class BalancedYesNo:
    """Yes/no questions about ``image_ids``, drawn so that for each question form and the colour or
    shape it names as many answers are yes as no: a form, then an attribute (colour or shape, half
    and half) and its value, then the answer, then an image that gives that answer. A value no image
    (or every image) shows is drawn again."""

    def __init__(self, facts: dict[int, ImageFacts], image_ids: Iterable[int]):
        images = [image for image in sorted(set(image_ids)) if image in facts]
        self.showing: dict[str, list[int]] = {}
        self.lacking: dict[str, list[int]] = {}
        for value in COLOURS + SHAPES:
            shows = [i for i in images if value in (facts[i].colour, facts[i].shape)]
            self.showing[value], self.lacking[value] = shows, [i for i in images if i not in set(shows)]
        self.values = [v for v in COLOURS + SHAPES if self.showing[v] and self.lacking[v]]
        if not self.values:
            raise ValueError("no colour or shape is shown by some images and not by others")

    def draw(self, rng: random.Random) -> QA:
        form = rng.choice(YES_NO_FORMS)
        colours = [v for v in self.values if v in COLOURS]
        shapes = [v for v in self.values if v in SHAPES]
        use_colour = bool(colours) and (not shapes or rng.random() < 0.5)
        value = rng.choice(colours if use_colour else shapes)
        answer = rng.choice(("yes", "no"))
        question = yes_no_question(form, value if use_colour else None, None if use_colour else value)
        present = (answer == "yes") != is_negated(question)
        return QA(rng.choice(self.showing[value] if present else self.lacking[value]), question, answer)


def balanced_yes_no(facts: dict[int, ImageFacts], image_ids: Sequence[int], rng: random.Random) -> QA:
    """One ``BalancedYesNo`` question (for a single draw; build the class once for many)."""
    return BalancedYesNo(facts, image_ids).draw(rng)


def question_variant(question: str, rng: random.Random) -> str:
    """``question`` as a client might type it: lower case (easy-vqa's own), capitalised, upper or
    title case; sometimes without its "?", sometimes with stray spaces."""
    case = rng.random()
    if case < 0.35:
        text = question.lower()
    elif case < 0.7:
        text = display_question(question)
    elif case < 0.85:
        text = question.upper()
    else:
        text = question.title()
    if rng.random() < 0.3:
        text = text.rstrip("?").rstrip()
    if rng.random() < 0.3:
        words = text.split(" ")
        at = rng.randrange(len(words))
        words[at] = words[at] + " " * rng.randint(1, 2)
        text = " ".join(words)
    if rng.random() < 0.15:
        text = text.replace("?", " ?")
    return text


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


VALIDATION_IMAGES = 400  # train images the demo models never see: for recipe choices and calibration
VALIDATION_SEED = 0
# The validation images' ids, committed: the split cannot drift with the code that draws it.
VALIDATION_IDS_FILE = Path(__file__).with_name("easy_vqa_validation_images.json")


def draw_validation_images(image_ids: Iterable[int], count: int = VALIDATION_IMAGES) -> list[int]:
    """A seeded draw of ``count`` of easy-vqa's train images (what VALIDATION_IDS_FILE holds)."""
    ordered = sorted(set(image_ids))
    if len(ordered) <= count:
        raise ValueError(f"{len(ordered)} images leave none for training after {count} held out")
    return sorted(random.Random(VALIDATION_SEED).sample(ordered, count))


def held_out_images(image_ids: Iterable[int] | None = None) -> set[int]:
    """The train images the demo models never see: the committed validation ids (checked against
    ``image_ids`` when given)."""
    held_out = set(json.loads(VALIDATION_IDS_FILE.read_text())["image_ids"])
    if image_ids is not None and not held_out <= set(image_ids):
        raise ValueError(f"{VALIDATION_IDS_FILE.name} names images that are not among the train images")
    return held_out


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
    *,
    variant: bool = False,
) -> Example:
    """One training example of ``prompt_kind`` for ``qa`` (whose image shows ``facts``); the question in
    its display form, or with ``variant`` as a client might type it (``question_variant``)."""
    question = question_variant(qa.question, rng) if variant else display_question(qa.question)
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
        seen = perturbed(facts, rng, shape_error=mix.shape_error, colour_error=mix.colour_error)
        return transfer_example(image_url, question, qa.answer, reasoning_text(seen, qa.question), rng)
    messages = build_messages(
        image_url, question, (), kind, prompt_kind, reasoning=reasoning, transfer_form=transfer_form
    )
    return Example(messages, target)


def transfer_example(
    image_url: str | None, question: str, answer: str, reference: str, rng: random.Random
) -> Example:
    """A Reasoning transfer example: a smaller model's reasoning (``reference``, right or wrong) in
    either transfer form; the target is the true ``answer``, whatever the reference says."""
    messages = build_messages(
        image_url,
        question,
        (),
        infer_kind(question),
        PromptKind.TRANSFER,
        reasoning=reference,
        transfer_form=rng.choice((TransferForm.ACCORDING, TransferForm.REFERENCE)),
    )
    return Example(messages, f"[[{answer}]]")


def misreading(facts: ImageFacts, question: str, rng: random.Random) -> ImageFacts:
    """``facts`` with the colour, the shape or both changed so that they answer ``question`` wrongly
    (a reference reasoning to check that the large model does not follow a wrong one)."""
    readings = [
        ImageFacts(colour, shape)
        for colour in COLOURS
        for shape in SHAPES
        if answer_from_facts(ImageFacts(colour, shape), question) != answer_from_facts(facts, question)
    ]
    if not readings:
        raise ValueError(f"no reading of the image answers {question!r} differently")
    return rng.choice(readings)


def tokenizer_corpus(qas: Sequence[QA], facts: dict[int, ImageFacts]) -> list[str]:
    """Text the demo tokenizer learns its merges from: every prompt template, the questions in the
    forms clients type them, and the reasoning, so that prompts and answers are a few tokens each."""
    lines = list(TEMPLATES.values()) + list(TRANSFER_TEMPLATES.values())
    rng = random.Random(0)
    for qa in qas[:5000]:
        lines.append(display_question(qa.question))
        lines.append(qa.question)
        lines.append(question_variant(qa.question, rng))
        if qa.image_id in facts:
            lines.append(reasoning_text(facts[qa.image_id], qa.question))
    return lines * 2
