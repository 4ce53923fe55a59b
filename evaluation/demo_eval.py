"""The demo models on the CPU stack: every policy on easy-vqa's test split, the model card's table.

    python -m evaluation.demo_eval                       # make eval-demo: serves configs/mai-cpu.yaml itself
    python -m evaluation.demo_eval --url http://127.0.0.1:8000   # against a server already running it
    python -m evaluation.demo_eval --calibrate           # make calibrate-demo: thresholds, validation split
    python -m evaluation.demo_eval --calibrate --replay-only   # the same, replayed over the recorded pass
    python -m evaluation.demo_eval --either-or           # either/or questions: which prompt they get

It runs ``mai-eval run`` with every policy, ``mai`` under the served config and under the paper's rule
side by side (predictions resume, so an interrupted run goes on where it stopped), then writes
``bench/results/demo-eval/demo.md`` and ``demo.json``: accuracy with its 95 % interval and by question
type next to the question-only baseline (the most common training answer to the same question text, no
image), route shares, tokens, latency, and what reasoning transfer did on the questions where the
cascade escalated. ``--calibrate`` runs ``mai-eval calibrate`` on easy-vqa's validation split (train
images the models never saw; never the test split) into ``bench/results/demo-calibration/``. Every
result file names this command and the commit under ``meta``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from harness.paths import DATASETS, DEMO_CALIBRATION, DEMO_EVAL, RESULTS
from harness.provenance import provenance

from .demo_summary import COMMAND, POLICY_ORDER, RUN_NAMES, compact_rows, write_tables
from .passes import calibrate_pass, command_line, guarded, run_eval
from .run import DriveSettings, RunSpec

PROGRAM = "python -m evaluation.demo_eval"
TYPED_POLICIES = ("mai-small", "mai-large")
EITHER_OR_POLICIES = ("mai", "mai-small", "mai-large")
BALANCED_QUESTIONS = 500
EITHER_OR = RESULTS / "either-or"


def typed_records(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The easy-vqa questions of ``records`` in two more forms: easy-vqa's own lower case, and as
    typed (``question_variant``, seeded per question); ids ``<id>|lower`` and ``<id>|typed``."""
    import random

    from harness.easy_vqa import question_variant

    out = []
    for record in records:
        if "balanced" in record["id"]:
            continue
        rng = random.Random(record["id"])
        out.append(record | {"id": f"{record['id']}|lower", "question": record["question"].lower()})
        out.append(
            record | {"id": f"{record['id']}|typed", "question": question_variant(record["question"], rng)}
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url", default=None, help="a server already running configs/mai-cpu.yaml (default: start one here)"
    )
    parser.add_argument(
        "--limit", type=int, default=1000, help="easy-vqa test questions, a seeded sample (default 1000)"
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="fit the verification thresholds on the validation split (bench/results/demo-calibration)",
    )
    parser.add_argument(
        "--calibration-questions",
        type=int,
        default=2000,
        help="easy-vqa validation questions --calibrate uses, a seeded sample (default 2000 of about 3,900), "
        "with half as many balanced yes/no questions on the same images",
    )
    parser.add_argument(
        "--either-or",
        action="store_true",
        help="the prompt either/or questions get, on the validation split: asked as written (the "
        "short-answer prompt) against the same options sent as choices (the option-letter prompt), "
        "into bench/results/either-or",
    )
    parser.add_argument(
        "--replay-only",
        action="store_true",
        help="with --calibrate: no server, replay the pass already recorded in the calibration folder",
    )
    parser.add_argument(
        "--table",
        action="store_true",
        help="re-derive demo.md and demo.json from the committed predictions.jsonl in --out (no server)",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=DEMO_EVAL)
    parser.add_argument("--fresh", action="store_true", help="discard earlier predictions in --out")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    command = command_line(PROGRAM, sys.argv[1:] if argv is None else argv)
    started = time.time()
    from harness.jsonl import read_jsonl, write_jsonl

    if args.table:
        path = args.out / "predictions.jsonl"
        if not path.exists():
            parser.error(f"{path} does not exist: run `{COMMAND}` first")
        [head, *rows] = read_jsonl(path)
        print(write_tables(args.out, head["meta"], rows, provenance(command)))
        return 0
    from harness.datasets import easy_vqa_balanced_records, easy_vqa_either_or_records, easy_vqa_records
    from harness.local_server import config_args

    # What every pass shares: the settings mai-eval's flags default to, the command, and the config
    # when the server is the one started here.
    settings = DriveSettings(concurrency=args.concurrency, api_key=os.environ.get("MAI_API_KEY"))
    config = None if args.url else "mai-cpu.yaml"
    common: dict[str, Any] = {"command": command, "settings": settings, "fresh": args.fresh}
    if args.either_or:
        passes = []
        for name, with_choices in (("named", False), ("choices", True)):
            data = DATASETS / f"easy-vqa-validation-either-or-{name}-200.jsonl"
            if not data.exists():
                write_jsonl(easy_vqa_either_or_records("validation", 200, with_choices=with_choices), data)
            runs = [RunSpec.parse(policy) for policy in EITHER_OR_POLICIES]
            passes.append(partial(run_eval, data, EITHER_OR / name, runs, baseline="mai-large", **common))
        return _with_server(
            args.url, lambda url: max(guarded(partial(run, url=url, config=config)) for run in passes)
        )
    if args.calibrate:
        # The test set's mixture: easy-vqa's own questions and half as many balanced yes/no ones.
        balanced = args.calibration_questions // 2
        data = DATASETS / f"easy-vqa-validation-{args.calibration_questions}-balanced-{balanced}.jsonl"
        if not data.exists():
            write_jsonl(
                [
                    *easy_vqa_records("validation", args.calibration_questions),
                    *easy_vqa_balanced_records("validation", balanced),
                ],
                data,
            )
        out = args.out if args.out != DEMO_EVAL else DEMO_CALIBRATION
        objective = config_args("mai-cpu.yaml")["cascade"]["adaptive"]["objective"]
        calibration = partial(calibrate_pass, data, out, objective=objective, **common)
        if args.replay_only:
            return guarded(partial(calibration, replay_only=True))
        return _with_server(args.url, lambda url: guarded(partial(calibration, url=url, config=config)))
    args.out.mkdir(parents=True, exist_ok=True)
    data = DATASETS / f"demo-test-{args.limit}-balanced-{BALANCED_QUESTIONS}.jsonl"
    if not data.exists():
        write_jsonl(
            [*easy_vqa_records("test", args.limit), *easy_vqa_balanced_records("test", BALANCED_QUESTIONS)],
            data,
        )
    records = read_jsonl(data)
    typed_data = DATASETS / f"demo-test-{args.limit}-typed.jsonl"
    if not typed_data.exists():
        write_jsonl(typed_records(records), typed_data)
    passes = [
        partial(run_eval, data, args.out, [RunSpec.parse(p) for p in POLICY_ORDER], baseline="mai-transfer"),
        partial(run_eval, typed_data, args.out / "typed", [RunSpec.parse(p) for p in TYPED_POLICIES]),
    ]

    def evaluate(url: str) -> int:
        for run in passes:
            status = guarded(partial(run, url=url, config=config, **common))
            if status != 0:
                return status
        return 0

    status = _with_server(args.url, evaluate)
    if status != 0:
        return status
    meta, rows = collect(args.out, records, read_jsonl(typed_data), args.concurrency)
    write_jsonl([{"meta": meta}, *rows], args.out / "predictions.jsonl")
    print(write_tables(args.out, meta, rows, provenance(command, config=config, started=started)))
    return 0


