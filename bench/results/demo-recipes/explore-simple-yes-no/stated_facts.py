"""Exploratory runs behind stated-facts.json (not a recipe): can a demo model's Simple answer compare the
colour or shape a yes/no question names with what the image shows, when that is written in the
question itself ("it is a blue circle. is there a red shape?")?

    python stated_facts.py small image-decay 800 OUT.json   # stopped after 500
    python stated_facts.py small image-half 800 OUT.json    # stopped after 500
    python stated_facts.py small text 600 OUT.json
    python stated_facts.py small text 600 OUT.json --plain
    python stated_facts.py large text 600 OUT.json --plain  # stopped after 300
    python stated_facts.py small text-echo 800 OUT.json --plain  # stopped after 700
    python stated_facts.py small image-echo 500 OUT.json --plain

image-*: the model's vision pretraining, then Simple steps of 32 (a third colour and shape questions,
the rest balanced yes/no, the facts stated in the question half the time (image-half) or always at
first and less and less (image-decay)). text: Simple steps of 128 balanced yes/no questions with the
facts stated and no image. text-echo: as text, half the questions prefixed "name it." and answered
with the colour or shape they name (the echo), so that value is brought to the answer's position.
image-echo: the vision pretraining, then Simple steps of 32 (a third colour and shape questions, a
third the echo about the image, a third balanced yes/no without stated facts), and after every
second one a text-echo step of 128. --plain: no negated question forms. One torch thread; every 100 steps the
greedy Simple accuracy on 400 balanced yes/no questions about the validation images.
"""

import json
import random
import sys
import time
from collections import defaultdict

import torch

import training.demo_data as demo_data
from serve_app.prompts import PromptKind
from training.demo_data import (
    QA,
    BalancedYesNo,
    PromptMix,
    facts_by_image,
    make_example,
    question_type,
    tokenizer_corpus,
)
from training.demo_train import (
    DEMO_LARGE,
    DEMO_SMALL,
    IMAGE_PIXELS,
    Collator,
    batch_of,
    load_corpus,
    load_questions,
    optimizer_step,
    pretrain_vision,
    simple_accuracy,
)
from training.tiny import build_model, build_processor, build_tokenizer

name, mode, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
if "--plain" in sys.argv:
    demo_data.YES_NO_FORMS = demo_data.YES_NO_FORMS[:4]
torch.set_num_threads(1)
spec = DEMO_SMALL if name == "small" else DEMO_LARGE
qas, paths = load_questions()
tokenizer = build_tokenizer(tokenizer_corpus(qas, facts_by_image(qas)), normalize=True)
processor = build_processor(tokenizer, min_pixels=IMAGE_PIXELS, max_pixels=IMAGE_PIXELS, patch_size=8)
corpus = load_corpus(processor, qas, paths, progress=False)
torch.manual_seed(spec.seed)
rng = random.Random(spec.seed)
model = build_model(spec.model, tokenizer, dtype="float32").train()
collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
started = time.time()
mix = PromptMix(1, 0, 0, 0)
validation_images = sorted({qa.image_id for qa in corpus.validation} & set(corpus.facts))
validation_draw, draw_rng = BalancedYesNo(corpus.facts, validation_images), random.Random(1)
validation = [validation_draw.draw(draw_rng) for _ in range(400)]
train_draw = BalancedYesNo(corpus.facts, {qa.image_id for qa in corpus.train})


def stated(qa: QA) -> QA:
    facts = corpus.facts[qa.image_id]
    return QA(qa.image_id, f"it is a {facts.colour} {facts.shape}. {qa.question}", qa.answer)


def text_batch(questions):
    examples = [
        make_example(None, qa, corpus.facts[qa.image_id], PromptKind.SIMPLE, rng, mix, variant=True)
        for qa in questions
    ]
    batch = collator(examples)
    batch.pop("mm_token_type_ids")
    return batch


def text_accuracy(questions) -> float:
    model.eval()
    right = 0
    with torch.no_grad():
        for start in range(0, len(questions), 100):
            batch = text_batch(questions[start : start + 100])
            labels = batch.pop("labels")
            predicted, wanted = model(**batch).logits[:, :-1].argmax(-1), labels[:, 1:]
            right += ((predicted == wanted) | (wanted == -100)).all(-1).sum().item()
    model.train()
    return right / len(questions)


curve = []
optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.01)


def step_on(batch) -> float:
    loss = model(**batch).loss
    optimizer_step(optimizer, loss, list(model.parameters()))
    return loss.item()


