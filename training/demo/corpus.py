"""easy-vqa as the demo models train on it: the corpus (questions, what each image shows, the
processed images), the questions drawn for a batch, and the padded batches (``Collator``, ``batch_of``
for image questions, ``drill_batch`` for plain-text drill sentences)."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from harness.easy_vqa import (
    QA,
    BalancedYesNo,
    ImageFacts,
    facts_by_image,
    held_out_images,
    question_type,
)
from harness.phrasings import TRAINING, PhrasedQuestions
from serve_app.core.prompts import PromptKind
from training.demo.progress import progress_bar
from training.demo.recipes import DemoSpec
from training.demo_conversations import IMAGE, conversation_example, draw_record, record_images
from training.demo_data import Example, PromptMix, make_example

# What a training batch asks: an easy-vqa question about one image, or a ``harness.multi_turn`` record
# (a follow-up, or a question about two images).
Item = QA | dict


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


def example_of(
    corpus: Corpus, item: Item, kind: PromptKind, rng: random.Random, mix: PromptMix, *, variants: bool
) -> tuple[Example, list[int]]:
    """One training example of ``kind`` for ``item``, and the ids of its images in prompt order."""
    if isinstance(item, QA):
        facts = corpus.facts.get(item.image_id)
        # Without known facts there is no rationale to teach: such images give Simple examples only.
        kind = kind if facts else PromptKind.SIMPLE
        return make_example(IMAGE, item, facts, kind, rng, mix, variant=variants), [item.image_id]
    return conversation_example(item, corpus.facts, kind, rng, mix), record_images(item)


def with_pixels(corpus: Corpus, batch: dict, images: list[int]) -> dict:
    """``batch`` with the pixels of ``images`` (every example's, in prompt order) and their grids."""
    import torch

    batch["pixel_values"] = torch.cat([corpus.pixels[image] for image in images])
    batch["image_grid_thw"] = corpus.grid.repeat(len(images), 1)
    return batch


def batch_of(
    corpus: Corpus,
    items: list[Item],
    kinds: list[PromptKind],
    collator: Collator,
    rng: random.Random,
    mix: PromptMix,
    *,
    variants: bool = False,
) -> dict:
    examples, images = [], []
    for item, kind in zip(items, kinds, strict=True):
        example, shown = example_of(corpus, item, kind, rng, mix, variants=variants)
        examples.append(example)
        images += shown
    return with_pixels(corpus, collator(examples), images)


def question_drawer(corpus: Corpus, spec: DemoSpec, rng: random.Random) -> Callable[[], list[Item]]:
    """A function drawing the questions of one training batch, ``spec.batch_size`` of them."""
    # Questions are drawn type by type (spec.type_weights). Yes/no questions are generated balanced
    # (balanced_yes_no: as many yes as no for each question form and what it names): easy-vqa's own
    # are answered by the question text alone four times in five, and a model fed them learns to read
    # the question, not the image.
    by_type: dict[str, list[QA]] = defaultdict(list)
    for qa in corpus.train:
        by_type[question_type(qa.question, qa.answer)].append(qa)
    train_images = {qa.image_id for qa in corpus.train}
    train_yes_no = BalancedYesNo(corpus.facts, train_images)
    draw = [name for name, times in spec.type_weights for _ in range(times)]
    # People's phrasings, a share of the questions: the training templates only, never a held-out one.
    phrased = PhrasedQuestions(corpus.facts, train_images, TRAINING) if spec.phrased_share else None
    # Follow-ups and two-image questions, a share of the questions (harness.multi_turn's training forms).
    known = sorted(train_images & set(corpus.facts))

    def question() -> Item:
        if spec.conversation_share and rng.random() < spec.conversation_share:
            return draw_record(corpus.facts, known, rng)
        if phrased is not None and rng.random() < spec.phrased_share:
            return phrased.draw(rng)
        kind = rng.choice(draw)
        return train_yes_no.draw(rng) if kind == "yes/no" else rng.choice(by_type[kind])

    def batch_questions() -> list[Item]:
        return [question() for _ in range(spec.batch_size)]

    return batch_questions


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
