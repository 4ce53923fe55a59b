"""Train the two demo VLMs (tiny Qwen3-VL, from scratch) on easy-vqa, on CPU, in plain PyTorch.

Each model starts with its vision tower alone learning to tell the image's colour and shape (a linear
probe, dropped afterwards), then learns the server's prompts. The small and the large model differ the
way the paper's 2B and 8B do in size (the large one has about six times the parameters and a wider
vision tower, pretrained longer); the small one learns to reason (a short rationale grounded in what
it sees, then ``[[answer]]``) and the large one learns to answer with a smaller model's reasoning in
context (the reasoning-transfer prompts).

    mai-train-demo --out models            # writes models/demo-small and models/demo-large
    mai-train-demo --only demo-small --steps 200 --out /tmp/demo   # a quick look

The two models train side by side, each in its own process on its share of the cores (``--jobs 1``:
one after the other). Seeded and bounded: a fixed number of steps per model, stopped early (and said
so) at ``--max-minutes``. Each checkpoint's ``mai-demo.json`` reports its accuracy on validation
images: Simple, Reasoning and, for the large model, how it uses a reference reasoning. The trained
checkpoints are committed, so serving needs no training.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from harness.easy_vqa import (
    COLOURS,
    QA,
    SHAPES,
    BalancedYesNo,
    ImageFacts,
    answer_from_facts,
    display_question,
    facts_by_image,
    held_out_images,
    load_questions,
    question_type,
)
from serve_app.core.prompts import PromptKind
from training.demo_data import (
    Example,
    PromptMix,
    comparison_drill,
    make_example,
    misreading,
    reasoning_text,
    tokenizer_corpus,
    transfer_example,
)
from training.tiny import TinySpec, build_model, build_processor, build_tokenizer

# easy-vqa's 64x64 images are upscaled to 128x128 in the processor; the demo models' 8-pixel patches
# make that 16x16 patches, merged 2x2 into 64 image tokens. (Qwen3-VL's 16-pixel patches give 16
# tokens, and a tiny vision tower on them tells shapes apart barely above chance.)
IMAGE_PIXELS = 128 * 128


@dataclass(frozen=True)
class DemoSpec:
    model: TinySpec
    steps: int
    batch_size: int
    learning_rate: float
    mix: PromptMix
    seed: int
    # How many times each question type is in the draw (color, shape, yes/no); shapes are the hard part.
    type_weights: tuple[tuple[str, int], ...] = (("color", 1), ("shape", 1), ("yes/no", 1))
    # The first steps are Simple only: a one-token target whose only source is the image teaches the
    # vision tower to look before long, mostly predictable reasoning targets dilute that signal.
    simple_warmup_steps: int = 0
    # Before any text, the vision tower alone learns to tell colours and shapes apart (a linear probe
    # on its pooled output, dropped afterwards), the way a real VLM starts from a pretrained encoder:
    # through the language model's one-token answers a tiny tower learns shapes barely above chance.
    vision_pretrain_steps: int = 0
    # Then, before any image, the language model alone learns the Reasoning steps of yes/no
    # questions from text (text_reasoning_steps): the value asked and the value seen side by side and
    # whether they match. Text-only steps cost half an image step, and the comparison takes a
    # thousand steps or more before it clicks; afterwards the image steps only have to fill in what
    # is seen.
    text_reasoning_steps: int = 0
    # First of all, the language model drills the one step that decides a yes/no question on its
    # own: "It asks about red; the image shows gray. They differ, ..." (comparison_drill_steps, in
    # plain text, COMPARISON_DRILL_BATCH sentences a step, the verdict onwards labelled). Inside whole
    # examples the verdict is one token in a hundred and a 2-layer model stayed at chance on it for
    # 1,800 steps; drilled alone it is learnt in 150 to 300 steps of about 0.13 s.
    comparison_drill_steps: int = 0
    # During the image steps, one drill step after every drill_every-th (0: none): drilled only
    # beforehand, the verdict was forgotten by the end of the image steps (54 % inside generated
    # rationales, 13 % on the drill itself, after 100 % when the drill ended).
    drill_every: int = 0
    # Last, transfer_steps batches of reasoning transfer (every fourth a Simple batch, so the short
    # answer is kept) at a constant transfer_learning_rate. Drawn among the other kinds, half of 700
    # batches at the cosine schedule, transfer examples left the large model at chance with the
    # reference on yes/no (it followed a wrong reference as often as a right one); after 150 steps
    # of this phase at 1e-3 it takes the reference's verdict about three times in four and still
    # answers colour and shape from the image (experiments/demo-recipes/v10-transfer-phase/).
    transfer_steps: int = 0
    transfer_learning_rate: float = 1e-3

    def __post_init__(self):
        unknown = {name for name, _ in self.type_weights} - {"color", "shape", "yes/no"}
        if unknown or any(times < 1 for _, times in self.type_weights):
            raise ValueError(
                f"type_weights names color, shape and yes/no, each at least once: {self.type_weights}"
            )
        for name in (
            "simple_warmup_steps",
            "vision_pretrain_steps",
            "text_reasoning_steps",
            "comparison_drill_steps",
            "drill_every",
            "transfer_steps",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be 0 or more, got {getattr(self, name)}")

    def prompt_kind(self, step: int, rng: random.Random) -> PromptKind:
        """The prompt kind of the batch at ``step``: Simple during the warm-up, then drawn from the mix."""
        return PromptKind.SIMPLE if step < self.simple_warmup_steps else self.mix.draw(rng)


DEMO_SMALL = DemoSpec(
    TinySpec("demo-small", 128, 256, 2, 2, 1, 2, 32, seed=2, patch_size=8),
    steps=1800,
    batch_size=32,
    # At 3e-3 the 2-layer model never learnt the comparison drill's verdict (chance for 1,000 drill
    # steps); at 1e-3 it does by step 250-450 (experiments/demo-recipes/explore-learning-rate/).
    learning_rate=1e-3,
    mix=PromptMix(simple=0.4, reasoning=0.5, stage2=0.1, transfer=0.0),
    seed=11,
    type_weights=(("color", 1), ("shape", 1), ("yes/no", 2)),
    simple_warmup_steps=300,
    vision_pretrain_steps=1000,
    comparison_drill_steps=600,
    drill_every=3,
    text_reasoning_steps=1000,
)
DEMO_LARGE = DemoSpec(
    TinySpec("demo-large", 256, 512, 4, 4, 2, 2, 64, seed=8, patch_size=8),
    steps=700,
    batch_size=32,
    learning_rate=2e-3,
    # With transfer at 0.3, and at 0.5, of the drawn batches the large model ignored the reference
    # reasoning on yes/no (experiments/demo-recipes/v9-transfer-half/): transfer_steps teaches it.
    mix=PromptMix(simple=0.4, reasoning=0.1, stage2=0.0, transfer=0.5),
    seed=13,
    transfer_steps=150,
    simple_warmup_steps=200,
    vision_pretrain_steps=1500,
    comparison_drill_steps=600,
)
SPECS = {spec.model.name: spec for spec in (DEMO_SMALL, DEMO_LARGE)}


# Sentences per comparison drill step (they are about 20 tokens long), and drawn to check it.
COMPARISON_DRILL_BATCH = 128
COMPARISON_DRILL_CHECKED = 400

# Validation questions whose Reasoning answer is generated for the training report (generation is
# slow: about a minute for the small model).
REASONING_CHECKED = 200
# Validation questions of each group (balanced yes/no; colour and shape) for the transfer check.
TRANSFER_CHECKED = 200


# The terminal line of this process's progress bars: models trained side by side each keep one.
BAR_LINE = 0


def progress_bar(iterable, *, enabled: bool, **options):
    """A tqdm bar on stderr, on this process's line."""
    from tqdm import tqdm

    return tqdm(iterable, disable=not enabled, file=sys.stderr, position=BAR_LINE, **options)


