"""The figures of one condition's ``mai-eval run`` folder: mai-eval's own report, and what its
per-question predictions show — the share of answers valid for the record's kind
(``serve_app.core.answers.is_valid``), the stage-1 confidences against the configured thresholds, the
reasoning's length, the tokens per request — and the paired changes between the conditions."""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from serve_app.core.answers import is_valid

STAGE1 = ("short_small", "short_large")


def records(dataset: Path) -> dict[str, dict[str, Any]]:
    rows = (json.loads(line) for line in dataset.read_text().splitlines() if line.strip())
    return {row["id"]: row for row in rows}


def predictions(folder: Path, name: str) -> dict[str, dict[str, Any]] | None:
    path = folder / "predictions" / f"{name}.jsonl"
    if not path.exists():
        return None
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {row["id"]: row for row in rows if row["status"] == 200}


def share(flags: Sequence[bool]) -> float | None:
    return 100 * sum(flags) / len(flags) if flags else None


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def valid(answer: Any, record: dict[str, Any]) -> bool:
    return is_valid(answer, record["answer_type"], choices=record.get("choices"))


def by_kind(rows: dict[str, dict[str, Any]], truth: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    kinds: dict[str, list[str]] = {}
    for key in sorted(rows):
        kinds.setdefault(truth[key]["answer_type"], []).append(key)
    return kinds


def stage1(
    rows: dict[str, dict[str, Any]], ids: list[str], thresholds: dict[str, float]
) -> dict[str, dict[str, Any]]:
    """Per stage-1 stage that ran: its count, mean confidence, the share at least ``min_confidence``
    (an agreement counts only then) and, for the large one, at least ``confident_large``."""
    out = {}
    for name in STAGE1:
        stages = [s for i in ids for s in rows[i]["stages"] if s["name"] == name and s["status"] == "ok"]
        if not stages:
            continue
        confidences = [s["confidence"] for s in stages if s["confidence"] is not None]
        figures = {
            "stages": len(stages),
            "without_confidence": len(stages) - len(confidences),
            "confidence_mean": mean(confidences),
            "at_least_min_confidence": share(
                [(s["confidence"] or 0) >= thresholds["min_confidence"] for s in stages]
            ),
        }
        if name == "short_large" and thresholds.get("confident_large") is not None:
            figures["at_least_confident_large"] = share(
                [(s["confidence"] or 0) >= thresholds["confident_large"] for s in stages]
            )
        out[name] = figures
    return out


def reasoning(rows: dict[str, dict[str, Any]], ids: list[str], budget: int) -> dict[str, Any] | None:
    stages = [
        s for i in ids for s in rows[i]["stages"] if s["prompt_kind"] == "reasoning" and s["status"] == "ok"
    ]
    if not stages:
        return None
    return {
        "stages": len(stages),
        "completion_tokens_mean": mean([s["completion_tokens"] for s in stages]),
        "at_budget": share([s["completion_tokens"] >= budget for s in stages]),
        "latency_mean_s": mean([s["latency_s"] for s in stages]),
    }


def policy_figures(
    rows: dict[str, dict[str, Any]],
    truth: dict[str, dict[str, Any]],
    thresholds: dict[str, float],
    budgets: dict[str, int],
) -> dict[str, Any]:
    kinds = by_kind(rows, truth)
    ids = sorted(rows)
    ok_stages = [(i, s) for i in ids for s in rows[i]["stages"] if s["status"] == "ok"]
    return {
        "answer_valid": share([valid(rows[i]["answer"], truth[i]) for i in ids]),
        "answer_valid_by_kind": {
            kind: share([valid(rows[i]["answer"], truth[i]) for i in of_kind])
            for kind, of_kind in kinds.items()
        },
        "stage_answers_valid": share([valid(s["answer"], truth[i]) for i, s in ok_stages]),
        "stage_answers_valid_by_kind": {
            kind: share(
                [valid(s["answer"], truth[i]) for i, s in ok_stages if truth[i]["answer_type"] == kind]
            )
            for kind in kinds
        },
        "accuracy_by_kind": {
            kind: share([rows[i]["score"] >= 1 for i in of_kind]) for kind, of_kind in kinds.items()
        },
        "prompt_tokens_mean": mean([rows[i]["usage"].get("prompt_tokens", 0) for i in ids]),
        "completion_tokens_mean": mean([rows[i]["usage"].get("completion_tokens", 0) for i in ids]),
        "plans": dict(Counter(rows[i]["plan"] for i in ids if rows[i]["plan"])),
        "stage_latency_mean_s": {
            name: mean([s["latency_s"] for i, s in ok_stages if s["name"] == name])
            for name in sorted({s["name"] for _, s in ok_stages})
        },
        "stage1_by_kind": {
            kind: f for kind, of_kind in kinds.items() if (f := stage1(rows, of_kind, thresholds))
        },
        "reasoning_by_kind": {
            kind: r
            for kind, of_kind in kinds.items()
            if (r := reasoning(rows, of_kind, budgets["reasoning"]))
        },
    }


def condition_figures(
    folder: Path,
    dataset: Path,
    policies: Sequence[str],
    thresholds: dict[str, float],
    budgets: dict[str, int],
) -> dict[str, Any] | None:
    """mai-eval's report of ``folder`` per policy with the figures from its predictions; None before
    it ran."""
    if not (folder / "results.json").exists():
        return None
    report = json.loads((folder / "results.json").read_text())["policies"]
    truth = records(dataset)
    out = {}
    for name in policies:
        if name not in report:
            continue
        summary = report[name]
        figures = {
            "accuracy": summary["metrics"]["score"],
            "accuracy_95ci": summary["metrics"]["score_95ci"],
            **{key: summary[key] for key in ("answered", "errors", "wall_s", "routes")},
            **{key: summary[key] for key in ("latency_mean_s", "latency_p50_s", "latency_p99_s")},
            "completion_tokens_per_request": summary["completion_tokens_per_request"],
            "calls_per_request": summary["calls_per_request"],
        }
        rows = predictions(folder, name)
        if rows:
            figures |= policy_figures(rows, truth, thresholds, budgets)
        out[name] = figures
    return out


def mcnemar_p(worse: int, better: int) -> float:
    """Exact two-sided McNemar p-value of ``worse`` against ``better`` discordant questions."""
    n = worse + better
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(min(worse, better) + 1)) / 2**n)


