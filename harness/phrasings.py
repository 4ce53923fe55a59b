"""Questions about easy-vqa's world as people type them, beside easy-vqa's own phrasings: yes/no about
the shape's colour and kind, with and without negation ("Is the shape red?", "Is the shape not blue?",
"Isn't it a triangle?"), "what colour", "which shape", either/or between two colours or two shapes
("Is the shape red or brown?": the answer is the option's text) and "how many shapes" (always 1).

Each ``Template`` has a name, a form (``FORMS``) and whether it is held out. Held-out templates are
declared in ``TEMPLATES`` itself, a few of each form: new wordings of what the training templates
ask, never in the demo models' training data, so that an evaluation on them measures how far the
models generalise past the wordings they learnt. ``TRAINING`` and ``HELD_OUT`` are the two parts.

Answers come from the image's facts and the values a question names (``answer``); ``answer_of`` reads
a question's text the same way (what the demo training's rationales use), for every training template
and for easy-vqa's own questions. Negation: "not" turns the answer over ("Is the shape not blue?" is
yes for a red shape), as in easy-vqa's "is there not a red shape?"; a question opening with a
contracted negative asks for confirmation, as English does ("Isn't it a triangle?" is yes for a
triangle). Pure, no I/O.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from serve_app.core.answers import AnswerKind
from serve_app.core.question_parsing import either_or_choices, infer_kind

from .easy_vqa import COLOURS, QA, SHAPES, ImageFacts, answer_from_facts, is_negated, mentioned, shows

Form = Literal["yes_no", "colour", "shape", "either_or", "count"]
FORMS: tuple[Form, ...] = get_args(Form)
# The answer kind each form wants: what an answer's validity is judged by.
FORM_KINDS: dict[str, AnswerKind] = {
    "yes_no": "yes_no",
    "colour": "text",
    "shape": "text",
    "either_or": "choice",
    "count": "number",
}
VALUES: dict[str, tuple[str, ...]] = {"colour": COLOURS, "shape": SHAPES}
_CONTRACTED = re.compile(r"^(?:isn't|isn’t|aren't|aren’t|doesn't|doesn’t)\b", re.IGNORECASE)
_COUNTED = ("shapes", "objects", "things")


@dataclass(frozen=True)
class Template:
    """One phrasing. ``text`` is its display form with slots: ``{colour}`` and ``{shape}``, and for
    either/or ``{a}`` and ``{b}``, the two options. ``asks``: for yes/no the attributes whose values
    it names and asks about ("colour", "shape"), for either/or the attribute its options are values
    of; a slot outside ``asks`` is filled with what the image shows ("What colour is the {shape}?").
    ``negated``: "not" turns the yes/no answer over."""

    name: str
    form: Form
    text: str
    asks: tuple[str, ...] = ()
    negated: bool = False
    held_out: bool = False


def _yes_no(name: str, text: str, *asks: str, negated: bool = False, held_out: bool = False) -> Template:
    return Template(name, "yes_no", text, asks, negated, held_out)


TEMPLATES: tuple[Template, ...] = (
    _yes_no("yes-no-shape-is-colour", "Is the shape {colour}?", "colour"),
    _yes_no("yes-no-it-is-colour", "Is it {colour}?", "colour"),
    _yes_no("yes-no-colour-of-shape", "Is the colour of the shape {colour}?", "colour"),
    _yes_no("yes-no-shape-looks-colour", "Does the shape look {colour}?", "colour"),
    _yes_no("yes-no-shape-not-colour", "Is the shape not {colour}?", "colour", negated=True),
    _yes_no("yes-no-it-is-a-shape", "Is it a {shape}?", "shape"),
    _yes_no("yes-no-shape-is-a-shape", "Is the shape a {shape}?", "shape"),
    _yes_no("yes-no-this-is-a-shape", "Is this a {shape}?", "shape"),
    _yes_no("yes-no-it-not-a-shape", "Is it not a {shape}?", "shape", negated=True),
    _yes_no("yes-no-isnt-it-a-shape", "Isn't it a {shape}?", "shape"),
    _yes_no("yes-no-this-is-a-colour-shape", "Is this a {colour} {shape}?", "colour", "shape"),
    _yes_no("yes-no-shape-coloured", "Is the shape coloured {colour}?", "colour", held_out=True),
    _yes_no("yes-no-isnt-shape-colour", "Isn't the shape {colour}?", "colour", held_out=True),
    _yes_no("yes-no-shape-not-a-shape", "Is the shape not a {shape}?", "shape", negated=True, held_out=True),
    _yes_no("yes-no-see-a-colour-shape", "Do you see a {colour} {shape}?", "colour", "shape", held_out=True),
    Template("colour-what-colour", "colour", "What colour is the shape?"),
    Template("colour-what-color-is-it", "colour", "What color is it?"),
    Template("colour-which-colour", "colour", "Which colour is the shape?"),
    Template("colour-of-the-named-shape", "colour", "What colour is the {shape}?"),
    Template("colour-of-this-shape", "colour", "What is the colour of this shape?"),
    Template("colour-whats-the-color", "colour", "What's the color of the shape?", held_out=True),
    Template("colour-tell-me", "colour", "Tell me the colour of the {shape}.", held_out=True),
    Template("colour-which-in-image", "colour", "Which color is the shape in the image?", held_out=True),
    Template("shape-which-is-it", "shape", "Which shape is it?"),
    Template("shape-what-is-this", "shape", "What shape is this?"),
    Template("shape-what-kind", "shape", "What kind of shape is it?"),
    Template("shape-which-shown", "shape", "Which shape is shown?"),
    Template("shape-which-is-colour", "shape", "Which shape is {colour}?"),
    Template("shape-name-it", "shape", "Name the shape.", held_out=True),
    Template("shape-what-type", "shape", "What type of shape is shown?", held_out=True),
    Template("shape-whats-in-picture", "shape", "What's the shape in the picture?", held_out=True),
    Template("either-or-shape-colours", "either_or", "Is the shape {a} or {b}?", ("colour",)),
    Template("either-or-it-colours", "either_or", "Is it {a} or {b}?", ("colour",)),
    Template("either-or-colour-options", "either_or", "Is the colour {a} or {b}?", ("colour",)),
    Template("either-or-it-shapes", "either_or", "Is it a {a} or a {b}?", ("shape",)),
    Template("either-or-shape-shapes", "either_or", "Is the shape a {a} or a {b}?", ("shape",)),
    Template(
        "either-or-coloured", "either_or", "Is the shape coloured {a} or {b}?", ("colour",), held_out=True
    ),
    Template("either-or-this-shapes", "either_or", "Is this a {a} or a {b}?", ("shape",), held_out=True),
    Template(
        "either-or-in-image-shapes",
        "either_or",
        "Is the shape in the image a {a} or a {b}?",
        ("shape",),
        held_out=True,
    ),
    Template("count-how-many", "count", "How many shapes are there?"),
    Template("count-in-image", "count", "How many shapes are in the image?"),
    Template("count-do-you-see", "count", "How many shapes do you see?"),
    Template("count-number-of", "count", "What is the number of shapes in the image?"),
    Template("count-objects", "count", "How many objects are in the picture?", held_out=True),
    Template("count-imperative", "count", "Count the shapes.", held_out=True),
)
TRAINING: tuple[Template, ...] = tuple(t for t in TEMPLATES if not t.held_out)
HELD_OUT: tuple[Template, ...] = tuple(t for t in TEMPLATES if t.held_out)
BY_NAME: dict[str, Template] = {t.name: t for t in TEMPLATES}


@dataclass(frozen=True)
class PhrasedQA(QA):
    """A question of a template about one image, with its answer, and which template and form."""

    template: str
    form: str
    held_out: bool


def fill(template: Template, slots: dict[str, str]) -> str:
    """The template's question with its slots filled."""
    return template.text.format(**slots)


