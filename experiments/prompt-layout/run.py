"""The demo pair's validation accuracy under each prompt layout, next to the figures recorded before
the question and the instruction were joined in one text part.

    flock /tmp/stack.lock .venv/bin/python experiments/prompt-layout/run.py

It rebuilds easy-vqa's validation set as ``python -m evaluation.demo_eval --calibrate`` builds it
(2,000 questions and 1,000 balanced yes/no ones; its SHA-256 must equal the one in
bench/results/demo-calibration/manifest.json), serves configs/mai-cpu.yaml on a local Ray (two CPUs),
and runs ``mai-eval run`` once per layout: ``joined`` (the config as committed) and ``separate_line``
(both models overridden to the paper's layout), each into its own folder here. The policies are the
calibration's baselines, run live: mai-small-reason with ``stage2_answer=inline`` as the calibration
replays it. Predictions resume (mai-eval's own), so an interrupted run goes on where it stopped.
results.json gathers mai-eval's accuracies and 95 % intervals with the recorded ones and the
provenance: the command, the commit, the dataset's SHA-256, the overrides of each layout.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(ROOT))

from harness.paths import DATASETS, DEMO_CALIBRATION  # noqa: E402
from harness.provenance import file_sha256, provenance  # noqa: E402
from harness.results import write_result  # noqa: E402

CONFIG = "mai-cpu.yaml"
QUESTIONS, BALANCED = 2000, 1000
DATASET = DATASETS / f"easy-vqa-validation-{QUESTIONS}-balanced-{BALANCED}.jsonl"
# Run name -> mai-eval's run spec, and the name the calibration's replayed baseline has.
POLICIES: dict[str, tuple[str, str]] = {
    "mai-small": ("mai-small", "mai-small"),
    "mai-large": ("mai-large", "mai-large"),
    "mai-small-reason": (
        "mai-small-reason=mai-small-reason:stage2_answer=inline",
        "mai-small-reason (inline)",
    ),
    "mai-transfer": ("mai-transfer", "mai-transfer"),
}
LAYOUTS = ("joined", "separate_line")


def layout_overrides(layout: str, committed: dict[str, Any]) -> dict[str, Any]:
    """The config overrides that serve both models under ``layout``; none when the committed config
    already does."""
    if all(committed[role].get("prompt_layout", "separate_line") == layout for role in ("small", "large")):
        return {}
    return {role: {"prompt_layout": layout} for role in ("small", "large")}


def build_dataset() -> str:
    """The calibration's validation set, built as evaluation/demo_eval.py builds it when missing; its
    SHA-256, checked against the calibration's manifest."""
    from harness.datasets import easy_vqa_balanced_records, easy_vqa_records
    from harness.jsonl import write_jsonl

    if not DATASET.exists():
        write_jsonl(
            [*easy_vqa_records("validation", QUESTIONS), *easy_vqa_balanced_records("validation", BALANCED)],
            DATASET,
        )
    digest = file_sha256(DATASET)
    recorded = json.loads((DEMO_CALIBRATION / "manifest.json").read_text())["dataset_sha256"]
    if digest != recorded:
        raise SystemExit(
            f"{DATASET} has SHA-256 {digest}, the calibration recorded {recorded}: not the same questions"
        )
    return digest


def mai_eval(url: str, layout: str, runs: list[str], progress: bool) -> None:
    """Run ``mai-eval run`` on the dataset into ``<layout>/`` (its run.json names the command)."""
    command = [
        str(ROOT / ".venv" / "bin" / "mai-eval"),
        "run",
        str(DATASET),
        "--url",
        url,
        "--policies",
        ",".join(POLICIES[name][0] for name in runs),
        "--out",
        str(HERE / layout),
        *([] if progress else ["--no-progress"]),
    ]
    print(f"[{layout}] {' '.join(command)}", file=sys.stderr, flush=True)
    done = subprocess.run(command, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"mai-eval run for {layout} exited {done.returncode}; run again to resume")


def layout_figures(layout: str) -> dict[str, Any] | None:
    """What ``<layout>/`` holds from mai-eval, None before it ran: its command and, per run, the
    accuracy, its 95 % interval, answered and failed requests, wall time."""
    folder = HERE / layout
    if not (folder / "results.json").exists():
        return None
    policies = json.loads((folder / "results.json").read_text())["policies"]
    run = json.loads((folder / "run.json").read_text())
    return {
        "mai_eval": run["command"],
        **{key: run[key] for key in ("commit", "uncommitted_changes", "started")},
        "report": f"experiments/prompt-layout/{layout}/results.json",
        "policies": {
            name: {
                "accuracy": summary["metrics"]["score"],
                "accuracy_95ci": summary["metrics"]["score_95ci"],
                "answered": summary["answered"],
                "errors": summary["errors"],
                "wall_s": summary["wall_s"],
            }
            for name, summary in policies.items()
        },
    }


def predictions(layout: str, name: str) -> dict[str, dict[str, Any]] | None:
    path = HERE / layout / "predictions" / f"{name}.jsonl"
    if not path.exists():
        return None
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {row["id"]: row for row in rows if row["status"] == 200}


