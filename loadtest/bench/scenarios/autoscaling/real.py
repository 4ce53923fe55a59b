"""autoscaling --param variant=real.

On configs/mai-cpu.yaml, under the coupled policy with the overload relaxation on and
audits at rate 1.0, concurrency past what two cores hold: the share of relaxed answers and their
accuracy against the others' (easy-vqa's gold answers), and the replicas after the load."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.scoring import score
from harness.local_server import config_args, deploy

from ...cells import percent, shares_text
from ...load import ANSWER, bodies, run_load, stats
from ...scenario import Bench
from ...summary import shares
from ...surges import Sampler

REAL_OVERLOAD = {
    "max_large_queue": 2,
    "restore_below": 0,
    "relax_after_s": 0.5,
    "restore_after_s": 5,
}
# The thresholds relax lowers, to these floors at most; a floor is never above the config's own
# threshold (the server refuses one that is), and a threshold the config leaves off is not relaxed.
FLOORS = {"min_confidence": 0.3, "confident_large": 0.5}
AUDITED = {"audit": {"rate": 1.0, "max_small_queue": 64, "max_large_queue": 64}}


def deployment_args(relax: bool) -> dict[str, Any]:
    """configs/mai-cpu.yaml under the coupled policy with audits at rate 1.0, and with relax its
    overload settings: REAL_OVERLOAD, floors from FLOORS under the config's own thresholds."""
    from serve_app.config import load_app_config

    args = config_args(
        "mai-cpu.yaml",
        {
            "autoscaling": {"policy": "coupled"},
            "cascade": AUDITED,
            # The cascade's runs are what this measures (the warm-up asks what the load asks, both arms
            # the same questions): no answer reused.
            "cache": {"enabled": False},
        },
    )
    if relax:
        configured = load_app_config(args).cascade
        relax_to: dict[str, Any] = {
            name: min(floor, threshold)
            for name, floor in FLOORS.items()
            if (threshold := getattr(configured, name)) is not None
        }
        args["cascade"]["overload"] = REAL_OVERLOAD | {"relax_to": relax_to | {"eager": False}}
    return args


@dataclass(frozen=True)
class Parameters:
    questions: int = 200
    concurrency: int = 24


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, questions, concurrency = bench.url, parameters.questions, parameters.concurrency
    """The same seeded test questions twice, overload off then on (each its own deployment of
    configs/mai-cpu.yaml, coupled, audits at rate 1.0): accuracy against easy-vqa's gold answers
    overall, and on the questions the relaxed run answered relaxed, in both runs (paired)."""
    from harness.datasets import easy_vqa_records

    asked = list(easy_vqa_records("test", questions, seed=35))
    payloads = bodies(asked, len(asked), policy="cascade")
    arms: dict[str, Any] = {}
    for relax in (False, True):
        deploy(deployment_args(relax))
        run_load(url, ANSWER, payloads[:32], 8)  # warm-up, unscored
        with Sampler() as sampler:
            sampler.phase = f"load {concurrency}"
            outcomes, wall = run_load(url, ANSWER, payloads, concurrency)
            sampler.phase = "after"
            time.sleep(15)
        arms["on" if relax else "off"] = {
            "wall_s": round(wall, 1),
            "outcomes": sorted(outcomes, key=lambda outcome: outcome.index or 0),  # as asked
            "replicas_after": sampler.timeline[-1] if sampler.timeline else None,
            "stats": stats(url),
            "policy_decisions_logged": _policy_log_lines(),
        }
    rows = []
    for index, record in enumerate(asked):
        row: dict[str, Any] = {"index": index, "answer_type": record["answer_type"], "gold": record["answer"]}
        for arm, result in arms.items():
            outcome = result["outcomes"][index]
            row[arm] = {
                "answer": outcome.answer,
                "route": outcome.route,
                "correct": outcome.status == 200 and score(outcome.answer, record) == 1.0,
                "overload": outcome.overload,
            }
        rows.append(row)
    relaxed = [row for row in rows if (row["on"]["overload"] or {}).get("relaxed")]
    return {
        "questions": questions,
        "concurrency": concurrency,
        "overload": deployment_args(True)["cascade"]["overload"],
        "relaxed_share": round(len(relaxed) / max(1, len(rows)), 4),
        "levels_on": shares([(row["on"]["overload"] or {}).get("level", "normal") for row in rows]),
        "accuracy": {arm: _accuracy([row[arm]["correct"] for row in rows]) for arm in arms},
        "relaxed_questions_accuracy": {
            arm: _accuracy([row[arm]["correct"] for row in relaxed]) for arm in arms
        },
        "relaxed_routes": shares([row["on"]["route"] for row in relaxed]),
        "same_questions_in_off": shares([row["off"]["route"] for row in relaxed]),
        "arms": {
            arm: {key: value for key, value in result.items() if key != "outcomes"}
            | {"errors": sum(1 for o in result["outcomes"] if o.status != 200)}
            | {
                "error_samples": sorted(
                    {(o.error or "")[:200] for o in result["outcomes"] if o.status != 200}
                )[:3]
            }
            for arm, result in arms.items()
        },
        "rows": rows,
    }


