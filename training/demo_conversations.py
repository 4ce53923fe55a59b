"""Training examples for follow-ups and two-image questions: ``harness.multi_turn``'s records in the
paper's prompt families, their forms drawn from the training phrasings only (never a held-out one).

- A follow-up: the first question about an image with the image, its true answer as the assistant's
  turn, then the follow-up (no image of its own) as the question every stage asks; its rationale
  reads the image from the earlier turn.
- Two images: one turn with both images and a question about both ("Do the two shapes have the same
  color?"); its rationale says what each image shows and compares them.

Each record is given the four prompt kinds as ``training.demo_data`` gives a one-image question:
Simple (``[[answer]]``), Reasoning (the steps, then the answer), Stage 2 (the model's own reasoning,
misread at the mix's rates, in context: the answer it reached) and reasoning transfer (a smaller
model's reasoning, right or wrong: the true answer). Pure: facts and records in, examples out.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

from harness.easy_vqa import ImageFacts
from harness.multi_turn import follow_up, follow_up_answer, image_pair, pair_answer
from serve_app.core.prompts import PromptKind, TransferForm, Turn, build_messages
from training.demo_data import (
    CORNERS,
    DEMO_LAYOUT,
    Example,
    PromptMix,
    comparison_step,
    perturbed,
    prompt_answer_kind,
)

# The image URL in a training example's messages: the chat template renders one image pad per image
# part, whatever the URL; the pixels come from the corpus, in the order ``record_images`` gives.
IMAGE = "image"


def draw_record(facts: Mapping[int, ImageFacts], images: Sequence[int], rng: random.Random) -> dict[str, Any]:
    """A follow-up or a two-image question (half and half) about ``images`` (those with known facts),
    in a training form. A pair's second image shares the first's colour half the time and its shape
    half the time, so "same colour?" and "both a <shape>?" are answered yes about as often as no."""
    first = rng.choice(images)
    if rng.random() < 0.5:
        return follow_up(facts[first], first, rng, held_out=False)
    same_colour = rng.random() < 0.5
    same_shape = rng.random() < 0.5
    second = first
    for _ in range(64):  # a partner with the drawn likeness, among a few tries
        second = rng.choice(images)
        a, b = facts[first], facts[second]
        if second != first and (a.colour == b.colour) == same_colour and (a.shape == b.shape) == same_shape:
            break
    return image_pair(facts, first, second, rng, held_out=False)


def record_images(record: Mapping[str, Any]) -> list[int]:
    """The record's image ids in the order its prompt shows them: earlier turns' first, then the
    question's own."""
    return [image for turn in record["turns"] for image in turn["images"]] + list(record["images"])


def _kind(record: Mapping[str, Any]) -> str:
    return str(record["kind"]).split("/", 1)[1]


def answer(record: Mapping[str, Any], seen: Sequence[ImageFacts]) -> str:
    """The record's answer if its images showed ``seen`` (in ``record_images`` order)."""
    if record["turns"]:
        return follow_up_answer(_kind(record), record["asked"], seen[0])
    return pair_answer(_kind(record), record["asked"], seen[0], seen[1])


def rationale(record: Mapping[str, Any], seen: Sequence[ImageFacts]) -> str:
    """Grounded steps for the record's question if its images showed ``seen``: what each image shows,
    what the question asks, and the comparison the answer turns on."""
    kind, asked = _kind(record), record["asked"]
    if record["turns"]:
        facts = seen[0]
        steps = [
            "I look at the image from before.",
            "I see one shape.",
            f"Its color is {facts.colour}.",
            f"It has {CORNERS[facts.shape]}, so it is a {facts.shape}.",
        ]
        if kind == "shape_yes_no":
            steps += [f"The question asks if it is a {asked}.", comparison_step(asked, facts.shape, asked)]
        elif kind == "colour_yes_no":
            steps += [
                f"The question asks if it is {asked}.",
                comparison_step(asked, facts.colour, f"{asked} shape"),
            ]
        else:
            steps.append(f"The question asks for the {'shape' if kind == 'shape' else 'color'}.")
        return " ".join(steps)
    a, b = seen
    steps = [
        "I look at the two images.",
        f"The first shows a {a.colour} {a.shape}.",
        f"The second shows a {b.colour} {b.shape}.",
    ]
    if kind == "same_colour":
        match = "They match" if a.colour == b.colour else "They differ"
        steps += [
            "The question asks if the two colors are the same.",
            f"The first is {a.colour}; the second is {b.colour}. {match}.",
        ]
    else:
        attribute = "colour" if kind == "count_colour" else "shape"
        first, second = getattr(a, attribute), getattr(b, attribute)
        steps.append(
            f"The question asks how many are {asked}."
            if kind == "count_colour"
            else f"The question asks if both show a {asked}."
        )
        for place, value in (("first", first), ("second", second)):
            steps.append(f"The {place} is {value}: {'a match' if value == asked else 'no match'}.")
    return " ".join(steps)


def reasoning_text(record: Mapping[str, Any], seen: Sequence[ImageFacts]) -> str:
    """What the Reasoning prompt should produce for the record: the steps, then the answer they reach."""
    reached = answer(record, seen)
    return f"{rationale(record, seen)} So the answer is {reached}. [[{reached}]]"


def conversation_example(
    record: Mapping[str, Any],
    facts: Mapping[int, ImageFacts],
    prompt_kind: PromptKind,
    rng: random.Random,
    mix: PromptMix,
) -> Example:
    """One training example of ``prompt_kind`` for ``record`` (a ``harness.multi_turn`` record whose
    images show ``facts``)."""
    truth = [facts[image] for image in record_images(record)]
    reasoning = None
    transfer_form: TransferForm | None = None
    if prompt_kind is PromptKind.SIMPLE:
        target = f"[[{record['answer']}]]"
    elif prompt_kind is PromptKind.REASONING:
        target = reasoning_text(record, truth)
    else:
        # A weaker reading of the images: stage 2 reports the answer it reached; transfer answers truly.
        seen = [
            perturbed(fact, rng, shape_error=mix.shape_error, colour_error=mix.colour_error) for fact in truth
        ]
        reasoning = reasoning_text(record, seen)
        if prompt_kind is PromptKind.STAGE2:
            target = f"[[{answer(record, seen)}]]"
        else:
            target = f"[[{record['answer']}]]"
            transfer_form = rng.choice((TransferForm.ACCORDING, TransferForm.REFERENCE))
    context = tuple(
        Turn(turn["role"], turn["text"], (IMAGE,) * len(turn["images"])) for turn in record["turns"]
    )
    messages = build_messages(
        (IMAGE,) * len(record["images"]),
        record["question"],
        (),
        prompt_answer_kind(record["question"]),
        prompt_kind,
        reasoning=reasoning,
        transfer_form=transfer_form,
        layout=DEMO_LAYOUT,
        context=context,
    )
    return Example(messages, target)
