"""The phases of a demo model's training, in the order they run: the vision tower alone
(``pretrain_vision``), the comparison drill (``drill_comparison``), text-only Reasoning
(``pretrain_text_reasoning``), the image steps (``image_steps``) and reasoning transfer
(``transfer_training``). Each stops early at a deadline (time.monotonic())."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import NamedTuple

from harness.easy_vqa import COLOURS, QA, SHAPES, BalancedYesNo
from serve_app.core.prompts import PromptKind
from training.demo.corpus import Collator, Corpus, batch_of, drill_batch
from training.demo.progress import progress_bar
from training.demo.recipes import COMPARISON_DRILL_BATCH, DemoSpec
from training.demo.validation import checked_verdict_accuracy, simple_accuracy
from training.demo_data import PromptMix, comparison_drill, make_example


def pooled_vision(model, corpus: Corpus, image_ids: list[int]):
    """The vision tower's output for ``image_ids``, averaged over each image's tokens."""
    import torch

    pixels = torch.cat([corpus.pixels[image_id] for image_id in image_ids])
    output = model.model.visual(pixels, grid_thw=corpus.grid.repeat(len(image_ids), 1))
    embeddings = output.pooler_output if hasattr(output, "pooler_output") else output[0]
    return embeddings.reshape(len(image_ids), -1, embeddings.shape[-1]).mean(1)


def optimizer_step(optimizer, loss, clip: list | None = None) -> None:
    """Back-propagate ``loss`` and step ``optimizer``, clipping the gradients of ``clip`` to norm 1."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if clip is not None:
        torch.nn.utils.clip_grad_norm_(clip, 1.0)
    optimizer.step()


def run_phase(
    optimizer,
    loss_of_step,
    *,
    steps: int,
    description: str,
    deadline: float,
    progress: bool,
    clip: list | None = None,
) -> tuple[int, list[float]]:
    """Take up to ``steps`` optimiser steps on ``loss_of_step()`` (a fresh batch's loss each call),
    stopping early at ``deadline`` (time.monotonic()), with a progress bar; gradients of ``clip`` are
    clipped to norm 1. Returns the steps done and the last 50 losses."""

    done, losses = 0, []
    for _ in progress_bar(range(steps), enabled=progress, desc=description, unit="step"):
        if time.monotonic() > deadline:
            break
        loss = loss_of_step()
        optimizer_step(optimizer, loss, clip)
        losses = (losses + [loss.item()])[-50:]
        done += 1
    return done, losses


def pretrain_vision(
    model, corpus: Corpus, spec: DemoSpec, rng: random.Random, *, deadline: float, progress: bool = True
) -> dict:
    """Train the vision tower alone to tell each image's colour and shape (two linear heads on its
    pooled output, dropped afterwards), for ``spec.vision_pretrain_steps`` or until ``deadline``
    (time.monotonic()). Returns the probe's accuracy on the validation images."""
    import torch

    width = model.config.vision_config.out_hidden_size
    heads = {"colour": torch.nn.Linear(width, len(COLOURS)), "shape": torch.nn.Linear(width, len(SHAPES))}
    labels = {
        "colour": lambda ids: torch.tensor([COLOURS.index(corpus.facts[i].colour) for i in ids]),
        "shape": lambda ids: torch.tensor([SHAPES.index(corpus.facts[i].shape) for i in ids]),
    }
    parameters = list(model.model.visual.parameters()) + [p for h in heads.values() for p in h.parameters()]
    optimizer = torch.optim.AdamW(parameters, lr=spec.learning_rate)
    train_images = sorted({qa.image_id for qa in corpus.train} & set(corpus.facts))

    def loss_of_step():
        image_ids = rng.sample(train_images, spec.batch_size)
        pooled = pooled_vision(model, corpus, image_ids)
        return sum(
            torch.nn.functional.cross_entropy(head(pooled), labels[name](image_ids))
            for name, head in heads.items()
        )

    steps, _ = run_phase(
        optimizer,
        loss_of_step,
        steps=spec.vision_pretrain_steps,
        description=f"{spec.model.name} vision",
        deadline=deadline,
        progress=progress,
    )
    validation_images = sorted({qa.image_id for qa in corpus.validation} & set(corpus.facts))
    with torch.no_grad():
        pooled = pooled_vision(model.eval(), corpus, validation_images)
        accuracy = {
            name: round((head(pooled).argmax(-1) == labels[name](validation_images)).float().mean().item(), 3)
            for name, head in heads.items()
        }
    model.train()
    return {
        "steps": steps,
        "validation_probe_accuracy": accuracy,
        "validation_images": len(validation_images),
    }


def drill_loss(model, tokenizer, rng: random.Random):
    """The model's loss on a fresh batch of COMPARISON_DRILL_BATCH drill sentences."""
    batch, _ = drill_batch(tokenizer, [comparison_drill(rng) for _ in range(COMPARISON_DRILL_BATCH)])
    return model(**batch).loss