def answer(template: Template, facts: ImageFacts, slots: dict[str, str]) -> str:
    """What the image (``facts``) answers to the template's question with ``slots``: yes or no, the
    colour, the shape, the option the image shows, or "1". A question whose premise the image
    contradicts (an either/or whose options it shows neither of, "What colour is the circle?" about
    a triangle) is an error."""
    shown = {"colour": facts.colour, "shape": facts.shape}
    for slot, value in slots.items():
        if slot in shown and slot not in template.asks and value != shown[slot]:
            raise ValueError(f"{template.name}: the image shows a {shown[slot]}, not {value}")
    if template.form == "yes_no":
        present = all(slots[attribute] == shown[attribute] for attribute in template.asks)
        return "yes" if present != template.negated else "no"
    if template.form == "either_or":
        [attribute] = template.asks
        if shown[attribute] not in (slots["a"], slots["b"]):
            raise ValueError(f"{template.name}: the image shows {shown[attribute]}, neither option")
        return shown[attribute]
    if template.form == "count":
        return "1"
    return shown[template.form]


def draw_slots(template: Template, facts: ImageFacts, rng: random.Random) -> dict[str, str]:
    """Values for the template's slots, drawn so that the question text alone tells nothing: a yes/no
    question names what the image shows half the time and another value (uniform) otherwise; an
    either/or question the value shown and another, in a random order; other slots what is shown."""
    shown = {"colour": facts.colour, "shape": facts.shape}
    slots = {slot: shown[slot] for slot in ("colour", "shape") if "{" + slot + "}" in template.text}
    if template.form == "yes_no":
        truth = tuple(shown[attribute] for attribute in template.asks)
        if rng.random() >= 0.5:
            others = [
                combination
                for combination in itertools.product(*(VALUES[a] for a in template.asks))
                if combination != truth
            ]
            truth = rng.choice(others)
        slots |= dict(zip(template.asks, truth, strict=True))
    elif template.form == "either_or":
        [attribute] = template.asks
        choices = [shown[attribute], rng.choice([v for v in VALUES[attribute] if v != shown[attribute]])]
        rng.shuffle(choices)
        slots |= {"a": choices[0], "b": choices[1]}
    return slots


