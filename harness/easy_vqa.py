"""easy-vqa's world, shared by the demo models' training and the evaluation: what each image shows (read
off the dataset's own answers), its three kinds of question, balanced yes/no questions, questions as
clients type them, and the held-out validation images (train images the demo models never see).

Pure functions, plus ``load_questions`` (the train split, from the ``easy-vqa`` package).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from serve_app.core.question_parsing import infer_kind

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


def mentioned(question: str, vocabulary: Sequence[str]) -> str | None:
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
        said_colour, said_shape = mentioned(qa.question, COLOURS), mentioned(qa.question, SHAPES)
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
    asked_colour, asked_shape = mentioned(question, COLOURS), mentioned(question, SHAPES)
    if infer_kind(question) == "yes_no":
        if asked_colour is None and asked_shape is None:
            return None
        return "yes" if shows(facts, asked_colour, asked_shape) != is_negated(question) else "no"
    if asks_colour(question):
        return facts.colour
    if "shape" in question.lower():
        return facts.shape
    return None


def shows(facts: ImageFacts, colour: str | None, shape: str | None) -> bool:
    """Whether the image has the asked colour and shape (an attribute not asked about matches)."""
    return colour in (None, facts.colour) and shape in (None, facts.shape)


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


def load_questions() -> tuple[list[QA], list[str]]:
    """easy-vqa's train questions and its train images' paths."""
    import easy_vqa

    questions, answers, image_ids = easy_vqa.get_train_questions()
    return [
        QA(i, q, a) for q, a, i in zip(questions, answers, image_ids, strict=True)
    ], easy_vqa.get_train_image_paths()


def validation_facts() -> tuple[dict[int, ImageFacts], list[str]]:
    """What each validation image (``held_out_images``) shows, where its answers pin it down, and the
    train images' paths (indexed by image id)."""
    qas, paths = load_questions()
    held_out = held_out_images()
    return {image: fact for image, fact in facts_by_image(qas).items() if image in held_out}, paths
