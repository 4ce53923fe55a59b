"""Training examples for the demo models: easy-vqa questions in the paper's prompt families.

Pure functions only (no torch, no files): what each image shows, a short grounded rationale for a
question about it, and the chat messages + target text of one training example. The messages are
built by ``serve_app.core.prompts``, so the models learn exactly the prompts the server sends.

- Simple: ``[[answer]]``.
- Reasoning: several short steps built from what the image shows (its colour and shape, read off
  easy-vqa's own answers for the same image) and what the question asks, then ``[[answer]]``.
- Stage 2 (the model's own reasoning in context): the answer that reasoning reached.
- Reasoning transfer (a smaller model's reasoning in context, sometimes wrong): the true answer, so
  the large model learns to use the reference where it is right and its own eyes where it is not.

Yes/no questions are drawn balanced and every question is written the way clients type it
(``harness.easy_vqa``: ``BalancedYesNo``, ``question_variant``), so the question text alone cannot
answer them and the checkpoints answer them all alike.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from harness.easy_vqa import (
    COLOURS,
    QA,
    SHAPES,
    ImageFacts,
    answer_from_facts,
    asks_colour,
    display_question,
    is_negated,
    mentioned,
    question_variant,
    shows,
)
from serve_app.core.answers import infer_kind
from serve_app.core.prompts import (
    TEMPLATES,
    TRANSFER_TEMPLATES,
    PromptKind,
    PromptLayout,
    TransferForm,
    build_messages,
)

# The layout the committed demo models learnt: question and instruction back to back (configs/mai-cpu.yaml
# declares it as their prompt_layout).
DEMO_LAYOUT = PromptLayout.JOINED


@dataclass(frozen=True)
class Example:
    messages: list[dict]
    target: str


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
    asked_colour, asked_shape = mentioned(question, COLOURS), mentioned(question, SHAPES)
    if infer_kind(question) == "yes_no":
        thing = " ".join(word for word in (asked_colour, asked_shape or "shape") if word)
        negated = " not" if is_negated(question) else ""
        seen = shows(facts, asked_colour, asked_shape)
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
        image_url,
        question,
        (),
        kind,
        prompt_kind,
        reasoning=reasoning,
        transfer_form=transfer_form,
        layout=DEMO_LAYOUT,
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
        layout=DEMO_LAYOUT,
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