def _policy_log_lines() -> int:
    """Lines the coupled policy logged on Serve's controller (this machine's Ray session)."""
    logs = Path("/tmp/ray/session_latest/logs/serve")
    return sum(
        text.count("MAI autoscaling")
        for text in (path.read_text(errors="replace") for path in logs.glob("controller_*.log"))
    )


def _accuracy(correct_flags: list[bool]) -> dict[str, Any]:
    from serve_app.core.intervals import wilson_interval

    correct = sum(correct_flags)
    rows = correct_flags
    low, high = wilson_interval(correct, len(rows)) if rows else (None, None)
    return {
        "n": len(rows),
        "correct": correct,
        "accuracy": round(correct / max(1, len(rows)), 4),
        "ci95": [low, high],
    }


def table(result: dict[str, Any]) -> list[str]:
    overload, arms, rows = result["overload"], result["arms"], result.get("rows") or []
    floors = ", ".join(
        f"`{key}` {str(value).lower() if isinstance(value, bool) else value}"
        for key, value in overload["relax_to"].items()
    )
    lines = [
        "`configs/mai-cpu.yaml` under the coupled policy, audits at rate 1.0: "
        f"{result['questions']} seeded easy-vqa test questions at {result['concurrency']} users, asked "
        "twice, each time on a fresh deployment: without `cascade.overload` (off), then with it (on: "
        f"`max_large_queue` {overload['max_large_queue']}, relax after {overload['relax_after_s']} s past "
        f"it, restore at or under {overload['restore_below']} after {overload['restore_after_s']} s, floors "
        f"{floors}). Accuracy against easy-vqa's gold answers (95 % Wilson interval), overall and on the "
        "questions the on run answered relaxed, in both runs.",
        "",
        "| overload | accuracy % | on the relaxed questions % | wall s | errors | replicas after, small / "
        "large | audits not run |",
        "|---|---|---|---|---|---|---|",
    ]

    def accuracy(entry: dict[str, Any] | None) -> str:
        if not entry or not entry["n"]:
            return "–"
        low, high = entry["ci95"]
        interval = f" [{low * 100:.1f}–{high * 100:.1f}]" if low is not None else ""
        return f"{entry['accuracy'] * 100:.1f}{interval} ({entry['correct']} of {entry['n']})"

    for arm, entry in arms.items():
        after = entry.get("replicas_after") or {}
        not_run = (entry.get("stats") or {}).get("audit", {}).get("not_run") or {}
        lines.append(
            f"| {arm} | {accuracy(result['accuracy'].get(arm))} | "
            f"{accuracy(result['relaxed_questions_accuracy'].get(arm))} | {entry['wall_s']} | "
            f"{entry['errors']} | {after.get('small', '–')} / {after.get('large', '–')} | "
            f"{', '.join(f'{reason} {count}' for reason, count in not_run.items()) or '0'} |"
        )
    paired = ""
    if rows:
        only_off = sum(1 for row in rows if row["off"]["correct"] and not row["on"]["correct"])
        only_on = sum(1 for row in rows if row["on"]["correct"] and not row["off"]["correct"])
        paired = f" Question by question: {only_off} right only off, {only_on} right only on."
    lines += [
        "",
        f"Answered relaxed: **{percent(result['relaxed_share'])}** (levels in the on run: "
        f"{shares_text(result['levels_on'], 1)}); their routes {shares_text(result['relaxed_routes'])}, the "
        f"same questions off {shares_text(result['same_questions_in_off'])}.{paired}",
    ]
    relaxed = [
        (cls, route.removeprefix("relaxed:"), counts)
        for cls, entry in (arms.get("on", {}).get("stats") or {}).get("classes", {}).items()
        for route, counts in entry.get("audit", {}).get("by_route", {}).items()
        if route.startswith("relaxed:")
    ]
    if relaxed:
        lines += [
            "",
            "Audits of the relaxed answers (counted apart, under `relaxed:<route>`):",
            "",
            "| class | route | audited | disagreed with Full RT |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {cls} | {route} | {counts['audited']} | {counts['disagreed']} |"
            for cls, route, counts in relaxed
        ]
    return lines