def collect(
    out: Path, records: Sequence[Mapping[str, Any]], typed: Sequence[Mapping[str, Any]], concurrency: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The compact predictions of both finished runs in ``out`` (the typed forms' in ``out/typed``)."""
    from evaluation.predictions import PredictionStore

    def load(folder: Path, names: Sequence[str], data: Sequence[Mapping[str, Any]]):
        store = PredictionStore(folder, Path(json.loads((folder / "run.json").read_text())["dataset"]), data)
        return {name: store.load(name) for name in names}

    results = json.loads((out / "results.json").read_text())["policies"]
    rows = compact_rows(records, load(out, RUN_NAMES, records))
    by_form: dict[str, list[dict]] = defaultdict(list)
    for record in typed:
        base, form = record["id"].rsplit("|", 1)
        by_form[form].append(record | {"id": base, "_typed_id": record["id"]})
    typed_predictions = load(out / "typed", TYPED_POLICIES, typed)
    for form, group in sorted(by_form.items()):
        renamed = {
            policy: {r["id"]: by_id[r["_typed_id"]] for r in group if r["_typed_id"] in by_id}
            for policy, by_id in typed_predictions.items()
        }
        rows += compact_rows([{k: v for k, v in r.items() if k != "_typed_id"} for r in group], renamed, form)
    meta = {
        "concurrency": concurrency,
        "wall_s": {policy: round(result["wall_s"], 2) for policy, result in results.items()},
        "command": COMMAND,
    }
    return meta, rows


def _with_server(url: str | None, work) -> int:
    """``work(url)`` against the server at ``url``, or against configs/mai-cpu.yaml served here."""
    if url:
        return work(url)
    import logging

    from harness.local_server import config_args, deploy, local_ray

    with local_ray(num_cpus=2) as local_url:
        # Ray's logging setup in this process would print every request httpx makes.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        print("deploying configs/mai-cpu.yaml (about a minute) ...", file=sys.stderr)
        deploy(config_args("mai-cpu.yaml"))
        return work(local_url)


if __name__ == "__main__":
    raise SystemExit(main())