@dataclass
class Corpus:
    """easy-vqa's train split: questions, what each image shows, and the processed images."""

    train: list[QA]
    validation: list[QA]
    facts: dict[int, ImageFacts]
    pixels: dict[int, object]  # image id -> tensor of patches
    grid: object  # the (1, 3) image_grid_thw every image shares


def load_corpus(
    processor,
    qas: list[QA],
    paths: list[str],
    *,
    held_out: set[int] | None = None,
    progress: bool = True,
) -> Corpus:
    import torch
    from PIL import Image

    facts = facts_by_image(qas)
    image_ids = sorted({qa.image_id for qa in qas})
    held_out = held_out_images(image_ids) if held_out is None else held_out
    pixels, grid = {}, None
    for image_id in progress_bar(image_ids, enabled=progress, desc="images", unit="img"):
        with Image.open(paths[image_id]) as image:
            batch = processor.image_processor(images=[image.convert("RGB")], return_tensors="pt")
        pixels[image_id] = batch["pixel_values"].to(torch.float32)
        grid = batch["image_grid_thw"] if grid is None else grid
    return Corpus(
        train=[qa for qa in qas if qa.image_id not in held_out],
        validation=[qa for qa in qas if qa.image_id in held_out],
        facts=facts,
        pixels=pixels,
        grid=grid,
    )


