"""How the strict verification rule differs from the previous one, measured:
``python -m evaluation.matcher_report`` writes ``bench/results/verification/matcher.json`` and ``.md``.

1. **Near misses**: pairs of answers assembled to look alike (words that share letters, numbers a digit
   apart, names, hedges), each labelled whether the two say the same thing; for each rule, how many
   distinct pairs it calls the same (false agreements) and how many same pairs it calls different.
2. **Recorded passes**: per question, the stage answers of a recorded full path (``mai-small``,
   ``mai-large`` and ``mai-transfer`` predictions, as ``mai-eval calibrate`` records them): at the
   ``agree_short`` check (both short answers) and the ``agree_reasoned`` check (the small model's
   reasoned answer against the large short one), how many agreements the previous rule accepted that
   the strict rule does not, and how many of those served a wrong answer (the large short answer,
   scored against gold). Thresholds are left out (the paper's rule): this counts the matcher alone.

The previous rule is kept here, and only here, for this comparison: ANLS >= 0.5 for open text,
ChartQA's 5 % for numbers, a hedge read by its first word.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.scoring import anls
from harness.jsonl import read_jsonl
from harness.paths import DEMO_CALIBRATION, DEMO_EVAL, RESULTS, ROOT
from harness.provenance import provenance
from harness.results import write_result
from serve_app.core.answers import is_valid, normalize, parse_number, yes_no
from serve_app.core.verification import agree

from .records import load_records
from .scoring import score

OUT = RESULTS / "verification"
COMMAND = "python -m evaluation.matcher_report"

# (kind, a, b, the same answer?)
NEAR_MISSES: tuple[tuple[str, str, str, bool], ...] = (
    # words that share most of their letters
    ("text", "rectangle", "triangle", False),
    ("text", "cat", "car", False),
    ("text", "blue", "blur", False),
    ("text", "left", "lift", False),
    ("text", "March", "Match", False),
    ("text", "circle", "circles", False),
    ("text", "white", "write", False),
    ("text", "bottle", "battle", False),
    ("text", "horse", "house", False),
    ("text", "green", "greet", False),
    ("text", "the left one", "the right one", False),
    # names
    ("text", "Model A", "Model B", False),
    ("text", "John Smith", "Jane Smith", False),
    ("text", "Apple Inc", "Apple Pie", False),
    ("text", "New York", "New Jersey", False),
    ("text", "Paris", "Parks", False),
    # negations and alternatives
    ("text", "red", "not red", False),
    ("text", "cat", "cat and dog", False),
    ("text", "red", "red or blue", False),
    # numbers
    ("number", "2018", "2019", False),
    ("number", "12", "13", False),
    ("number", "100", "104", False),
    ("number", "0.5", "0.52", False),
    ("text", "1.5 million", "1.6 million", False),
    ("text", "3 apples", "4 apples", False),
    ("number", "3.5 kg", "3.5 lb", False),
    # hedges to a yes/no question
    ("yes_no", "not sure", "no", False),
    ("yes_no", "no idea", "no", False),
    ("yes_no", "not certain", "no", False),
    ("yes_no", "N/A", "no", False),
    ("yes_no", "not clear", "no", False),
    # the same answer written two ways
    ("text", "New York", "New York City", True),
    ("text", "Red.", "red", True),
    ("text", "the red one", "red", True),
    ("text", "a triangle", "triangle", True),
    ("text", "1,234 people", "1234 people", True),
    ("number", "1,000", "1000", True),
    ("number", "12%", "0.12", True),
    ("number", "3.14", "3.1416", True),
    ("number", "$5", "5", True),
    ("yes_no", "Yes.", "yes", True),
    ("yes_no", "No, there is not.", "no", True),
)


def previous_agree(a: str | None, b: str | None, kind: str) -> bool:
    """The rule verification used before: the scoring rules (ANLS >= 0.5, ChartQA's 5 %), a yes/no
    answer read by its first word, so "not sure" was "no"."""
    if a is None or b is None:
        return False
    if kind == "yes_no":
        return yes_no(a) is not None and yes_no(a) == yes_no(b)
    if not (is_valid(a, kind) or kind == "text") or not (is_valid(b, kind) or kind == "text"):
        return False
    if kind == "number":
        x, y = parse_number(a), parse_number(b)
        if x is None or y is None:
            return False
        return any(abs(p - q) <= 0.05 * abs(q) + 1e-12 for p, q in ((x[0], y[0]), (y[0], x[0])))
    if kind == "choice":
        return normalize(a, kind) == normalize(b, kind)
    a_norm, b_norm = normalize(a, kind), normalize(b, kind)
    return bool(a_norm and b_norm) and anls(a_norm, b_norm) >= 0.5


def near_miss_table() -> dict[str, Any]:
    rows = []
    for kind, a, b, same in NEAR_MISSES:
        rows.append(
            {
                "kind": kind,
                "a": a,
                "b": b,
                "same": same,
                "previous": previous_agree(a, b, kind),
                "strict": agree(a, b, kind),
            }
        )
    summary = {}
    for rule in ("previous", "strict"):
        summary[rule] = {
            "false_agreements": sum(r[rule] and not r["same"] for r in rows),
            "distinct_pairs": sum(not r["same"] for r in rows),
            "missed_agreements": sum(r["same"] and not r[rule] for r in rows),
            "same_pairs": sum(r["same"] for r in rows),
        }
    return {"pairs": rows, "summary": summary}


def _stage_answers(row: Mapping[str, Any]) -> dict[str, str | None]:
    return {s["name"]: s.get("answer") for s in row.get("stages", []) if s.get("status") == "ok"}


def recorded_pass(dataset: Path, predictions: Path) -> dict[str, Any]:
    """The two checks of the paper's rule, under both matchers, over one recorded full path."""
    records = {r.id: r for r in load_records(dataset)}
    runs = {
        name: {
            row["id"]: _stage_answers(row)
            for row in read_jsonl(predictions / f"{name}.jsonl")
            if row.get("status") == 200
        }
        for name in ("mai-small", "mai-large", "mai-transfer")
    }
    checks = {
        name: {"questions": 0, "previous": 0, "strict": 0, "changed": 0, "changed_wrong": 0, "examples": []}
        for name in ("agree_short", "agree_reasoned")
    }
    for qid, record in records.items():
        small = runs["mai-small"].get(qid, {}).get("short_small")
        large = runs["mai-large"].get(qid, {}).get("short_large")
        reasoned = runs["mai-transfer"].get(qid, {}).get("reason_small")
        if qid not in runs["mai-large"] or qid not in runs["mai-small"] or qid not in runs["mai-transfer"]:
            continue
        kind = record.answer_type or _kind_of(record)
        served_wrong = score(large, record.model_dump()) == 0
        for name, other in (("agree_short", small), ("agree_reasoned", reasoned)):
            entry = checks[name]
            entry["questions"] += 1
            before, now = previous_agree(other, large, kind), agree(other, large, kind)
            entry["previous"] += before
            entry["strict"] += now
            if before and not now:
                entry["changed"] += 1
                entry["changed_wrong"] += served_wrong
                if len(entry["examples"]) < 10:
                    entry["examples"].append(
                        {"id": qid, "kind": kind, "answers": [other, large], "gold": record.answer}
                    )
    return {
        "dataset": str(dataset.relative_to(ROOT)) if dataset.is_relative_to(ROOT) else str(dataset),
        "checks": checks,
    }


def served_against(previous_commit: str) -> dict[str, Any] | None:
    """The test split's served answers (``bench/results/demo-eval/predictions.jsonl``): ``mai`` now
    against Full RT in the same run and against ``mai`` of the run committed at ``previous_commit``
    (the previous rule), question by question, with paired 95 % bootstrap intervals (points)."""
    import subprocess

    from .scoring import bootstrap_interval

    path = DEMO_EVAL / "predictions.jsonl"
    old = subprocess.run(
        ["git", "show", f"{previous_commit}:{path.relative_to(ROOT)}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if old.returncode != 0 or not path.exists():
        return None
    now_rows = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    old_rows = {(row["id"], row.get("form")): row for row in map(json.loads, old.stdout.splitlines()[1:])}

    def scored(row: Mapping[str, Any], policy: str) -> float | None:
        entry = row["policies"].get(policy)
        return None if entry is None else float(entry[1])

    pairs: dict[str, list[tuple[float, float]]] = {"full_rt": [], "previous": []}
    for row in now_rows:
        mai = scored(row, "mai")
        full_rt = scored(row, "mai-transfer")
        key = (row["id"], row.get("form"))
        before = scored(old_rows[key], "mai") if key in old_rows else None
        if mai is not None and full_rt is not None:
            pairs["full_rt"].append((mai, full_rt))
        if mai is not None and before is not None:
            pairs["previous"].append((mai, before))
    return {
        "previous_commit": previous_commit,
        **{
            against: {
                "questions": len(values),
                "mai_pct": round(100 * sum(a for a, _ in values) / len(values), 2),
                "other_pct": round(100 * sum(b for _, b in values) / len(values), 2),
                "difference_95ci_points": bootstrap_interval([a - b for a, b in values]),
            }
            for against, values in pairs.items()
            if values
        },
    }


def _kind_of(record) -> str:
    from serve_app.core.question_parsing import read_question

    return read_question(record.question, record.choices, record.answer_type).kind


def render(result: Mapping[str, Any]) -> str:
    lines = [
        "# Verification: the strict rule against the previous one",
        "",
        f"Produced by `{COMMAND}` at commit {result['meta']['commit']}.",
        "",
        "## Near misses",
        "",
        "| rule | false agreements (of distinct pairs) | missed agreements (of same pairs) |",
        "|---|---|---|",
    ]
    for rule, s in result["near_misses"]["summary"].items():
        false, missed = s["false_agreements"], s["missed_agreements"]
        lines.append(f"| {rule} | {false} of {s['distinct_pairs']} | {missed} of {s['same_pairs']} |")
    for name, passed in result["recorded"].items():
        lines += [
            "",
            f"## Recorded pass: {name} ({passed['dataset']})",
            "",
            "| check | questions | previous agrees | strict agrees | exits the strict rule removes | "
            "of them wrong answers |",
            "|---|---|---|---|---|---|",
        ]
        for check, c in passed["checks"].items():
            counts = (c["questions"], c["previous"], c["strict"], c["changed"], c["changed_wrong"])
            lines.append(f"| {check} | " + " | ".join(str(n) for n in counts) + " |")
    served = result.get("served_test_split")
    if served:
        lines += [
            "",
            "## Served on the test split (1,000 questions and 500 balanced yes/no): mai against Full RT "
            f"and the previous rule ({served['previous_commit']})",
            "",
            "| against | questions | mai % | other % | paired difference, 95 % CI (points) |",
            "|---|---|---|---|---|",
        ]
        for against, entry in served.items():
            if isinstance(entry, dict):
                low, high = entry["difference_95ci_points"]
                lines.append(
                    f"| {against} | {entry['questions']} | {entry['mai_pct']} | {entry['other_pct']} | "
                    f"[{low:+.1f}, {high:+.1f}] |"
                )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--previous",
        default="b447338",
        help="the commit whose test-split evaluation ran the previous rule (default: the last before it)",
    )
    args = parser.parse_args(argv)
    passes = {
        "validation (calibration pass)": DEMO_CALIBRATION,
        "test (demo evaluation)": DEMO_EVAL,
    }
    recorded = {}
    for name, folder in passes.items():
        run = folder / "run.json" if (folder / "run.json").exists() else folder / "manifest.json"
        if not (folder / "predictions" / "mai-transfer.jsonl").exists() or not run.exists():
            print(f"matcher_report: {folder} holds no recorded full path; skipped", flush=True)
            continue
        recorded[name] = recorded_pass(Path(json.loads(run.read_text())["dataset"]), folder / "predictions")
    result = {
        "near_misses": near_miss_table(),
        "recorded": recorded,
        "served_test_split": served_against(args.previous),
    }
    meta = provenance(COMMAND)
    write_result(args.out / "matcher.json", result, meta)  # makes args.out
    (args.out / "matcher.md").write_text(render(result | {"meta": meta}))
    print(render(result | {"meta": meta}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
