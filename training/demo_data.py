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
answer them and the checkpoints answer them all alike. People's phrasings (``harness.phrasings``:
"Is the shape red?", "Is it a circle or a triangle?", "How many shapes are there?") are read the same
way (``answer_of``), and a question is given the prompt the server gives it (``prompt_answer_kind``).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace

from harness.easy_vqa import (
    COLOURS,
    QA,
    SHAPES,
    ImageFacts,
    asks_colour,
    display_question,
    is_negated,
    mentioned,
    question_variant,
    shows,
)
from harness.phrasings import TRAINING, answer_of, asks_yes_no, counts_shapes, either_or_of, every_question
from serve_app.core.prompts import (
    TEMPLATES,
    TRANSFER_TEMPLATES,
    PromptKind,
    PromptLayout,
    TransferForm,
    build_messages,
)
from serve_app.core.question_parsing import read_question

# The layout the demo models learn: the paper's, the instruction on a line of its own after the
# question. The committed checkpoints were trained on PromptLayout.JOINED (configs/mai-cpu.yaml declares
# it for them); each training report names the layout it used (mai-demo.json: prompt_layout), and the
# config changes together with the checkpoints.
DEMO_LAYOUT = PromptLayout.SEPARATE_LINE


@dataclass(frozen=True)
class Example:
    messages: list[dict]
    target: str


CORNERS = {"circle": "no corners", "rectangle": "four corners", "triangle": "three corners"}


def prompt_answer_kind(question: str) -> str:
    """The answer kind the server builds ``question``'s prompts for (``serve_app.core.stages``): as it
    infers it, but an either/or question that names its options is asked as it is, with the
    short-answer prompt."""
    asked = read_question(question)
    return "text" if asked.options_named else asked.kind


def rationale(facts: ImageFacts, question: str) -> str:
    """Grounded steps: what the image shows (the shape, its colour, its corners), what the question
    asks, and the fact the answer turns on."""
    steps = [
        "I look at the image.",
        "I see one shape.",
        f"Its color is {facts.colour}.",
        f"It has {CORNERS[facts.shape]}, so it is a {facts.shape}.",
    ]
    asked_colour, asked_shape = mentioned(question, COLOURS), mentioned(question, SHAPES)
    named = either_or_of(question)
    if named is not None:
        attribute, (first, second) = named
        article = "a " if attribute == "shape" else ""
        shown = facts.colour if attribute == "colour" else facts.shape
        steps.append(f"The question asks if it is {article}{first} or {article}{second}.")
        steps.append(f"The image shows {shown}.")
    elif counts_shapes(question):
        steps.append("The question asks how many shapes there are.")
    elif asks_yes_no(question):
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
    answer = answer_of(facts, question)
    if answer is None:
        raise ValueError(f"an image showing a {facts.colour} {facts.shape} does not answer {question!r}")
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


def reading(facts: ImageFacts, question: str, rng: random.Random, mix: PromptMix) -> ImageFacts:
    """``facts`` as a weaker model reads them for ``question`` (``perturbed`` at ``mix``'s rates); for
    an either/or question a misread value is the other option (a reader offered two picks one)."""
    seen = perturbed(facts, rng, shape_error=mix.shape_error, colour_error=mix.colour_error)
    named = either_or_of(question)
    if named is not None:
        attribute, choices = named
        if getattr(seen, attribute) not in choices:
            [other] = [option for option in choices if option != getattr(facts, attribute)]
            seen = replace(seen, **{attribute: other})
    return seen


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
    kind = prompt_answer_kind(question)
    reasoning = None
    transfer_form = None
    if prompt_kind is PromptKind.SIMPLE:
        target = f"[[{qa.answer}]]"
    elif prompt_kind is PromptKind.REASONING:
        target = reasoning_text(facts, qa.question)
    elif prompt_kind is PromptKind.STAGE2:
        # The model's own reasoning, right or wrong: stage 2 reports the answer it reached.
        seen = reading(facts, qa.question, rng, mix)
        reasoning = reasoning_text(seen, qa.question)
        target = f"[[{answer_of(seen, qa.question)}]]"
    else:
        seen = reading(facts, qa.question, rng, mix)
        return transfer_example(image_url, question, qa.answer, reasoning_text(seen, qa.question), rng)
    messages = build_messages(
        () if image_url is None else (image_url,),
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
        () if image_url is None else (image_url,),
        question,
        (),
        prompt_answer_kind(question),
        PromptKind.TRANSFER,
        reasoning=reference,
        transfer_form=rng.choice((TransferForm.ACCORDING, TransferForm.REFERENCE)),
        layout=DEMO_LAYOUT,
    )
    return Example(messages, f"[[{answer}]]")


def misreading(facts: ImageFacts, question: str, rng: random.Random) -> ImageFacts:
    """``facts`` with the colour, the shape or both changed so that they answer ``question`` wrongly
    (a reference reasoning to check that the large model does not follow a wrong one)."""
    truth = answer_of(facts, question)
    readings = [
        ImageFacts(colour, shape)
        for colour in COLOURS
        for shape in SHAPES
        if answer_of(ImageFacts(colour, shape), question) not in (truth, None)
    ]
    if not readings:
        raise ValueError(f"no reading of the image answers {question!r} differently")
    return rng.choice(readings)


def tokenizer_corpus(qas: Sequence[QA], facts: dict[int, ImageFacts]) -> list[str]:
    """Text the demo tokenizer learns its merges from: every prompt template, the questions in the
    forms clients type them, every question of the training phrasings (``harness.phrasings.TRAINING``;
    never a held-out one), and the reasoning, so that prompts and answers are a few tokens each."""
    lines = list(TEMPLATES.values()) + list(TRANSFER_TEMPLATES.values())
    lines += [question for template in TRAINING for question in every_question(template)]
    rng = random.Random(0)
    for qa in qas[:5000]:
        lines.append(display_question(qa.question))
        lines.append(qa.question)
        lines.append(question_variant(qa.question, rng))
        if qa.image_id in facts:
            lines.append(reasoning_text(facts[qa.image_id], qa.question))
    return lines * 2
