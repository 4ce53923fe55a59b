"""batch: ``mai-batch`` against the HTTP server on the real CPU stack (configs/mai-cpu.yaml, deployed
in process as app ``mai``), then its memory at ten times the rows on the emulated tier.

The questions are the 1,000 easy-vqa test questions of the demo's seeded sample,
``easy_vqa_records("test", 1000)``: the easy-vqa part of the test set ``make eval-demo`` scores (its
file adds 500 balanced yes/no questions on the same images, left out here). The warm-up and the
server's probe take the next questions of the same seeded order, never any of the 1,000.

Three arms: batch ``mai`` and batch Full RT (``mai-transfer``), each ``mai-batch --attach mai`` run
as a user runs it (the installed console script in a subprocess joining the bench's own Ray), and the
server driven by mai-eval's client at its best concurrency of 8, 16 and 32 (a probe of ``probe``
other questions each, rows/s). The 1,000 questions are split into ``blocks`` blocks; every arm runs
each block, the arms' order rotated from block to block; every run has its own input and output
folder. A batch run's wall time is the command's own (rows only: from the first read to the last
line); the whole command's time, with the process's start and its connection to the cluster, is kept
beside it.

Per arm: wall time and rows/s (answered rows), accuracy over the 1,000 with its 95 % interval, routes,
tokens per model, and where the time goes: each model's engine busy share (its stages' latencies
summed over the wall). Batch arms also: rows asked again, driver and actor peak RSS, one block's Ray
Data execution stats. Ray Data's own overhead (wall minus the rows' span) is left out: a prediction
row carries its latency but not when it started or ended, so the rows' span cannot be read from them.

The memory phase (``memory``) runs after the real stack is deleted: configs/mai-emulated.yaml (app
``mai``, models ``emulated-qwen3-vl-2b`` and ``emulated-qwen3-vl-8b``), batch ``mai`` over the 1,000
questions and over ``memory_rows`` rows made by repeating them with fresh ids. Its engines' answers
are scripted: it measures the batch plumbing's memory only, never accuracy.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.local_server import config_args, deploy
from harness.paths import CONFIGS, ROOT
from harness.results import shown

from ..batch_arms import (
    ARMS,
    BATCH_MAI,
    PEAKS,
    answered,
    best_concurrency,
    block_order,
    compare_arms,
    memory_run,
    memory_verdict,
    ray_env,
    repeated_records,
    run_mai_batch,
    split_blocks,
)
from ..cells import cell, shares_text
from ..scenario import Bench, Scenario

REAL_CONFIG, EMULATED_CONFIG = "mai-cpu.yaml", "mai-emulated.yaml"
PROBE_CONCURRENCIES = (8, 16, 32)
WARM_UP = 16  # questions: 4 through the server per policy, all 16 through each batch arm
LABELS = {"batch-mai": "batch `mai`", "batch-full-rt": "batch Full RT", "server-mai": "server `mai`"}


@dataclass(frozen=True)
class Parameters:
    questions: int = 1000
    blocks: int = 4
    probe: int = 96
    memory_rows: int = 10000
    memory: bool = True


def app_of(config: str) -> str:
    """The name of the one application of ``configs/<config>``."""
    [application] = yaml.safe_load((CONFIGS / config).read_text())["applications"]
    return application["name"]


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    import ray

    from harness.datasets import dataset_file, easy_vqa_records
    from harness.jsonl import read_jsonl

    questions, probe = parameters.questions, parameters.probe
    total = questions + len(PROBE_CONCURRENCIES) * probe + WARM_UP
    data = dataset_file(f"easy-vqa-test-{total}.jsonl", lambda: easy_vqa_records("test", total))
    records = read_jsonl(data)
    scored, rest = records[:questions], records[questions:]
    probes = split_blocks(rest[: len(PROBE_CONCURRENCIES) * probe], len(PROBE_CONCURRENCIES))
    env = ray_env(ray.get_runtime_context().gcs_address)
    with tempfile.TemporaryDirectory(prefix="mai-bench-batch-") as tmp:
        stack = RealStack(bench.url, Path(tmp), env, data.parent)
        result = stack.compare(scored, probes, rest[-WARM_UP:], parameters.blocks)
        memory = memory_phase(scored, parameters.memory_rows, Path(tmp), env) if parameters.memory else None
    return {"questions": questions, "dataset": shown(data), **result, "memory": memory}


@dataclass
class RealStack:
    """The real phase's runs: the server through mai-eval's client, the batch arms through the command."""

    url: str
    folder: Path  # every run's input and output
    env: Mapping[str, str]
    images: Path  # where a record's relative image path is read from

    def server(self, records: Sequence[Mapping[str, Any]], policy: str, concurrency: int):
        from evaluation.records import EvalRecord

        from ..real_stack import run_once

        asked = [EvalRecord.model_validate(record) for record in records]
        return asyncio.run(run_once(self.url, asked, self.images, policy, concurrency))

    def batch(self, records: Sequence[Mapping[str, Any]], name: str, policy: str) -> dict[str, Any]:
        from harness.jsonl import write_jsonl

        data = self.folder / f"{name}.jsonl"
        if not data.exists():  # a block's records: one file both batch arms read
            write_jsonl(records, data)
        config = CONFIGS / REAL_CONFIG
        out = self.folder / f"{name}-{policy}"
        return run_mai_batch(
            data, out, policy, config=config, app=app_of(REAL_CONFIG), env=self.env, cwd=ROOT
        )

    def compare(
        self,
        scored: Sequence[Mapping[str, Any]],
        probes: Sequence[Sequence[Mapping[str, Any]]],
        warm_up: Sequence[Mapping[str, Any]],
        blocks: int,
    ) -> dict[str, Any]:
        deploy(config_args(REAL_CONFIG), name=app_of(REAL_CONFIG))
        for policy in sorted({arm.policy for arm in ARMS}):  # every path compiled before anything is timed
            self.server(warm_up[:4], policy, 4)
        for arm in ARMS:
            if arm.via == "batch":
                self.batch(warm_up, "warm-up", arm.policy)
        probe = []
        for concurrency, asked in zip(PROBE_CONCURRENCIES, probes, strict=True):
            rows, wall = self.server(asked, BATCH_MAI.policy, concurrency)
            ok = len(answered(rows))
            probe.append(
                {
                    "concurrency": concurrency,
                    "questions": len(asked),
                    "wall_s": round(wall, 3),
                    "rows_per_s": round(ok / wall, 3) if wall > 0 else None,
                    "errors": len(rows) - ok,
                }
            )
        best = best_concurrency(probe)
        print(f"server probe: {probe}; best concurrency {best}", file=sys.stderr, flush=True)
        parts = split_blocks(scored, blocks)
        runs: dict[str, list[dict[str, Any]]] = {arm.name: [] for arm in ARMS}
        order = block_order(ARMS, len(parts))
        for number, (block, arm) in enumerate(order, start=1):
            if arm.via == "batch":
                done = self.batch(parts[block], f"block-{block}", arm.policy)
            else:
                rows, wall = self.server(parts[block], arm.policy, best)
                done = {"wall_s": round(wall, 3), "rows": rows, "summary": None, "command_s": None}
            runs[arm.name].append(done | {"block": block})
            print(
                f"[{number}/{len(order)}] block {block + 1} {arm.name}: {len(done['rows'])} rows, "
                f"wall {done['wall_s']:.1f} s"
                + (f", command {done['command_s']:.1f} s" if done["command_s"] else ""),
                file=sys.stderr,
                flush=True,
            )
        return {
            "config": f"configs/{REAL_CONFIG}",
            "blocks": len(parts),
            "block_sizes": [len(part) for part in parts],
            "warm_up_questions": len(warm_up),
            "probe": {"questions_per_concurrency": len(probes[0]), "runs": probe, "best_concurrency": best},
            "server_concurrency": best,
            "order": "per block every arm runs it once, the arms' order rotated by one from the last block",
            **compare_arms(runs),
            "runs": [
                {
                    "block": run["block"],
                    "arm": name,
                    "wall_s": run["wall_s"],
                    "rows": len(run["rows"]),
                    "answered": len(answered(run["rows"])),
                    "command_s": run["command_s"],
                }
                for name, arm_runs in runs.items()
                for run in arm_runs
            ],
        }


def memory_phase(
    scored: Sequence[Mapping[str, Any]], memory_rows: int, folder: Path, env: Mapping[str, str]
) -> dict[str, Any]:
    """Batch ``mai`` on the emulated tier at the questions' count and at ``memory_rows``: its peaks."""
    from ray import serve

    from harness.jsonl import write_jsonl

    serve.delete(app_of(REAL_CONFIG))  # the real stack's engines stop before the emulated ones start
    app = app_of(EMULATED_CONFIG)
    deploy(config_args(EMULATED_CONFIG), name=app)
    runs = []
    for rows in sorted({len(scored), memory_rows}):
        data = folder / f"memory-{rows}.jsonl"
        write_jsonl(repeated_records(scored, rows), data)
        config = CONFIGS / EMULATED_CONFIG
        done = run_mai_batch(
            data, folder / f"memory-{rows}", BATCH_MAI.policy, config=config, app=app, env=env, cwd=ROOT
        )
        runs.append(memory_run(rows, done["summary"], done["command_s"]))
        print(f"memory: {runs[-1]}", file=sys.stderr, flush=True)
    return {"config": f"configs/{EMULATED_CONFIG}", "app": app, "runs": runs, "verdict": memory_verdict(runs)}


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _tokens(counts: Mapping[str, int]) -> str:
    return " / ".join(
        f"{counts.get(kind, 0):,}" for kind in ("prompt_tokens", "cached_tokens", "completion_tokens")
    )


