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
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from harness.easy_vqa import facts_by_image, load_questions
from training.demo.corpus import load_corpus
from training.demo.progress import bars_on_line
from training.demo.recipes import IMAGE_PIXELS, SPECS, DemoSpec
from training.demo.trainer import train
from training.demo_data import tokenizer_corpus
from training.tiny import build_processor, build_tokenizer


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
        default=75.0,
        help="stop a model's training after this long (default: 75; the large model takes about 50 "
        "minutes on 2 cores beside the small one)",
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

    torch.set_num_threads(threads)
    with bars_on_line(bar_line):
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