class Collator:
    """Examples -> a padded batch: input ids, attention mask, labels on the target only."""

    def __init__(self, tokenizer, image_tokens: int):
        self.tokenizer = tokenizer
        self.image_tokens = image_tokens
        self.image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
        self.end = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.pad = tokenizer.pad_token_id

    def ids(self, example: Example) -> tuple[list[int], list[int]]:
        prompt = self.tokenizer.apply_chat_template(
            example.messages, tokenize=False, add_generation_prompt=True
        )
        prompt = prompt.replace("<|image_pad|>", "<|image_pad|>" * self.image_tokens)
        prompt_ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        target_ids = self.tokenizer(example.target, add_special_tokens=False)["input_ids"] + [self.end]
        return prompt_ids, target_ids

    def __call__(self, examples: list[Example]) -> dict:
        import torch

        pairs = [self.ids(example) for example in examples]
        width = max(len(p) + len(t) for p, t in pairs)
        input_ids = torch.full((len(pairs), width), self.pad, dtype=torch.long)
        labels = torch.full((len(pairs), width), -100, dtype=torch.long)
        mask = torch.zeros((len(pairs), width), dtype=torch.long)
        for row, (prompt, target) in enumerate(pairs):
            sequence = prompt + target
            input_ids[row, : len(sequence)] = torch.tensor(sequence)
            labels[row, len(prompt) : len(sequence)] = torch.tensor(target)
            mask[row, : len(sequence)] = 1
        return {
            "input_ids": input_ids,
            "attention_mask": mask,
            "labels": labels,
            "mm_token_type_ids": (input_ids == self.image_pad).long(),
        }


def batch_of(
    corpus: Corpus,
    qas: list[QA],
    kinds: list[PromptKind],
    collator: Collator,
    rng: random.Random,
    mix: PromptMix,
    *,
    variants: bool = False,
) -> dict:
    import torch

    examples = []
    for qa, kind in zip(qas, kinds, strict=True):
        facts = corpus.facts.get(qa.image_id)
        # Without known facts there is no rationale to teach: such images give Simple examples only.
        kind = kind if facts else PromptKind.SIMPLE
        examples.append(make_example("image", qa, facts, kind, rng, mix, variant=variants))
    batch = collator(examples)
    batch["pixel_values"] = torch.cat([corpus.pixels[qa.image_id] for qa in qas])
    batch["image_grid_thw"] = corpus.grid.repeat(len(qas), 1)
    return batch


def greedy_matches(
    model, corpus: Corpus, collator: Collator, qas: list[QA], examples: list[Example]
) -> list[bool]:
    """For each example (about the image of the ``qas`` at its index), whether greedy decoding would
    write its target: under teacher forcing, every target token is the argmax."""
    import torch

    batch = collator(examples)
    batch["pixel_values"] = torch.cat([corpus.pixels[qa.image_id] for qa in qas])
    batch["image_grid_thw"] = corpus.grid.repeat(len(qas), 1)
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


def drill_batch(tokenizer, sentences: list[tuple[str, str]]) -> tuple[dict, list[int]]:
    """Plain-text sentences (no chat template) as a padded batch whose labels are the verdict and
    what follows from it (the values before it are drawn at random: with them as labels too the drill
    stayed at chance for 1,500 steps in one run of two), and where each one's verdict token is."""
    import torch

    encoded = [tokenizer(whole, add_special_tokens=False)["input_ids"] for _, whole in sentences]
    verdicts = [len(tokenizer(prefix, add_special_tokens=False)["input_ids"]) for prefix, _ in sentences]
    width = max(map(len, encoded))
    input_ids = torch.full((len(encoded), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(encoded), width), -100, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, verdicts[row] : len(ids)] = torch.tensor(ids[verdicts[row] :])
        mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}, verdicts


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