def mcnemar_p(worse: int, better: int) -> float:
    """Exact two-sided McNemar p-value of ``worse`` against ``better`` discordant questions."""
    n = worse + better
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(worse, better) + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(name: str) -> dict[str, Any] | None:
    """The same questions under both layouts (from the predictions, when both are on disk): answers
    that changed, right to wrong and back, McNemar's exact p, accuracy per answer kind."""
    joined, separate = predictions("joined", name), predictions("separate_line", name)
    if joined is None or separate is None:
        return None
    ids = sorted(joined.keys() & separate.keys())
    worse = sum(joined[i]["score"] > separate[i]["score"] for i in ids)
    better = sum(joined[i]["score"] < separate[i]["score"] for i in ids)
    by_kind: dict[str, dict[str, Any]] = {}
    for kind in sorted({joined[i]["kind"] for i in ids}):
        of_kind = [i for i in ids if joined[i]["kind"] == kind]
        by_kind[kind] = {"questions": len(of_kind)} | {
            layout: 100 * sum(rows[i]["score"] for i in of_kind) / len(of_kind)
            for layout, rows in (("joined", joined), ("separate_line", separate))
        }
    return {
        "questions": len(ids),
        "answers_changed": sum(joined[i]["answer"] != separate[i]["answer"] for i in ids),
        "right_to_wrong": worse,
        "wrong_to_right": better,
        "mcnemar_p": mcnemar_p(worse, better),
        "accuracy_by_kind": by_kind,
    }


def recorded_before() -> dict[str, Any]:
    calibration = json.loads((DEMO_CALIBRATION / "calibration.json").read_text())
    baselines = calibration["baselines"]
    return {
        "source": "bench/results/demo-calibration/calibration.json",
        "meta": calibration["meta"],
        "policies": {
            name: {key: baselines[before][key] for key in ("accuracy", "accuracy_95ci")}
            for name, (_, before) in POLICIES.items()
        },
    }


def table(before: dict[str, Any], layouts: dict[str, dict[str, Any]]) -> str:
    def cell(figures: dict[str, Any] | None) -> str:
        if figures is None:
            return "not run"
        low, high = figures["accuracy_95ci"]
        return f"{figures['accuracy']:.2f} ({low:.2f}-{high:.2f})"

    lines = [
        "| policy | recorded before | joined (after) | separate_line |",
        "|---|---|---|---|",
    ]
    for name in POLICIES:
        row = [cell(before["policies"][name])]
        row += [cell(layouts.get(layout, {}).get("policies", {}).get(name)) for layout in LAYOUTS]
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def measured_by() -> dict[str, Any] | None:
    """The provenance of the run that served and asked, from the results.json it wrote."""
    path = HERE / "results.json"
    if not path.exists():
        return None
    meta = json.loads(path.read_text())["meta"]
    keys = ("command", "commit", "uncommitted_changes", "started", "duration_s")
    return meta.get("measured_by") or {key: meta[key] for key in keys if key in meta}


def serve_and_evaluate(
    layouts: list[str], separate: list[str], committed: dict[str, Any], *, progress: bool
) -> None:
    """configs/mai-cpu.yaml on a local Ray, redeployed per layout, mai-eval run against each."""
    import logging

    from harness.local_server import config_args, deploy, local_ray

    with local_ray(num_cpus=2) as url:
        logging.getLogger("httpx").setLevel(logging.WARNING)
        for layout in layouts:
            overrides = layout_overrides(layout, committed)
            print(
                f"[{layout}] deploying configs/{CONFIG}, overrides {overrides} ...",
                file=sys.stderr,
                flush=True,
            )
            deploy(config_args(CONFIG, overrides))
            mai_eval(url, layout, list(POLICIES) if layout == "joined" else separate, progress)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated, in this order")
    parser.add_argument(
        "--separate-line-policies",
        default=",".join(POLICIES),
        help="the runs under separate_line (default all four; mai-transfer is the slowest)",
    )
    parser.add_argument("--no-progress", action="store_true")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="no server: rewrite results.json from the runs already in the layout folders",
    )
    args = parser.parse_args(argv)
    layouts = args.layouts.split(",")
    separate = args.separate_line_policies.split(",")
    unknown = [x for x in layouts if x not in LAYOUTS] + [x for x in separate if x not in POLICIES]
    if unknown:
        parser.error(f"unknown layout or policy: {', '.join(unknown)}")
    started = time.time()
    command = " ".join(["python experiments/prompt-layout/run.py", *(sys.argv[1:] if argv is None else argv)])
    digest = build_dataset()

    from harness.local_server import config_args

    committed = config_args(CONFIG)
    if not args.report_only:
        serve_and_evaluate(layouts, separate, committed, progress=not args.no_progress)
    # Every layout whose folder holds a finished run, this invocation's or an earlier one's.
    results = {
        layout: {"overrides": layout_overrides(layout, committed)} | figures
        for layout in LAYOUTS
        if (figures := layout_figures(layout)) is not None
    }
    before = recorded_before()
    text = table(before, results)
    meta = provenance(command, config=CONFIG, started=started)
    if args.report_only:
        meta["measured_by"] = measured_by()
    dataset = {"path": str(DATASET.relative_to(ROOT)), "sha256": digest, "records": QUESTIONS + BALANCED}
    comparison = {name: figures for name in POLICIES if (figures := paired(name)) is not None}
    write_result(
        HERE / "results.json",
        {
            "dataset": dataset,
            "before": before,
            "layouts": results,
            "paired": comparison,
            "table": text.splitlines(),
        },
        meta,
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