def phrased(template: Template, image_id: int, facts: ImageFacts, rng: random.Random) -> PhrasedQA:
    """One question of ``template`` about the image ``image_id`` (which shows ``facts``)."""
    slots = draw_slots(template, facts, rng)
    return PhrasedQA(
        image_id,
        fill(template, slots),
        answer(template, facts, slots),
        template.name,
        template.form,
        template.held_out,
    )


def slot_fills(template: Template) -> Iterator[dict[str, str]]:
    """Every way to fill ``template``'s slots: each slot over all its values, an either/or's two
    options over every ordered pair of different values."""
    if template.form == "either_or":
        [attribute] = template.asks
        for a, b in itertools.permutations(VALUES[attribute], 2):
            yield {"a": a, "b": b}
        return
    slots = [slot for slot in ("colour", "shape") if "{" + slot + "}" in template.text]
    for values in itertools.product(*(VALUES[slot] for slot in slots)):
        yield dict(zip(slots, values, strict=True))


def every_question(template: Template) -> Iterator[str]:
    """Every question text ``template`` can ask."""
    return (fill(template, slots) for slots in slot_fills(template))


class PhrasedQuestions:
    """Questions of ``templates`` about ``image_ids``: a form (uniform), one of its templates
    (uniform), an image (uniform), then the slots (``draw_slots``)."""

    def __init__(self, facts: dict[int, ImageFacts], image_ids: Iterable[int], templates: Sequence[Template]):
        self.facts = facts
        self.images = [image for image in sorted(set(image_ids)) if image in facts]
        if not self.images:
            raise ValueError("no image with known facts to ask about")
        self.by_form: dict[str, list[Template]] = {}
        for template in templates:
            self.by_form.setdefault(template.form, []).append(template)
        if not self.by_form:
            raise ValueError("no templates to draw from")
        self.forms = sorted(self.by_form, key=FORMS.index)

    def draw(self, rng: random.Random) -> PhrasedQA:
        template = rng.choice(self.by_form[rng.choice(self.forms)])
        image = rng.choice(self.images)
        return phrased(template, image, self.facts[image], rng)


# Reading a question's text: what the demo training's rationales turn on.


def asks_yes_no(question: str) -> bool:
    """Whether ``question`` wants yes or no: it opens with an auxiliary verb (``infer_kind``), or with
    a contracted negative ("Isn't it a triangle?", which ``infer_kind`` reads as open text)."""
    return infer_kind(question) == "yes_no" or bool(_CONTRACTED.match(question.strip()))


def either_or_of(question: str) -> tuple[str, tuple[str, str]] | None:
    """(the attribute, the two options) of an either/or question between two colours or two shapes;
    None for any other question."""
    choices = either_or_choices(question)
    for attribute, values in VALUES.items():
        if len(choices) == 2 and all(option.lower() in values for option in choices):
            return attribute, (choices[0].lower(), choices[1].lower())
    return None


def counts_shapes(question: str) -> bool:
    """Whether ``question`` asks how many shapes (objects, things) the image holds."""
    return infer_kind(question) == "number" and mentioned(question, _COUNTED) is not None


def answer_of(facts: ImageFacts, question: str) -> str | None:
    """The answer ``facts`` imply for a question read off its text: an either/or question's option
    the image shows (None if it shows neither), "1" to how many shapes, yes or no to a question naming
    a colour or a shape ("not" turns it over), else as ``easy_vqa.answer_from_facts`` reads it."""
    named = either_or_of(question)
    if named is not None:
        attribute, choices = named
        value = facts.colour if attribute == "colour" else facts.shape
        return value if value in choices else None
    if counts_shapes(question):
        return "1"
    if asks_yes_no(question):
        colour, shape = mentioned(question, COLOURS), mentioned(question, SHAPES)
        if colour is None and shape is None:
            return None
        return "yes" if shows(facts, colour, shape) != is_negated(question) else "no"
    return answer_from_facts(facts, question)
