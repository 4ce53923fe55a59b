"""adaptive --param variant=real.

Plans per question class on the real CPU stack (configs/mai-cpu.yaml as served):
seeded easy-vqa *test* questions at concurrency 8, after an unscored warm-up of other test questions
through ``mai``: adaptive ``mai``, ``mai`` forced to the paper's ``sequential`` plan, Full RT
(``mai-transfer``) and large-reason, each repetition running all four in an order rotated from the
last. Accuracy [95 % CI] over the questions, wall time, p50/p99, tokens per model, plan shares per
class, the controller's estimates after the warm-up and after every run; the per-question replies in
``adaptive/real-stack-predictions.jsonl``."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.local_server import config_args, deploy
from harness.paths import RESULTS
from harness.results import shown

from ...cells import cell, shares_text
from ...load import stats
from ...plans import plan_shares, plans_of
from ...scenario import Bench
from ...summary import median

PREDICTIONS = RESULTS / "adaptive" / "real-stack-predictions.jsonl"
CONCURRENCY = 8
WARM_UP = 300
ADAPTIVE, SEQUENTIAL, FULL_RT, LARGE_REASON = "mai", "mai-sequential", "mai-transfer", "mai-large-reason"
RUNS = {
    ADAPTIVE: "mai",
    SEQUENTIAL: "mai-sequential=mai:plan=sequential",
    FULL_RT: "mai-transfer",
    LARGE_REASON: "mai-large-reason",
}
# Adaptive mai at most 0.75x Full RT's wall time, its accuracy's point estimate no lower than Full RT's
# (the paired 95 % interval of the difference is reported beside it).
GOAL = {"wall_vs_full_rt": 0.75, "accuracy_below_full_rt_points": 0.0}


@dataclass(frozen=True)
class Parameters:
    questions: int = 1000
    repetitions: int = 3


def verdict(
    table: Mapping[str, Any], walls: Mapping[str, Sequence[float]], rows: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The goal's figures from the medians of the repetitions, and whether each is met; the accuracy
    difference from Full RT with its paired 95 % interval (per question, over the repetitions)."""
    from evaluation.scoring import bootstrap_interval

    wall = {name: median(list(values)) for name, values in walls.items()}
    accuracy = {name: entry["accuracy_pct"] for name, entry in table.items()}
    vs_full = wall[ADAPTIVE] / wall[FULL_RT]
    vs_sequential = wall[ADAPTIVE] / wall[SEQUENTIAL]
    below = accuracy[FULL_RT] - accuracy[ADAPTIVE]
    per_question: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        if row.get("score") is not None:
            per_question[row["id"]][row["policy"]].append(row["score"])
    differences = [
        statistics.fmean(scores[ADAPTIVE]) - statistics.fmean(scores[FULL_RT])
        for scores in per_question.values()
        if scores.get(ADAPTIVE) and scores.get(FULL_RT)
    ]
    return {
        "wall_vs_full_rt": round(vs_full, 3),
        "wall_vs_sequential": round(vs_sequential, 3),
        "accuracy_below_full_rt_points": round(below, 2),
        "accuracy_difference_vs_full_rt_95ci": bootstrap_interval(differences) if differences else None,
        "met": {
            "wall_vs_full_rt": vs_full <= GOAL["wall_vs_full_rt"],
            "accuracy": below <= GOAL["accuracy_below_full_rt_points"],
        },
        "goal": GOAL,
    }


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, questions, repetitions = bench.url, parameters.questions, parameters.repetitions
    from evaluation.records import load_records
    from harness.datasets import dataset_file, easy_vqa_records

    from ...real_stack import aggregate, measure, run_once
    from ...schedule import run_order
    from ...summary import spread

    data = dataset_file(
        f"easy-vqa-test-{questions + WARM_UP}.jsonl", lambda: easy_vqa_records("test", questions + WARM_UP)
    )
    records = load_records(data)
    scored, warm_up = records[:questions], records[questions:]
    deploy(config_args("mai-cpu.yaml"))
    for run in RUNS.values():  # every path compiled and connected before anything is learnt or timed
        asyncio.run(run_once(url, warm_up[:4], data.parent, run, 4))
    started = time.monotonic()
    asyncio.run(run_once(url, warm_up, data.parent, RUNS[ADAPTIVE], CONCURRENCY))
    print(
        f"warm-up: {len(warm_up)} questions through mai in {time.monotonic() - started:.0f} s",
        file=sys.stderr,
    )
    after_warm_up = plans_of(stats(url))
    runs, rows_kept, estimates = [], [], []
    order = run_order(list(RUNS), (CONCURRENCY,), repetitions)
    for number, (repetition, _, name) in enumerate(order, start=1):
        rows, wall = asyncio.run(run_once(url, scored, data.parent, RUNS[name], CONCURRENCY))
        run = measure(rows, wall) | {"policy": name, "concurrency": CONCURRENCY, "repetition": repetition}
        run["plan_shares"] = plan_shares(rows)
        runs.append(run)
        rows_kept += [_kept(row, repetition) for row in rows]
        estimates.append({"after": f"rep {repetition + 1} {name}", "classes": plans_of(stats(url))})
        print(
            f"[{number}/{len(order)}] rep {repetition + 1} {name}: wall {wall:.1f} s, "
            f"p50 {run['p50_s']} s, {run['errors']} errors, plans {run['plan_shares']}",
            file=sys.stderr,
            flush=True,
        )
    table = aggregate(runs)
    walls = {name: [run["wall_s"] for run in runs if run["policy"] == name] for name in RUNS}
    for name, entry in table.items():
        entry["wall_s"] = spread(walls[name], 3)
        entry["plan_shares"] = [run["plan_shares"] for run in runs if run["policy"] == name]
    PREDICTIONS.parent.mkdir(parents=True, exist_ok=True)
    with PREDICTIONS.open("w") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows_kept)
    return {
        "questions": questions,
        "warm_up_questions": len(warm_up),
        "concurrency": CONCURRENCY,
        "repetitions": repetitions,
        "runs_as": RUNS,
        "order": "per repetition every run once, the order rotated by one from the last",
        "dataset": shown(data),
        "verdict": verdict(table, walls, rows_kept),
        "policies": table,
        "controller_after_warm_up": after_warm_up,
        "controller_after_each_run": estimates,
        "runs": [{key: value for key, value in run.items() if key != "scores"} for run in runs],
    }