def drill_comparison(
    model, tokenizer, spec: DemoSpec, rng: random.Random, *, deadline: float, progress: bool = True
) -> dict:
    """Train the model on plain-text ``comparison_drill`` sentences (the verdict onwards labelled), for
    ``spec.comparison_drill_steps`` or until ``deadline``. Returns the steps done and the verdict's
    accuracy afterwards (``checked_verdict_accuracy``)."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.01)

    steps, _ = run_phase(
        optimizer,
        lambda: drill_loss(model, tokenizer, rng),
        steps=spec.comparison_drill_steps,
        description=f"{spec.model.name} comparison drill",
        deadline=deadline,
        progress=progress,
        clip=list(model.parameters()),
    )
    return {"steps": steps, "verdict_accuracy": checked_verdict_accuracy(model, tokenizer)}


def pretrain_text_reasoning(
    model,
    corpus: Corpus,
    collator: Collator,
    spec: DemoSpec,
    rng: random.Random,
    *,
    deadline: float,
    progress: bool = True,
) -> dict:
    """Train the whole model on text-only Reasoning examples of balanced yes/no questions (no image:
    the rationale's first steps, what the image shows, are then guesses, and the rest follows from
    them and the question), for ``spec.text_reasoning_steps`` or until ``deadline``. Returns the steps
    done and the last steps' mean loss."""
    import torch

    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.01)
    yes_no = BalancedYesNo(corpus.facts, {qa.image_id for qa in corpus.train})
    mix = PromptMix(0, 1, 0, 0)

    def loss_of_step():
        qas = [yes_no.draw(rng) for _ in range(spec.batch_size)]
        examples = [
            make_example(None, qa, corpus.facts[qa.image_id], PromptKind.REASONING, rng, mix, variant=True)
            for qa in qas
        ]
        batch = collator(examples)
        batch.pop("mm_token_type_ids")
        return model(**batch).loss

    steps, losses = run_phase(
        optimizer,
        loss_of_step,
        steps=spec.text_reasoning_steps,
        description=f"{spec.model.name} text reasoning",
        deadline=deadline,
        progress=progress,
        clip=list(model.parameters()),
    )
    return {"steps": steps, "final_loss": round(sum(losses) / len(losses), 4) if losses else None}


def learning_rate(step: int, spec: DemoSpec) -> float:
    """Linear warm-up over the first 5 % of steps, then cosine down to a tenth."""
    warmup = max(1, spec.steps // 20)
    if step < warmup:
        return spec.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(1, spec.steps - warmup)
    return spec.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


class ImageSteps(NamedTuple):
    """What ``image_steps`` did: the steps taken, the loss's moving average, whether it stopped early."""

    steps: int
    loss_ema: float | None
    stopped_early: bool


def image_steps(
    model,
    tokenizer,
    corpus: Corpus,
    collator: Collator,
    spec: DemoSpec,
    batch_questions: Callable[[], list[QA]],
    rng: random.Random,
    optimizer,
    clipped: list,
    *,
    validation: list[QA],
    stopped_early: bool,
    deadline: float,
    progress: bool = True,
) -> ImageSteps:
    """The main phase: ``spec.steps`` batches of images and questions (drawn by ``batch_questions``), at
    the ``learning_rate`` schedule, one drill step after every ``spec.drill_every``-th; the bar shows
    the loss and, every 500 steps, the Simple accuracy on ``validation``. Stops at ``deadline``, or at
    once if ``stopped_early`` (an earlier phase ran out of time)."""
    parameters = sum(p.numel() for p in model.parameters())
    steps_done, loss_ema = 0, None
    bar = progress_bar(
        range(spec.steps), enabled=progress, desc=f"{spec.model.name} ({parameters / 1e6:.1f} M)", unit="step"
    )
    for step in bar:
        if stopped_early or time.monotonic() > deadline:
            stopped_early = True
            break
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step, spec)
        qas = batch_questions()
        # One prompt kind per batch: a batch is padded to its longest example, and the kinds differ
        # in length by three times (Simple against a transfer prompt holding a reasoning).
        kind = spec.prompt_kind(step, rng)
        batch = batch_of(corpus, qas, [kind] * len(qas), collator, rng, spec.mix, variants=True)
        loss = model(**batch).loss
        optimizer_step(optimizer, loss, clipped)
        if spec.drill_every and step % spec.drill_every == 0:
            optimizer_step(optimizer, drill_loss(model, tokenizer, rng), clipped)
        steps_done = step + 1
        loss_ema = loss.item() if loss_ema is None else 0.95 * loss_ema + 0.05 * loss.item()
        if steps_done % 500 == 0:
            bar.set_postfix(
                loss=f"{loss_ema:.3f}",
                val=f"{simple_accuracy(model, corpus, collator, validation)['all']:.2f}",
            )
        elif steps_done % 20 == 0:
            bar.set_postfix(loss=f"{loss_ema:.3f}")
    bar.close()
    return ImageSteps(steps_done, loss_ema, stopped_early)


def transfer_training(
    model, corpus, collator, spec: DemoSpec, batch_questions, rng, optimizer, clipped, *, deadline, progress
) -> dict:
    """``spec.transfer_steps`` batches of reasoning transfer after the main steps (questions drawn by
    ``batch_questions``), every fourth a Simple batch, at ``spec.transfer_learning_rate``."""
    steps, losses = 0, []
    if not spec.transfer_steps:
        return {"steps": 0, "final_loss": None}
    for group in optimizer.param_groups:
        group["lr"] = spec.transfer_learning_rate
    bar = progress_bar(
        range(spec.transfer_steps), enabled=progress, desc=f"{spec.model.name} transfer", unit="step"
    )
    for step in bar:
        if time.monotonic() > deadline:
            break
        kind = PromptKind.SIMPLE if step % 4 == 3 else PromptKind.TRANSFER
        qas = batch_questions()
        batch = batch_of(corpus, qas, [kind] * len(qas), collator, rng, spec.mix, variants=True)
        loss = model(**batch).loss
        optimizer_step(optimizer, loss, clipped)
        steps += 1
        if kind is PromptKind.TRANSFER:
            losses.append(loss.item())
    bar.close()
    recent = losses[-20:]
    return {"steps": steps, "final_loss": round(sum(recent) / len(recent), 4) if recent else None}
