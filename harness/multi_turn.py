"""Follow-up and two-image questions about easy-vqa's world, with their true answers: what the cascade
now serves beyond one image and one turn (docs/api.md, "A cascade request").

- **Follow-ups**: a first question about an image and its true answer as the assistant's turn, then a
  second question about the same image, with no image of its own ("What is the color of the shape?"
  -> "red" -> "Is it a circle?").
- **Two images**: one user turn with two images and a question about both: the same colour? how many
  are <colour>? do both show a <shape>? (yes/no answers drawn half and half).

Each form is a person's phrasing. ``FORMS`` lists them by kind; ``HELD_OUT`` are those a demo model
trained on this data must never see (for evaluating forms it did not learn). Pure: facts and ids in,
records out; ``chat_messages`` turns a record into the chat request's messages.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from .easy_vqa import COLOURS, SHAPES, ImageFacts

# {colour} and {shape} are filled from the image's facts or drawn.
FIRST_QUESTIONS = {
    "colour": ("What is the color of the shape?", "What colour is the shape in this picture?"),
    "shape": ("What shape is in the image?", "Which shape do you see?"),
}
FOLLOW_UPS = {
    # after the colour: ask about the shape, and the other way round
    "shape_yes_no": ("Is it a {shape}?", "And is that shape a {shape}?"),
    "colour_yes_no": ("Is it {colour}?", "So is the shape {colour}?"),
    "shape": ("What shape is it?", "And which shape is it?"),
    "colour": ("What color is it?", "And what colour does it have?"),
}
PAIR_QUESTIONS = {
    "same_colour": (
        "Do the two shapes have the same color?",
        "Are both shapes the same colour?",
    ),
    "count_colour": (
        "How many of the shapes are {colour}?",
        "In these two images, how many shapes are {colour}?",
    ),
    "both_shape": (
        "Do both images show a {shape}?",
        "Is there a {shape} in each of the two pictures?",
    ),
}
# The second phrasing of each kind: never in a demo model's training data.
HELD_OUT = frozenset(
    form
    for table in (FIRST_QUESTIONS, FOLLOW_UPS, PAIR_QUESTIONS)
    for forms in table.values()
    for form in forms[1:]
)
FORMS = {**FOLLOW_UPS, **PAIR_QUESTIONS}


def _form(forms: Sequence[str], rng: random.Random, held_out: bool) -> str:
    usable = [form for form in forms if (form in HELD_OUT) == held_out]
    return rng.choice(usable or list(forms))


def follow_up(
    facts: ImageFacts, image_id: int, rng: random.Random, *, held_out: bool = True
) -> dict[str, Any]:
    """A first question about ``image_id`` answered truly, then a follow-up about the same image."""
    first_kind = rng.choice(("colour", "shape"))
    first = _form(FIRST_QUESTIONS[first_kind], rng, held_out)
    first_answer = facts.colour if first_kind == "colour" else facts.shape
    other = "shape" if first_kind == "colour" else "colour"
    kind = rng.choice((f"{other}_yes_no", other))
    form = _form(FOLLOW_UPS[kind], rng, held_out)
    asked = None
    if kind.endswith("_yes_no"):
        truth = rng.random() < 0.5
        actual = facts.shape if other == "shape" else facts.colour
        pool = SHAPES if other == "shape" else COLOURS
        asked = actual if truth else rng.choice([value for value in pool if value != actual])
    question = form.format(shape=asked, colour=asked) if asked else form
    return {
        "kind": f"follow_up/{kind}",
        "form": form,
        "turns": [
            {"role": "user", "text": first, "images": [image_id]},
            {"role": "assistant", "text": first_answer, "images": []},
        ],
        "images": [],
        "question": question,
        "asked": asked,
        "answer": follow_up_answer(kind, asked, facts),
        "metric": "yes_no" if asked else "exact",
    }


def follow_up_answer(kind: str, asked: str | None, facts: ImageFacts) -> str:
    """The answer to a follow-up of ``kind`` (a ``FOLLOW_UPS`` key) asking about ``asked`` (the colour or
    shape a yes/no follow-up names, else None) about an image showing ``facts``."""
    attribute = facts.shape if kind.startswith("shape") else facts.colour
    if asked is None:
        return attribute
    return "yes" if asked == attribute else "no"


def pair_answer(kind: str, asked: str | None, first: ImageFacts, second: ImageFacts) -> str:
    """The answer to a two-image question of ``kind`` (a ``PAIR_QUESTIONS`` key) naming ``asked`` (its
    colour or shape; None for ``same_colour``) about images showing ``first`` and ``second``."""
    if kind == "same_colour":
        return "yes" if first.colour == second.colour else "no"
    if kind == "count_colour":
        return str((first.colour == asked) + (second.colour == asked))
    return "yes" if first.shape == asked == second.shape else "no"


def image_pair(
    facts: Mapping[int, ImageFacts], first: int, second: int, rng: random.Random, *, held_out: bool = True
) -> dict[str, Any]:
    """A question about two images, its answer read off both images' facts."""
    a, b = facts[first], facts[second]
    kind = rng.choice(tuple(PAIR_QUESTIONS))
    form = _form(PAIR_QUESTIONS[kind], rng, held_out)
    asked = None
    if kind == "count_colour":
        asked = rng.choice([a.colour, b.colour, rng.choice(COLOURS)])
    elif kind == "both_shape":
        asked = rng.choice([a.shape, b.shape, rng.choice(SHAPES)])
    question = form.format(colour=asked, shape=asked) if asked else form
    return {
        "kind": f"images/{kind}",
        "form": form,
        "turns": [],
        "images": [first, second],
        "question": question,
        "asked": asked,
        "answer": pair_answer(kind, asked, a, b),
        "metric": "exact" if kind == "count_colour" else "yes_no",
    }


