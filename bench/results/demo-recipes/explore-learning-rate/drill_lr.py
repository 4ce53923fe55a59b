"""Exploratory runs behind drill-*.json (not a recipe): how fast a fresh demo model learns the comparison
drill's verdict ("It asks about red; the image shows gray. They differ, ...") at a given learning rate.

    python drill_lr.py small 3e-3 1000 drill-small-3e-3.json
    python drill_lr.py small 1e-3 600 drill-small-1e-3.json
    python drill_lr.py large 2e-3 600 drill-large-2e-3.json
    python drill_lr.py large 1e-3 300 drill-large-1e-3.json

The drill alone, from the model's random initialisation: AdamW (weight decay 0.01), a constant
learning rate, the gradients clipped as in training; one torch thread. Every 50 steps the mean loss of
the last 50 and ``checked_verdict_accuracy`` (400 drill sentences drawn with seed 0).
"""

import json
import random
import sys
import time

import torch

from training.demo_data import facts_by_image, tokenizer_corpus
from training.demo_train import (
    DEMO_LARGE,
    DEMO_SMALL,
    checked_verdict_accuracy,
    drill_loss,
    load_questions,
    optimizer_step,
)
from training.tiny import build_model, build_tokenizer

name, learning_rate, steps, out = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
spec = DEMO_SMALL if name == "small" else DEMO_LARGE
qas, _ = load_questions()
tokenizer = build_tokenizer(tokenizer_corpus(qas, facts_by_image(qas)), normalize=True)
torch.manual_seed(spec.seed)
rng = random.Random(spec.seed)
model = build_model(spec.model, tokenizer, dtype="float32").train()
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.01)
started, losses, curve = time.time(), [], []
for step in range(steps):
    loss = drill_loss(model, tokenizer, rng)
    losses.append(loss.item())
    optimizer_step(optimizer, loss, list(model.parameters()))
    if (step + 1) % 50 == 0:
        curve.append(
            {
                "step": step + 1,
                "loss": round(sum(losses[-50:]) / 50, 4),
                "verdict_accuracy": checked_verdict_accuracy(model, tokenizer),
                "minutes": round((time.time() - started) / 60, 2),
            }
        )
        print(curve[-1], flush=True)
        record = {"model": name, "learning_rate": learning_rate, "argv": sys.argv[1:], "curve": curve}
        json.dump(record, open(out, "w"), indent=1)
