"""What a demo model has learnt: whether greedy decoding writes a target (``greedy_matches``), the
Simple, transfer and Reasoning accuracies on validation questions, the comparison drill's verdict, and
the validation part of the training report."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from harness.easy_vqa import (
    QA,
    BalancedYesNo,
    answer_from_facts,
    display_question,
    question_type,
)
from harness.multi_turn import HELD_OUT
from harness.multi_turn import draw as draw_conversations
from harness.phrasings import TEMPLATES, PhrasedQA, PhrasedQuestions
from serve_app.core.prompts import PromptKind
from training.demo.corpus import Collator, Corpus, drill_batch, with_pixels
from training.demo.recipes import DemoSpec
from training.demo_conversations import conversation_example, record_images
from training.demo_data import (
    Example,
    PromptMix,
    comparison_drill,
    make_example,
    misreading,
    reasoning_text,
    transfer_example,
)

# Comparison drill sentences drawn to check the verdict.
COMPARISON_DRILL_CHECKED = 400

# Validation questions whose Reasoning answer is generated for the training report (generation is
# slow: about a minute for the small model).
REASONING_CHECKED = 200
# Validation questions of each group (balanced yes/no; colour and shape) for the transfer check.
TRANSFER_CHECKED = 200
# Questions in people's phrasings, every template (held-out ones included), on the validation images.
PHRASED_CHECKED = 400
# Follow-ups and as many two-image questions on the validation images, in training forms and as many
# in held-out forms.
CONVERSATIONS_CHECKED = 100


def greedy_matches(
    model, corpus: Corpus, collator: Collator, qas: list[QA], examples: list[Example]
) -> list[bool]:
    """For each example (about the image of the ``qas`` at its index), whether greedy decoding would
    write its target: under teacher forcing, every target token is the argmax."""
    return greedy_writes(model, with_pixels(corpus, collator(examples), [qa.image_id for qa in qas]))


def greedy_writes(model, batch: dict) -> list[bool]:
    """For each row of ``batch``, whether greedy decoding would write its labels."""
    import torch

    labels = batch.pop("labels")
    with torch.no_grad():
        predicted = model(**batch).logits[:, :-1].argmax(-1)
    wanted = labels[:, 1:]
    return ((predicted == wanted) | (wanted == -100)).all(-1).tolist()


def simple_accuracy(
    model, corpus: Corpus, collator: Collator, qas: list[QA], batch_size: int = 64, variants: bool = False
) -> dict[str, float]:
    """Greedy accuracy of the Simple prompt on ``qas``, by kind."""
    right: dict[str, list[bool]] = defaultdict(list)
    rng = random.Random(0)
    mix = PromptMix(1, 0, 0, 0)
    model.eval()
    for start in range(0, len(qas), batch_size):
        chunk = qas[start : start + batch_size]
        examples = [
            make_example(
                "image", qa, corpus.facts.get(qa.image_id), PromptKind.SIMPLE, rng, mix, variant=variants
            )
            for qa in chunk
        ]
        for qa, correct in zip(chunk, greedy_matches(model, corpus, collator, chunk, examples), strict=True):
            right[question_type(qa.question, qa.answer)].append(correct)
            right["all"].append(correct)
    model.train()
    return {kind: sum(values) / len(values) for kind, values in right.items()}


def phrased_accuracy(
    model, corpus: Corpus, collator: Collator, qas: list[PhrasedQA], batch_size: int = 64
) -> dict[str, dict[str, float]]:
    """Greedy accuracy of the Simple prompt on questions in people's phrasings, by form and over
    all, for the training templates ("seen") and the held-out ones apart."""
    right: dict[str, dict[str, list[bool]]] = {"seen": defaultdict(list), "held out": defaultdict(list)}
    rng, mix = random.Random(0), PromptMix(1, 0, 0, 0)
    model.eval()
    for start in range(0, len(qas), batch_size):
        chunk = qas[start : start + batch_size]
        examples = [
            make_example("image", qa, corpus.facts[qa.image_id], PromptKind.SIMPLE, rng, mix) for qa in chunk
        ]
        for qa, correct in zip(chunk, greedy_matches(model, corpus, collator, chunk, examples), strict=True):
            group = right["held out" if qa.held_out else "seen"]
            group[qa.form].append(correct)
            group["all"].append(correct)
    model.train()
    return {
        part: {form: round(sum(values) / len(values), 3) for form, values in sorted(by_form.items())}
        for part, by_form in right.items()
        if by_form
    }


def conversation_accuracy(
    model, corpus: Corpus, collator: Collator, records: list[dict], batch_size: int = 32
) -> dict[str, dict[str, float]]:
    """Greedy accuracy of the Simple prompt on follow-ups and two-image questions (``harness.multi_turn``
    records), by kind and over all, for the training forms ("seen") and the held-out ones apart."""
    right: dict[str, dict[str, list[bool]]] = {"seen": defaultdict(list), "held out": defaultdict(list)}
    rng, mix = random.Random(0), PromptMix(1, 0, 0, 0)
    model.eval()
    for start in range(0, len(records), batch_size):
        chunk = records[start : start + batch_size]
        examples = [conversation_example(r, corpus.facts, PromptKind.SIMPLE, rng, mix) for r in chunk]
        images = [image for record in chunk for image in record_images(record)]
        batch = with_pixels(corpus, collator(examples), images)
        for record, correct in zip(chunk, greedy_writes(model, batch), strict=True):
            group = right["held out" if record["form"] in HELD_OUT else "seen"]
            group[record["kind"]].append(correct)
            group["all"].append(correct)
    model.train()
    return {
        part: {kind: round(sum(values) / len(values), 3) for kind, values in sorted(by_kind.items())}
        for part, by_kind in right.items()
        if by_kind
    }


def transfer_accuracy(
    model, corpus: Corpus, collator: Collator, qas: list[QA], batch_size: int = 32
) -> dict[str, dict[str, float]]:
    """How the Reasoning transfer prompt uses its reference, by kind of question: the greedy answer's
    accuracy when the reference reasoning is right, and how often it repeats the reference's answer
    when the reference is wrong (``misreading``). On yes/no, which the Simple answer cannot tell, the
    large model should follow the reference; on colour and shape, its own eyes."""
    rng = random.Random(0)
    right_reference: dict[str, list[bool]] = defaultdict(list)
    follows_wrong: dict[str, list[bool]] = defaultdict(list)
    model.eval()
    for start in range(0, len(qas), batch_size):
        chunk = qas[start : start + batch_size]
        questions = [display_question(qa.question) for qa in chunk]
        facts = [corpus.facts[qa.image_id] for qa in chunk]
        right = [
            transfer_example("image", q, qa.answer, reasoning_text(f, qa.question), rng)
            for q, qa, f in zip(questions, chunk, facts, strict=True)
        ]
        wrong = []
        for q, qa, f in zip(questions, chunk, facts, strict=True):
            seen = misreading(f, qa.question, rng)
            wrong.append(
                transfer_example(
                    "image", q, answer_from_facts(seen, qa.question), reasoning_text(seen, qa.question), rng
                )
            )
        kinds = [question_type(qa.question, qa.answer) for qa in chunk]
        for kind, ok in zip(kinds, greedy_matches(model, corpus, collator, chunk, right), strict=True):
            right_reference[kind].append(ok)
        for kind, ok in zip(kinds, greedy_matches(model, corpus, collator, chunk, wrong), strict=True):
            follows_wrong[kind].append(ok)
    model.train()
    return {
        kind: {
            "accuracy, right reference": round(sum(right_reference[kind]) / len(right_reference[kind]), 3),
            "follows a wrong reference": round(sum(follows_wrong[kind]) / len(follows_wrong[kind]), 3),
        }
        for kind in sorted(right_reference)
    }


def reasoning_accuracy(
    model,
    corpus: Corpus,
    collator: Collator,
    qas: list[QA],
    *,
    batch_size: int = 40,
    max_new_tokens: int = 96,
) -> float:
    """Share of ``qas`` whose greedy Reasoning answer (generated, then read out of ``[[...]]`` the way
    the server reads it) is right: the rationale is the model's own, so a wrong step counts."""
    import torch

    from serve_app.core.answers import extract_answer

    rng, mix, right = random.Random(0), PromptMix(0, 1, 0, 0), 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(qas), batch_size):
            chunk = qas[start : start + batch_size]
            prompts = [
                collator.ids(
                    make_example("image", qa, corpus.facts[qa.image_id], PromptKind.REASONING, rng, mix)
                )[0]
                for qa in chunk
            ]
            width = max(map(len, prompts))
            input_ids = torch.full((len(chunk), width), collator.pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for row, prompt in enumerate(prompts):  # left-padded: every row ends where generation starts
                input_ids[row, width - len(prompt) :] = torch.tensor(prompt)
                mask[row, width - len(prompt) :] = 1
            generated = model.generate(
                input_ids=input_ids,
                attention_mask=mask,
                pixel_values=torch.cat([corpus.pixels[qa.image_id] for qa in chunk]),
                image_grid_thw=corpus.grid.repeat(len(chunk), 1),
                mm_token_type_ids=(input_ids == collator.image_pad).long(),
                max_new_tokens=max_new_tokens,
                do_sample=False,
            )
            for qa, row in zip(chunk, generated[:, width:], strict=True):
                right += extract_answer(collator.tokenizer.decode(row, skip_special_tokens=True)) == qa.answer
    model.train()
    return right / len(qas)


def verdict_accuracy(model, tokenizer, sentences: list[tuple[str, str]]) -> float:
    """Share of ``sentences`` whose verdict ("match" or "differ") is the model's greedy next token."""
    import torch

    batch, verdicts = drill_batch(tokenizer, sentences)
    batch.pop("labels")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        predicted = model(**batch).logits.argmax(-1)
    model.train(was_training)
    ids = batch["input_ids"]
    return sum(int(predicted[row, at - 1] == ids[row, at]) for row, at in enumerate(verdicts)) / len(verdicts)


def checked_verdict_accuracy(model, tokenizer) -> float:
    """``verdict_accuracy`` on COMPARISON_DRILL_CHECKED drill sentences drawn with seed 0 (the pairs
    of values are few: this checks that the verdict was learnt, not that it generalises)."""
    checked = random.Random(0)
    sentences = [comparison_drill(checked) for _ in range(COMPARISON_DRILL_CHECKED)]
    return round(verdict_accuracy(model, tokenizer, sentences), 3)


@dataclass(frozen=True)
class ValidationQuestions:
    """The held-out questions a model's training reports on: up to 400 of easy-vqa's own (``sample``),
    400 generated balanced yes/no (``balanced_yes_no``), PHRASED_CHECKED in people's phrasings
    (``phrased``, every template) and follow-ups and two-image questions (``conversations``,
    CONVERSATIONS_CHECKED of each in training forms and as many in held-out ones), all about the
    validation images."""

    sample: list[QA]
    balanced_yes_no: list[QA]
    phrased: list[PhrasedQA]
    conversations: list[dict]

    @classmethod
    def of(cls, corpus: Corpus) -> ValidationQuestions:
        sample = random.Random(0).sample(corpus.validation, min(400, len(corpus.validation)))
        images = sorted({qa.image_id for qa in corpus.validation} & set(corpus.facts))
        balanced_rng = random.Random(1)
        yes_no = BalancedYesNo(corpus.facts, images)
        phrased_rng, phrasings = random.Random(2), PhrasedQuestions(corpus.facts, images, TEMPLATES)
        conversations = [
            record
            for held_out, seed in ((False, 3), (True, 4))
            for records in draw_conversations(
                corpus.facts, images, min(CONVERSATIONS_CHECKED, len(images)), seed, held_out=held_out
            ).values()
            for record in records
        ]
        return cls(
            sample,
            [yes_no.draw(balanced_rng) for _ in range(400)],
            [phrasings.draw(phrased_rng) for _ in range(PHRASED_CHECKED)],
            conversations,
        )


@dataclass(frozen=True)
class ValidationResults:
    """The trained model on the validation questions (``validate``)."""

    simple: dict[str, float]  # Simple accuracy by kind, then on balanced yes/no and as typed
    reasoning: dict | None  # Reasoning accuracy on balanced yes/no, if the model learnt Reasoning
    transfer: dict[str, dict[str, float]] | None  # transfer_accuracy, if the model learnt transfer
    phrased: dict[str, dict[str, float]]  # phrased_accuracy: Simple, by form, seen and held-out templates
    conversations: dict[str, dict[str, float]]  # conversation_accuracy: Simple, by kind, seen and held out


def validate(
    model, corpus: Corpus, collator: Collator, spec: DemoSpec, questions: ValidationQuestions
) -> ValidationResults:
    """Simple accuracy on the validation questions (by kind, on balanced yes/no, on the sample as
    typed, and on people's phrasings by form, seen and held-out templates apart); Reasoning accuracy
    on REASONING_CHECKED balanced yes/no, if ``spec`` teaches Reasoning; and how the model uses a
    reference reasoning on TRANSFER_CHECKED balanced yes/no and as many colour and shape questions, if
    ``spec`` teaches transfer."""
    validation, validation_balanced = questions.sample, questions.balanced_yes_no
    accuracy = simple_accuracy(model, corpus, collator, validation)
    accuracy["balanced yes/no"] = simple_accuracy(model, corpus, collator, validation_balanced)["all"]
    accuracy["all, as typed"] = simple_accuracy(model, corpus, collator, validation, variants=True)["all"]
    reasoning = (
        {
            "balanced yes/no": round(
                reasoning_accuracy(model, corpus, collator, validation_balanced[:REASONING_CHECKED]), 3
            ),
            "questions": REASONING_CHECKED,
        }
        if spec.mix.reasoning
        else None
    )
    transfer = (
        transfer_accuracy(
            model,
            corpus,
            collator,
            validation_balanced[:TRANSFER_CHECKED]
            + [
                qa
                for qa in validation
                if qa.image_id in corpus.facts and question_type(qa.question, qa.answer) != "yes/no"
            ][:TRANSFER_CHECKED],
        )
        if spec.mix.transfer
        else None
    )
    phrased = phrased_accuracy(model, corpus, collator, questions.phrased)
    conversations = conversation_accuracy(model, corpus, collator, questions.conversations)
    return ValidationResults(accuracy, reasoning, transfer, phrased, conversations)