def learning_rate(step: int, spec: DemoSpec) -> float:
    """Linear warm-up over the first 5 % of steps, then cosine down to a tenth."""
    warmup = max(1, spec.steps // 20)
    if step < warmup:
        return spec.learning_rate * (step + 1) / warmup
    progress = (step - warmup) / max(1, spec.steps - warmup)
    return spec.learning_rate * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def train(
    spec: DemoSpec,
    corpus: Corpus,
    tokenizer,
    processor,
    out_dir: Path,
    *,
    max_minutes: float,
    progress: bool = True,
) -> dict:
    import torch

    torch.manual_seed(spec.seed)
    rng = random.Random(spec.seed)
    model = build_model(spec.model, tokenizer, dtype="float32").train()
    collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.01)
    clipped = list(model.parameters())  # every step clips the gradients of all of them
    parameters = sum(p.numel() for p in clipped)
    validation = random.Random(0).sample(corpus.validation, min(400, len(corpus.validation)))
    validation_images = sorted({qa.image_id for qa in corpus.validation} & set(corpus.facts))
    balanced_rng = random.Random(1)
    validation_yes_no = BalancedYesNo(corpus.facts, validation_images)
    validation_balanced = [validation_yes_no.draw(balanced_rng) for _ in range(400)]
    # Questions are drawn type by type (spec.type_weights). Yes/no questions are generated balanced
    # (balanced_yes_no: as many yes as no for each question form and what it names): easy-vqa's own
    # are answered by the question text alone four times in five, and a model fed them learns to read
    # the question, not the image.
    by_type: dict[str, list[QA]] = defaultdict(list)
    for qa in corpus.train:
        by_type[question_type(qa.question, qa.answer)].append(qa)
    train_yes_no = BalancedYesNo(corpus.facts, {qa.image_id for qa in corpus.train})
    draw = [name for name, times in spec.type_weights for _ in range(times)]

    def question(kind: str) -> QA:
        return train_yes_no.draw(rng) if kind == "yes/no" else rng.choice(by_type[kind])

    def batch_questions() -> list[QA]:
        return [question(rng.choice(draw)) for _ in range(spec.batch_size)]

    started = time.monotonic()
    vision = pretrain_vision(model, corpus, spec, rng, deadline=started + max_minutes * 60, progress=progress)
    drill = drill_comparison(
        model, tokenizer, spec, rng, deadline=started + max_minutes * 60, progress=progress
    )
    text = pretrain_text_reasoning(
        model, corpus, collator, spec, rng, deadline=started + max_minutes * 60, progress=progress
    )
    stopped_early = (
        vision["steps"] < spec.vision_pretrain_steps
        or drill["steps"] < spec.comparison_drill_steps
        or text["steps"] < spec.text_reasoning_steps
    )
    steps_done, loss_ema = 0, None
    bar = progress_bar(
        range(spec.steps), enabled=progress, desc=f"{spec.model.name} ({parameters / 1e6:.1f} M)", unit="step"
    )
    for step in bar:
        if stopped_early or time.monotonic() - started > max_minutes * 60:
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
    transfer_phase = (
        {"steps": 0, "final_loss": None}
        if stopped_early
        else transfer_training(
            model,
            corpus,
            collator,
            spec,
            batch_questions,
            rng,
            optimizer,
            clipped,
            deadline=started + max_minutes * 60,
            progress=progress,
        )
    )
    stopped_early = stopped_early or transfer_phase["steps"] < spec.transfer_steps
    if stopped_early:
        print(
            f"{spec.model.name}: stopped at --max-minutes {max_minutes} after {vision['steps']} of "
            f"{spec.vision_pretrain_steps} vision steps, {drill['steps']} of {spec.comparison_drill_steps} "
            f"drill steps, {text['steps']} of {spec.text_reasoning_steps} text reasoning steps and "
            f"{steps_done} of {spec.steps} steps, {transfer_phase['steps']} of {spec.transfer_steps} "
            "transfer steps",
            file=sys.stderr,
        )
    drill["verdict_accuracy_at_end"] = checked_verdict_accuracy(model, tokenizer)
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
    target = out_dir / spec.model.name
    target.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(target)
    processor.save_pretrained(target)
    report = {
        "spec": asdict(spec),
        "parameters": parameters,
        "steps": steps_done,
        "stopped_early": stopped_early,
        "vision_pretraining": vision,
        "comparison_drill": drill,
        "text_reasoning": text,
        "transfer_phase": transfer_phase,
        "minutes": round((time.monotonic() - started) / 60, 2),
        "final_loss": round(loss_ema or 0.0, 4),
        "validation_simple_accuracy": {k: round(v, 3) for k, v in accuracy.items()},
        "validation_questions": len(validation),
        "validation_reasoning_accuracy": reasoning,
        "validation_transfer": transfer,
        "data": "easy-vqa train split (validation: the committed held-out images); yes/no generated balanced",
    }
    (target / "mai-demo.json").write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"{target}: {parameters / 1e6:.2f} M parameters, {steps_done} steps, Simple accuracy on held-out "
        f"train images {accuracy['all']:.1%} "
        f"({', '.join(f'{k} {v:.0%}' for k, v in accuracy.items() if k != 'all')})",
        file=sys.stderr,
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=Path("models"), help="folder for the checkpoints (default: models)"
    )
    parser.add_argument(
        "--only", choices=sorted(SPECS), action="append", help="train only this model (repeatable)"
    )
    parser.add_argument("--steps", type=int, help="override the number of steps (for a quick look)")
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=45.0,
        help="stop a model's training after this long (default: 45)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="models trained side by side, each in its own process with its share of the cores "
        "(default: one per model, up to the number of cores)",
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads per model (default: the cores over --jobs)"
    )
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    for option in ("jobs", "threads"):
        if getattr(args, option) is not None and getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1")
    try:
        import easy_vqa  # noqa: F401
        import torch  # noqa: F401
    except ImportError as error:
        parser.error(f"{error.name} is missing: install the project with its eval extra (make install)")
    names = list(dict.fromkeys(args.only or SPECS))
    jobs, threads = side_by_side(len(names), os.cpu_count() or 1, jobs=args.jobs, threads=args.threads)
    specs = [SPECS[name] if args.steps is None else replace(SPECS[name], steps=args.steps) for name in names]
    if jobs == 1:
        for spec in specs:
            train_one(spec, args.out, args.max_minutes, threads)
        return 0
    print(
        f"training {', '.join(names)} side by side: {jobs} processes of {threads} thread(s)", file=sys.stderr
    )
    context = multiprocessing.get_context("spawn")  # torch and fork do not mix
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        running = [
            pool.submit(train_one, spec, args.out, args.max_minutes, threads, line)
            for line, spec in enumerate(specs)
        ]
        for future in running:
            future.result()
    return 0