def _kept(row: Mapping[str, Any], repetition: int) -> dict[str, Any]:
    keys = ("id", "policy", "status", "latency_s", "answer", "score", "route", "plan", "kind")
    return {key: row.get(key) for key in keys} | {"repetition": repetition}


def table(result: dict[str, Any]) -> list[str]:
    policies, outcome, goal = result["policies"], result["verdict"], result["verdict"]["goal"]
    lines = [
        f"`configs/mai-cpu.yaml` as served: {result['questions']} seeded easy-vqa test questions at "
        f"concurrency {result['concurrency']}, after {result['warm_up_questions']} unscored others through "
        "`mai`; adaptive `mai`, `mai` forced to the paper's `sequential` plan (`mai-sequential`), Full RT "
        f"(`mai-transfer`) and large-reason, {result['repetitions']} repetitions with the order rotated. "
        "Wall time, throughput and latency: median [min–max] over repetitions; accuracy pools every "
        "answer (95 % bootstrap interval over questions).",
        "",
        "| policy | accuracy % | wall s | requests/s | p50 s | p99 s | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for policy, entry in policies.items():
        cells = entry["by_concurrency"]
        at = cells.get(str(result["concurrency"])) or next(iter(cells.values()))
        low, high = entry["accuracy_interval_pct"]
        lines.append(
            f"| `{policy}` | {entry['accuracy_pct']:.1f} [{low:.1f}–{high:.1f}] | "
            f"{cell(entry['wall_s'], 1)} | {cell(at['requests_per_s'], 1)} | {cell(at['p50_s'], 2)} | "
            f"{cell(at['p99_s'], 2)} | {at['errors']} of {at['requests']} |"
        )
    met = {key: "met" if value else "not met" for key, value in outcome["met"].items()}
    interval = outcome.get("accuracy_difference_vs_full_rt_95ci")
    paired = f"; paired 95 % interval {interval[0]:+.1f} to {interval[1]:+.1f}" if interval else ""
    lines += [
        "",
        f"Goal: adaptive `mai` at most {goal['wall_vs_full_rt']:.2f}× Full RT's median wall time, its "
        f"accuracy no lower than Full RT's. Wall time **{outcome['wall_vs_full_rt']:.2f}×** Full RT's "
        f"({met['wall_vs_full_rt']}; {outcome['wall_vs_sequential']:.2f}× sequential's); accuracy "
        f"**{-outcome['accuracy_below_full_rt_points']:+.1f} points** against Full RT's "
        f"({met['accuracy']}{paired}, question by question).",
    ]
    adaptive = policies.get(ADAPTIVE, {}).get("plan_shares") or []
    warm = result["controller_after_warm_up"]
    after = result["controller_after_each_run"]
    final = after[-1]["classes"] if after else {}
    lines += [
        "",
        f"| class | controller's plan after the warm-up | after the last run | `{ADAPTIVE}`'s plans, median "
        "share over repetitions |",
        "|---|---|---|---|",
    ]
    for cls in sorted({cls for shares in adaptive for cls in shares} | set(warm)):
        plans = sorted({plan for shares in adaptive for plan in shares.get(cls, {})})
        medians = {plan: statistics.median(s.get(cls, {}).get(plan, 0.0) for s in adaptive) for plan in plans}
        lines.append(
            f"| {cls} | {warm.get(cls, {}).get('plan') or '–'} | {final.get(cls, {}).get('plan') or '–'} | "
            f"{shares_text(medians, 1)} |"
        )
    return lines