def start_image_run() -> tuple[dict, list[QA]]:
    """The vision pretraining (recorded), then easy-vqa's train questions by type and 200 colour and
    shape questions about the validation images."""
    record(
        {
            "vision": pretrain_vision(
                model, corpus, spec, rng, deadline=time.monotonic() + 3600, progress=False
            )
        }
    )
    by_type = defaultdict(list)
    for qa in corpus.train:
        by_type[question_type(qa.question, qa.answer)].append(qa)
    colour_shape = [
        qa for qa in random.Random(0).sample(corpus.validation, 600) if qa.answer not in ("yes", "no")
    ][:200]
    return by_type, colour_shape


def record(row: dict) -> None:
    row["minutes"] = round((time.time() - started) / 60, 1)
    curve.append(row)
    print(row, flush=True)
    json.dump({"model": name, "mode": mode, "argv": sys.argv[1:], "curve": curve}, open(out, "w"), indent=1)


losses = []


def echo(qa: QA) -> QA:
    named = demo_data._mentioned(qa.question, demo_data.COLOURS + demo_data.SHAPES)
    return QA(qa.image_id, f"name it. {qa.question}", named)


if mode == "text-echo":
    stated_validation = [stated(qa) for qa in validation]
    echo_validation = [echo(qa) for qa in validation]
    for step in range(steps):
        questions = [train_draw.draw(rng) for _ in range(128)]
        questions = [stated(qa) if i % 2 else echo(qa) for i, qa in enumerate(questions)]
        losses.append(step_on(text_batch(questions)))
        if (step + 1) % 100 == 0:
            record(
                {
                    "step": step + 1,
                    "loss": round(sum(losses[-100:]) / 100, 3),
                    "stated_text": text_accuracy(stated_validation),
                    "echo": text_accuracy(echo_validation),
                }
            )
elif mode == "image-echo":
    by_type, colour_shape = start_image_run()
    stated_validation = [stated(qa) for qa in validation]
    for step in range(steps):
        questions = []
        for _ in range(spec.batch_size):
            r = rng.random()
            if r < 1 / 3:
                questions.append(rng.choice(by_type[rng.choice(["color", "shape"])]))
            elif r < 2 / 3:
                questions.append(echo(train_draw.draw(rng)))
            else:
                questions.append(train_draw.draw(rng))
        batch = batch_of(
            corpus, questions, [PromptKind.SIMPLE] * len(questions), collator, rng, mix, variants=True
        )
        losses.append(step_on(batch))
        if step % 2 == 0:
            text = [train_draw.draw(rng) for _ in range(128)]
            step_on(text_batch([stated(qa) if i % 2 else echo(qa) for i, qa in enumerate(text)]))
        if (step + 1) % 100 == 0:
            record(
                {
                    "step": step + 1,
                    "loss": round(sum(losses[-100:]) / 100, 3),
                    "balanced": round(simple_accuracy(model, corpus, collator, validation)["all"], 3),
                    "stated_text": text_accuracy(stated_validation),
                    "color_shape": {
                        k: round(v, 3)
                        for k, v in simple_accuracy(model, corpus, collator, colour_shape).items()
                    },
                }
            )
elif mode == "text":
    stated_validation = [stated(qa) for qa in validation]
    for step in range(steps):
        losses.append(step_on(text_batch([stated(train_draw.draw(rng)) for _ in range(128)])))
        if (step + 1) % 100 == 0:
            record(
                {
                    "step": step + 1,
                    "loss": round(sum(losses[-100:]) / 100, 3),
                    "stated_text": text_accuracy(stated_validation),
                }
            )
else:
    by_type, colour_shape = start_image_run()
    for step in range(steps):
        share = (
            0.5
            if mode == "image-half"
            else (1.0 if step < 150 else max(0.0, 1 - (step - 150) / (0.75 * steps - 150)))
        )
        questions = []
        for _ in range(spec.batch_size):
            if rng.random() < 1 / 3:
                questions.append(rng.choice(by_type[rng.choice(["color", "shape"])]))
            else:
                qa = train_draw.draw(rng)
                questions.append(stated(qa) if rng.random() < share else qa)
        batch = batch_of(
            corpus, questions, [PromptKind.SIMPLE] * len(questions), collator, rng, mix, variants=True
        )
        losses.append(step_on(batch))
        if (step + 1) % 100 == 0:
            record(
                {
                    "step": step + 1,
                    "stated_share": round(share, 2),
                    "loss": round(sum(losses[-100:]) / 100, 3),
                    "balanced": round(simple_accuracy(model, corpus, collator, validation)["all"], 3),
                    "balanced_stated": round(
                        simple_accuracy(model, corpus, collator, [stated(qa) for qa in validation])["all"], 3
                    ),
                    "color_shape": {
                        k: round(v, 3)
                        for k, v in simple_accuracy(model, corpus, collator, colour_shape).items()
                    },
                }
            )
