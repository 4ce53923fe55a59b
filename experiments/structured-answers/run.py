"""Answers valid by construction on the demo pair: easy-vqa's validation split with
``structured_answers`` on and off.

    flock /tmp/stack.lock .venv/bin/python experiments/structured-answers/run.py

It rebuilds the calibration's validation set as ``python -m evaluation.demo_eval --calibrate`` builds
it (2,000 questions and 1,000 balanced yes/no ones; its SHA-256 must equal the one in
bench/results/demo-calibration/manifest.json), or with ``--subset N`` a seeded sample of N of them,
serves configs/mai-cpu.yaml on a local Ray (two CPUs) once per condition, ``on`` (the config with
``cascade.structured_answers: true``) and ``off`` (as committed), a fresh deployment each so that the
cascade's plan learning starts from the same table, and runs ``mai-eval run`` in each with the
request option set to the condition too (``NAME=POLICY:structured_answers=...``). In the ``on``
deployment, after the measurement, it checks that the engines honour every form the cascade sends
(smoke.py, into smoke.json); ``--smoke-only`` deploys and runs only that check.
``--interleaved N`` is a latency check instead: one deployment (the committed config), the first N
records, both conditions by request option in blocks on, off, off, on per policy. Predictions resume
(mai-eval's own). results.json gathers mai-eval's accuracies and 95 % intervals and, from the
per-question predictions, the share of answers valid for the record's kind, the stage-1
confidences, the reasoning's length, the stage latencies, the paired changes, and the provenance.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from analysis import condition_figures, interleaved_figures, paired, table  # noqa: E402

from harness.paths import DATASETS, DEMO_CALIBRATION  # noqa: E402
from harness.provenance import file_sha256, provenance  # noqa: E402
from harness.results import write_result  # noqa: E402

CONFIG = "mai-cpu.yaml"
QUESTIONS, BALANCED = 2000, 1000
FULL = DATASETS / f"easy-vqa-validation-{QUESTIONS}-balanced-{BALANCED}.jsonl"
POLICIES = ("mai", "mai-transfer", "mai-small", "mai-large")
CONDITIONS = ("on", "off")
INTERLEAVED = ("mai-transfer", "mai-small", "mai-large")  # the latency check's policies
SEED = 0


def build_dataset(subset: int) -> tuple[Path, dict[str, Any]]:
    """The calibration's validation set (SHA-256 checked against its manifest), or a seeded sample of
    ``subset`` of its records in their order; the file and what identifies it."""
    from harness.datasets import easy_vqa_balanced_records, easy_vqa_records
    from harness.jsonl import write_jsonl

    if not FULL.exists():
        write_jsonl(
            [*easy_vqa_records("validation", QUESTIONS), *easy_vqa_balanced_records("validation", BALANCED)],
            FULL,
        )
    digest = file_sha256(FULL)
    recorded = json.loads((DEMO_CALIBRATION / "manifest.json").read_text())["dataset_sha256"]
    if digest != recorded:
        raise SystemExit(
            f"{FULL} has SHA-256 {digest}, the calibration recorded {recorded}: not the same questions"
        )
    source = {"path": str(FULL.relative_to(ROOT)), "sha256": digest, "records": QUESTIONS + BALANCED}
    if not subset:
        return FULL, source
    lines = FULL.read_text().splitlines(keepends=True)
    keep = sorted(random.Random(SEED).sample(range(len(lines)), subset))
    path = FULL.with_name(f"{FULL.stem}-sample-{subset}-seed-{SEED}.jsonl")
    path.write_text("".join(lines[index] for index in keep))
    return path, {
        "path": str(path.relative_to(ROOT)),
        "sha256": file_sha256(path),
        "records": subset,
        "sampled_from": source,
        "sample": f"random.Random({SEED}).sample(range({len(lines)}), {subset}), in the source's order",
    }


def condition_overrides(condition: str) -> dict[str, Any]:
    return {"cascade": {"structured_answers": condition == "on"}}


def mai_eval(url: str, dataset: Path, condition: str, progress: bool) -> None:
    """``mai-eval run`` of every policy, with the request option set to ``condition``, into
    ``<condition>/`` (its run.json names the command)."""
    flag = "true" if condition == "on" else "false"
    command = [
        str(ROOT / ".venv" / "bin" / "mai-eval"),
        "run",
        str(dataset),
        "--url",
        url,
        "--policies",
        ",".join(f"{name}={name}:structured_answers={flag}" for name in POLICIES),
        "--baseline",
        "mai-transfer",
        "--out",
        str(HERE / condition),
        *([] if progress else ["--no-progress"]),
    ]
    print(f"[{condition}] {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"mai-eval run for {condition} exited {done.returncode}; run again to resume")


def interleaved_specs() -> list[str]:
    """mai-eval's runs for the latency check: a warm-up (its prefix cache), then per policy on, off,
    off, on (ABBA: a drift in the machine's load weighs on both conditions alike)."""
    specs = ["warm-up=mai-transfer:structured_answers=false"]
    for policy in INTERLEAVED:
        for index, condition in enumerate(("on", "off", "off", "on")):
            flag = "true" if condition == "on" else "false"
            specs.append(f"{policy}.{condition}.{index}={policy}:structured_answers={flag}")
    return specs


def latency_check(url: str, dataset: Path, limit: int, progress: bool) -> None:
    """Both conditions by request option, block after block, in one deployment (the committed config)
    on the first ``limit`` records, into ``interleaved/``."""
    command = [
        str(ROOT / ".venv" / "bin" / "mai-eval"),
        "run",
        str(dataset),
        "--url",
        url,
        "--policies",
        ",".join(interleaved_specs()),
        "--limit",
        str(limit),
        "--out",
        str(HERE / "interleaved"),
        *([] if progress else ["--no-progress"]),
    ]
    print(f"[interleaved] {' '.join(command)}", file=sys.stderr, flush=True)
    if subprocess.run(command, cwd=ROOT).returncode != 0:
        raise SystemExit("mai-eval run for the latency check failed; run again to resume")


def run_smoke(url: str, dataset: Path, committed: dict[str, Any]) -> dict[str, Any]:
    from smoke import smoke

    first = json.loads(dataset.read_text().splitlines()[0])
    result = smoke(url, first["image"], committed["cascade"]["max_tokens"])
    result["image"] = f"the image of {first['id']} ({dataset.name}'s first record)"
    (HERE / "smoke.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["verdict"], indent=2), file=sys.stderr, flush=True)
    return result


def serve_and_evaluate(
    dataset: Path,
    conditions: list[str],
    committed: dict[str, Any],
    *,
    smoke_only: bool,
    interleaved: int,
    progress: bool,
) -> None:
    import logging

    from harness.local_server import config_args, deploy, local_ray

    with local_ray(num_cpus=2) as url:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        if interleaved:
            print(f"[interleaved] deploying configs/{CONFIG} as committed ...", file=sys.stderr, flush=True)
            deploy(config_args(CONFIG))
            latency_check(url, dataset, interleaved, progress)
            return
        for condition in conditions:
            overrides = condition_overrides(condition)
            print(
                f"[{condition}] deploying configs/{CONFIG}, overrides {overrides} ...",
                file=sys.stderr,
                flush=True,
            )
            deploy(config_args(CONFIG, overrides))
            if condition == "on" and smoke_only:
                run_smoke(url, dataset, committed)
                return
            mai_eval(url, dataset, condition, progress)
            if condition == "on":
                run_smoke(url, dataset, committed)  # after the measurement: its requests teach no plan


def mai_eval_runs() -> dict[str, Any]:
    runs = {}
    for condition in CONDITIONS:
        path = HERE / condition / "run.json"
        if path.exists():
            run = json.loads(path.read_text())
            runs[condition] = {
                key: run[key] for key in ("command", "commit", "uncommitted_changes", "started")
            }
            runs[condition]["report"] = f"experiments/structured-answers/{condition}/results.json"
            runs[condition]["overrides"] = condition_overrides(condition)
    return runs


def measured_by() -> dict[str, Any] | None:
    path = HERE / "results.json"
    if not path.exists():
        return None
    meta = json.loads(path.read_text())["meta"]
    keys = ("command", "commit", "uncommitted_changes", "started", "duration_s")
    return meta.get("measured_by") or {key: meta[key] for key in keys if key in meta}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help="comma-separated, in this order")
    parser.add_argument("--subset", type=int, default=0, help="a seeded sample of N records (0: all 3,000)")
    parser.add_argument(
        "--smoke-only", action="store_true", help="deploy with structured answers, check, stop"
    )
    parser.add_argument(
        "--interleaved",
        type=int,
        default=0,
        metavar="N",
        help="only the latency check: on and off by request option, ABBA, on the first N records",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument("--report-only", action="store_true", help="no server: rewrite results.json")
    args = parser.parse_args(argv)
    conditions = ["on"] if args.smoke_only else args.conditions.split(",")
    if unknown := [c for c in conditions if c not in CONDITIONS]:
        parser.error(f"unknown condition: {', '.join(unknown)}")
    # A stop (SIGTERM) unwinds like Ctrl-C: Serve and Ray shut down and take the engines with them.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    started = time.time()
    command = " ".join(
        ["python experiments/structured-answers/run.py", *(sys.argv[1:] if argv is None else argv)]
    )
    dataset, identity = build_dataset(args.subset)

    from harness.local_server import config_args

    committed = config_args(CONFIG)
    if not args.report_only:
        serve_and_evaluate(
            dataset,
            conditions,
            committed,
            smoke_only=args.smoke_only,
            interleaved=args.interleaved,
            progress=not args.no_progress,
        )
        if args.smoke_only or args.interleaved:
            return 0
    cascade = committed["cascade"]
    thresholds = {key: cascade[key] for key in ("min_confidence", "confident_large")}
    figures = {
        condition: result
        for condition in CONDITIONS
        if (
            result := condition_figures(
                HERE / condition, dataset, POLICIES, thresholds, cascade["max_tokens"]
            )
        )
    }
    text = table(figures, POLICIES)
    meta = provenance(command, config=CONFIG, started=started)
    if args.report_only:
        meta["measured_by"] = measured_by()
    smoke_path = HERE / "smoke.json"
    write_result(
        HERE / "results.json",
        {
            "dataset": identity,
            "thresholds": thresholds,
            "mai_eval": mai_eval_runs(),
            "smoke": json.loads(smoke_path.read_text())["verdict"] if smoke_path.exists() else None,
            "conditions": figures,
            "interleaved": interleaved_figures(HERE / "interleaved", INTERLEAVED),
            "paired": {name: p for name in POLICIES if (p := paired(HERE, dataset, name)) is not None},
            "table": text.splitlines(),
        },
        meta,
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