def paired(here: Path, dataset: Path, name: str) -> dict[str, Any] | None:
    """The same questions on and off: answers that changed, right to wrong and back, McNemar's p."""
    on, off = predictions(here / "on", name), predictions(here / "off", name)
    if on is None or off is None:
        return None
    ids = sorted(on.keys() & off.keys())
    truth = records(dataset)
    worse = sum(off[i]["score"] > on[i]["score"] for i in ids)
    better = sum(off[i]["score"] < on[i]["score"] for i in ids)
    return {
        "questions": len(ids),
        "answers_changed": sum(on[i]["answer"] != off[i]["answer"] for i in ids),
        "yes_no_answers_changed": sum(
            on[i]["answer"] != off[i]["answer"] for i in ids if truth[i]["answer_type"] == "yes_no"
        ),
        "right_to_wrong": worse,
        "wrong_to_right": better,
        "mcnemar_p": mcnemar_p(worse, better),
    }


def table(figures: dict[str, dict[str, Any]], policies: Sequence[str]) -> str:
    """Per policy and condition: accuracy (95 % interval), valid answers, mean latency, tokens, routes."""
    lines = [
        "| policy | structured | accuracy % (95 % CI) | valid % | stage answers valid % | mean latency s"
        " | completion tokens / request | routes |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in policies:
        for condition in ("off", "on"):
            f = figures.get(condition, {}).get(name)
            if f is None:
                lines.append(f"| {name} | {condition} | not run | | | | | |")
                continue
            low, high = f["accuracy_95ci"]
            routes = ", ".join(f"{route} {count}" for route, count in sorted(f["routes"].items()))
            lines.append(
                f"| {name} | {condition} | {f['accuracy']:.2f} ({low:.2f}-{high:.2f})"
                f" | {f.get('answer_valid', 0):.2f} | {f.get('stage_answers_valid', 0):.2f}"
                f" | {f['latency_mean_s']:.3f}"
                f" | {f.get('completion_tokens_mean', 0):.1f} | {routes} |"
            )
    return "\n".join(lines)


def interleaved_figures(folder: Path, policies: Sequence[str]) -> dict[str, Any] | None:
    """The latency check (run.py ``--interleaved``): per policy and condition, the blocks' mean
    latency and wall time, each stage's mean latency, and on against off."""
    if not (folder / "results.json").exists():
        return None
    report = json.loads((folder / "results.json").read_text())["policies"]
    run = json.loads((folder / "run.json").read_text())
    out: dict[str, Any] = {"mai_eval": run["command"], "commit": run["commit"], "started": run["started"]}
    for policy in policies:
        figures: dict[str, Any] = {}
        for condition in ("on", "off"):
            names = [name for name in report if name.startswith(f"{policy}.{condition}.")]
            stages: dict[str, list[float]] = {}
            for name in names:
                for row in (predictions(folder, name) or {}).values():
                    for stage in row["stages"]:
                        stages.setdefault(stage["name"], []).append(stage["latency_s"])
            figures[condition] = {
                "blocks": names,
                "latency_mean_s": mean([report[name]["latency_mean_s"] for name in names]),
                "wall_s": sum(report[name]["wall_s"] for name in names),
                "accuracy": [report[name]["metrics"]["score"] for name in names],
                "stage_latency_mean_s": {stage: mean(values) for stage, values in stages.items()},
            }
        on, off = figures["on"], figures["off"]
        if on["latency_mean_s"] and off["latency_mean_s"]:
            figures["on_over_off"] = {
                "latency_mean": on["latency_mean_s"] / off["latency_mean_s"],
                **{
                    stage: on["stage_latency_mean_s"][stage] / off["stage_latency_mean_s"][stage]
                    for stage in on["stage_latency_mean_s"]
                    if stage in off["stage_latency_mean_s"]
                },
            }
        out[policy] = figures
    return out
