"""One demo model's whole training: its phases in order within a time budget, then the checkpoint and
its report (``mai-demo.json``)."""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path

from training.demo.corpus import Collator, Corpus, question_drawer
from training.demo.phases import (
    drill_comparison,
    image_steps,
    pretrain_text_reasoning,
    pretrain_vision,
    transfer_training,
)
from training.demo.recipes import DemoSpec
from training.demo.validation import ValidationQuestions, checked_verdict_accuracy, validate
from training.demo_data import DEMO_LAYOUT
from training.tiny import build_model


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
    """Train ``spec``'s model from scratch on ``corpus``, phase by phase, stopping early (and saying so)
    at ``max_minutes``; write the checkpoint and its report to ``out_dir``/<model name> and return the
    report."""
    import torch

    torch.manual_seed(spec.seed)
    rng = random.Random(spec.seed)
    model = build_model(spec.model, tokenizer, dtype="float32").train()
    collator = Collator(tokenizer, image_tokens=int(corpus.grid.prod()) // 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.learning_rate, weight_decay=0.01)
    clipped = list(model.parameters())  # every step clips the gradients of all of them
    parameters = sum(p.numel() for p in clipped)
    validation = ValidationQuestions.of(corpus)
    batch_questions = question_drawer(corpus, spec, rng)

    started = time.monotonic()
    deadline = started + max_minutes * 60
    vision = pretrain_vision(model, corpus, spec, rng, deadline=deadline, progress=progress)
    drill = drill_comparison(model, tokenizer, spec, rng, deadline=deadline, progress=progress)
    text = pretrain_text_reasoning(model, corpus, collator, spec, rng, deadline=deadline, progress=progress)
    main = image_steps(
        model,
        tokenizer,
        corpus,
        collator,
        spec,
        batch_questions,
        rng,
        optimizer,
        clipped,
        validation=validation.sample,
        stopped_early=(
            vision["steps"] < spec.vision_pretrain_steps
            or drill["steps"] < spec.comparison_drill_steps
            or text["steps"] < spec.text_reasoning_steps
        ),
        deadline=deadline,
        progress=progress,
    )
    transfer_phase = (
        {"steps": 0, "final_loss": None}
        if main.stopped_early
        else transfer_training(
            model,
            corpus,
            collator,
            spec,
            batch_questions,
            rng,
            optimizer,
            clipped,
            deadline=deadline,
            progress=progress,
        )
    )
    stopped_early = main.stopped_early or transfer_phase["steps"] < spec.transfer_steps
    if stopped_early:
        print(
            f"{spec.model.name}: stopped at --max-minutes {max_minutes} after {vision['steps']} of "
            f"{spec.vision_pretrain_steps} vision steps, {drill['steps']} of {spec.comparison_drill_steps} "
            f"drill steps, {text['steps']} of {spec.text_reasoning_steps} text reasoning steps and "
            f"{main.steps} of {spec.steps} steps, {transfer_phase['steps']} of {spec.transfer_steps} "
            "transfer steps",
            file=sys.stderr,
        )
    drill["verdict_accuracy_at_end"] = checked_verdict_accuracy(model, tokenizer)
    results = validate(model, corpus, collator, spec, validation)
    target = out_dir / spec.model.name
    target.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(target)
    processor.save_pretrained(target)
    report = {
        "spec": asdict(spec),
        "parameters": parameters,
        "steps": main.steps,
        "stopped_early": stopped_early,
        "vision_pretraining": vision,
        "comparison_drill": drill,
        "text_reasoning": text,
        "transfer_phase": transfer_phase,
        "minutes": round((time.monotonic() - started) / 60, 2),
        "final_loss": round(main.loss_ema or 0.0, 4),
        "validation_simple_accuracy": {k: round(v, 3) for k, v in results.simple.items()},
        "validation_questions": len(validation.sample),
        "validation_reasoning_accuracy": results.reasoning,
        "validation_transfer": results.transfer,
        "validation_phrased_simple_accuracy": results.phrased,
        "validation_phrased_questions": len(validation.phrased),
        "validation_conversation_simple_accuracy": results.conversations,
        "validation_conversation_questions": len(validation.conversations),
        # The prompt layout the model learnt: configs/mai-cpu.yaml must declare it (prompt_layout).
        "prompt_layout": DEMO_LAYOUT.value,
        "data": "easy-vqa train split (validation: the committed held-out images); yes/no generated "
        f"balanced; a share of {spec.phrased_share} of the questions in people's phrasings "
        "(harness.phrasings, training templates only); a share of "
        f"{spec.conversation_share} follow-ups and two-image questions (harness.multi_turn, training "
        "forms only)",
    }
    (target / "mai-demo.json").write_text(json.dumps(report, indent=2) + "\n")
    accuracy = results.simple
    print(
        f"{target}: {parameters / 1e6:.2f} M parameters, {main.steps} steps, Simple accuracy on held-out "
        f"train images {accuracy['all']:.1%} "
        f"({', '.join(f'{k} {v:.0%}' for k, v in accuracy.items() if k != 'all')})",
        file=sys.stderr,
    )
    return report