def draw(
    facts: Mapping[int, ImageFacts],
    image_ids: Sequence[int],
    count: int,
    seed: int = 0,
    *,
    held_out: bool = True,
) -> dict[str, list[dict[str, Any]]]:
    """``count`` follow-ups and ``count`` two-image questions about ``image_ids`` (those with known
    facts), seeded; two-image pairs are drawn so that half of the same-colour questions are yes."""
    rng = random.Random(seed)
    images = [image for image in sorted(set(image_ids)) if image in facts]
    follow_ups = [follow_up(facts[i], i, rng, held_out=held_out) for i in rng.sample(images, count)]
    pairs = []
    for index in range(count):
        first = rng.choice(images)
        same = [i for i in images if i != first and facts[i].colour == facts[first].colour]
        other = [i for i in images if facts[i].colour != facts[first].colour]
        second = rng.choice(same if index % 2 == 0 and same else other)
        pairs.append(image_pair(facts, first, second, rng, held_out=held_out))
    for number, record in enumerate(follow_ups + pairs):
        record["id"] = f"multi-turn-{seed}-{number}"
    return {"follow_up": follow_ups, "images": pairs}


def chat_messages(record: Mapping[str, Any], image_url: Any) -> list[dict[str, Any]]:
    """The chat messages of ``record``: its turns (user turns' images before their text), then the
    question's turn with its images. ``image_url(image_id)`` gives an image's data URL."""

    def content(text: str, images: Sequence[int]) -> list[dict[str, Any]]:
        parts: list[dict[str, Any]] = [
            {"type": "image_url", "image_url": {"url": image_url(i)}} for i in images
        ]
        return [*parts, {"type": "text", "text": text}]

    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": turn["text"]}
        if turn["role"] == "assistant"
        else {"role": "user", "content": content(turn["text"], turn["images"])}
        for turn in record["turns"]
    ]
    return [*messages, {"role": "user", "content": content(record["question"], record["images"])}]