def _route_shares(routes: Mapping[str, int]) -> str:
    total = sum(routes.values())
    return shares_text({route: count / total for route, count in routes.items()}) if total else "–"


def table(result: dict[str, Any]) -> list[str]:
    arms, outcome, goal = result["arms"], result["verdict"], result["verdict"]["goal"]
    probe = result["probe"]
    probed = ", ".join(f"{run['rows_per_s']:.2f} at {run['concurrency']}" for run in probe["runs"])
    lines = [
        f"`{result['config']}` in process: the {result['questions']:,} easy-vqa test questions of the demo's "
        f"seeded sample in {result['blocks']} blocks; every arm runs each block, the order rotated from "
        "block to block. Batch: `mai-batch --attach mai` as a subprocess on the bench's Ray (wall: rows "
        "only, first read to last line; *command s*: the whole command with its start). Server: mai-eval's "
        f"client at concurrency {result['server_concurrency']}, the best rows/s of a probe on "
        f"{probe['questions_per_concurrency']} other questions per concurrency ({probed}). Wall: sum over "
        "blocks; rows/s: answered rows over it; accuracy over the questions answered (95 % bootstrap "
        "interval). *start s*: a batch job's time to its first lines (the actors' start, their first "
        "calls), and *steady rows/s* its rate after them (medians over blocks).",
        "",
        "| arm | accuracy % | wall s | rows/s | start s | steady rows/s | errors | retried | command s "
        "| driver peak MB | actor peak MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, entry in arms.items():
        interval = entry["accuracy_interval_pct"]
        accuracy = (
            "–" if interval is None else f"{entry['accuracy_pct']:.1f} [{interval[0]:.1f}–{interval[1]:.1f}]"
        )
        retried = entry["retried"] if entry["via"] == "batch" else "–"
        lines.append(
            f"| {LABELS.get(name, name)} | {accuracy} | {entry['wall_s']:.1f} | "
            f"{_n(entry['rows_per_s'], 2)} | {_n(entry.get('first_lines_s'))} | "
            f"{_n(entry.get('steady_rows_per_s'), 2)} | {entry['errors']} of {entry['rows']} | {retried} | "
            f"{_n(entry.get('command_s'))} | {_n(entry.get('driver_peak_rss_mb'), 0)} | "
            f"{_n(entry.get('actor_peak_rss_mb'), 0)} |"
        )
    met = {key: "met" if value else "not met" for key, value in outcome["met"].items()}
    ratios, paired = result["block_ratios"], result["paired_vs_full_rt"]
    interval = outcome.get("accuracy_difference_vs_full_rt_95ci")
    paired_text = f"; paired 95 % interval {interval[0]:+.1f} to {interval[1]:+.1f}" if interval else ""
    wall_blocks = _cell(ratios["wall_batch_mai_vs_batch_full_rt"])
    rate_blocks = _cell(ratios["rows_per_s_batch_mai_vs_server"])
    lines += [
        "",
        f"Goal: batch `mai` at most {goal['wall_vs_full_rt']:.2f}× batch Full RT's wall time with its "
        "accuracy no lower, and at least the server's rows/s. Wall time "
        f"**{outcome['wall_vs_full_rt']:.2f}×** batch Full RT's ({met['wall_vs_full_rt']}; per block "
        f"{wall_blocks}); accuracy **{_signed(outcome['accuracy_below_full_rt_points'])} points** against "
        f"batch Full RT's ({met['accuracy']}{paired_text}, {paired['questions']} questions); rows/s "
        f"**{_n(outcome['rows_per_s_vs_server'], 2)}×** the server's ({met['rows_per_s_vs_server']}; per "
        f"block {rate_blocks}).",
        "",
        "Where the time goes: a model's busy share is its stages' latencies summed over the wall (its stages "
        "in flight on average: over 1 when calls share the engine's batch). Ray Data's own overhead is not "
        "shown: a prediction row has its latency, not when it started. Tokens: prompt / cached / completion.",
        "",
        "| arm | small busy | large busy | small tokens | large tokens | routes |",
        "|---|---|---|---|---|---|",
    ]
    for name, entry in arms.items():
        busy, tokens = entry["busy_share"], entry["tokens"]
        lines.append(
            f"| {LABELS.get(name, name)} | {_n(busy.get('small'), 2)} | {_n(busy.get('large'), 2)} | "
            f"{_tokens(tokens.get('small', {}))} | {_tokens(tokens.get('large', {}))} | "
            f"{_route_shares(entry['routes'])} |"
        )
    lines += _memory_lines(result.get("memory"))
    lines += _stats_lines(arms.get(BATCH_MAI.name, {}).get("ray_data_stats"))
    return lines


def _cell(spread: Mapping[str, float] | None) -> str:
    return "–" if not spread else cell(dict(spread), 2) + "×"


def _signed(points: float | None) -> str:
    return "–" if points is None else f"{-points:+.1f}"


def _memory_lines(memory: Mapping[str, Any] | None) -> list[str]:
    if not memory:
        return ["", "Memory at more rows: not run (`--param memory=false`)."]
    outcome = memory["verdict"]
    ratios = ", ".join(f"{key.split('_')[0]} {_n(ratio, 2)}×" for key, ratio in outcome["ratios"].items())
    met = {True: "met", False: "not met", None: "not measured"}[outcome["met"]]
    lines = [
        "",
        f"Memory, after the real stack is deleted: `{memory['config']}` (emulated engines, scripted answers: "
        "the batch plumbing's memory only, never accuracy), batch `mai` over the questions and over them "
        "repeated with fresh ids.",
        "",
        "| rows | wall s | rows/s | errors | retried | driver peak MB | actor peak MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in memory["runs"]:
        lines.append(
            f"| {run['rows']:,} | {_n(run['wall_s'])} | {_n(run['rows_per_s'], 2)} | {run['errors']} | "
            f"{run['retried']} | " + " | ".join(_n(run.get(key), 0) for key in PEAKS) + " |"
        )
    fewest, most = outcome["rows"]
    lines += [
        "",
        f"Goal: the peaks at {most:,} rows within {outcome['goal']:.2f}× those at {fewest:,} (rows streamed, "
        f"never collected): {ratios} ({met}).",
    ]
    return lines


def _stats_lines(stats: Mapping[str, Any] | None) -> list[str]:
    if not stats:
        return []
    return [
        "",
        f"<details><summary>Ray Data's execution stats, batch <code>mai</code>, block {stats['block'] + 1}"
        "</summary>",
        "",
        "```text",
        *str(stats["text"]).rstrip().splitlines(),
        "```",
        "",
        "</details>",
    ]


SCENARIO = Scenario(
    name="batch",
    title="mai-batch against the server on the real stack",
    result="batch.json",
    config=REAL_CONFIG,
    run=run,
    table=table,
    parameters=Parameters(),
)