def side_by_side(models: int, cores: int, *, jobs: int | None, threads: int | None) -> tuple[int, int]:
    """How many models train at once and on how many torch threads each: by default one process per
    model up to the cores, and the cores shared among them (the tiny models gain little from a second
    thread, so two models side by side take about as long as the slower one alone)."""
    jobs = min(jobs or cores, models)
    return jobs, threads or max(1, cores // jobs)


def train_one(spec: DemoSpec, out_dir: Path, max_minutes: float, threads: int, bar_line: int = 0) -> dict:
    """Load easy-vqa and train ``spec``'s model on ``threads`` torch threads, the progress bars on
    terminal line ``bar_line``: the whole of one model's training, in whatever process runs it."""
    import torch

    global BAR_LINE
    BAR_LINE = bar_line
    torch.set_num_threads(threads)
    qas, paths = load_questions()
    # Built from the same text the same way, every model's tokenizer is the same.
    tokenizer = build_tokenizer(tokenizer_corpus(qas, facts_by_image(qas)), normalize=True)
    processor = build_processor(
        tokenizer, min_pixels=IMAGE_PIXELS, max_pixels=IMAGE_PIXELS, patch_size=spec.model.patch_size
    )
    corpus = load_corpus(processor, qas, paths)
    print(
        f"{spec.model.name}: easy-vqa train: {len(corpus.train)} questions for training, "
        f"{len(corpus.validation)} held out; {len(corpus.facts)} of {len(corpus.pixels)} images with a "
        "known colour and shape",
        file=sys.stderr,
    )
    return train(spec, corpus, tokenizer, processor, out_dir, max_minutes=max_minutes)


if __name__ == "__main__":
    raise SystemExit(main())
