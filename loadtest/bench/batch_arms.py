"""The batch scenario's arms and arithmetic: ``mai-batch`` run as a user runs it (a subprocess of the
installed console script, attached to the bench's own Ray and its running app), the blocks and their
rotated order, and what the prediction rows and summaries of each arm add up to.

Everything but ``run_mai_batch`` is pure, so the scenario's figures are tested on made-up rows."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from serve_app.core.roles import ROLES
from serve_app.core.trace import TOKEN_FIELDS

from .schedule import rotated
from .summary import spread

Item = TypeVar("Item")

MAI_BATCH = Path(sys.executable).with_name("mai-batch")


@dataclass(frozen=True)
class Arm:
    name: str
    policy: str
    via: str  # "batch": mai-batch attached to the app; "server": mai-eval's client over HTTP


BATCH_MAI = Arm("batch-mai", "mai", "batch")
BATCH_FULL_RT = Arm("batch-full-rt", "mai-transfer", "batch")
SERVER_MAI = Arm("server-mai", "mai", "server")
ARMS = (BATCH_MAI, BATCH_FULL_RT, SERVER_MAI)

# Batch mai at most 0.7x batch Full RT's wall time with an accuracy point estimate no lower (its paired
# 95 % interval reported beside it), and at least the server's throughput at its best concurrency.
GOAL = {"wall_vs_full_rt": 0.7, "accuracy_below_full_rt_points": 0.0, "rows_per_s_vs_server": 1.0}
# Streamed, never collected: the peak at the most rows within this multiple of the peak at the fewest.
MEMORY_GOAL = 1.25
PEAKS = ("driver_peak_rss_mb", "actor_peak_rss_mb")


def split_blocks(items: Sequence[Item], blocks: int) -> list[list[Item]]:
    """``items`` in ``blocks`` consecutive blocks whose sizes differ by at most one (the first ones
    larger), every item in exactly one."""
    if not 1 <= blocks <= len(items):
        raise ValueError(f"{len(items)} items cannot make {blocks} blocks")
    size, extra = divmod(len(items), blocks)
    out, start = [], 0
    for block in range(blocks):
        end = start + size + (block < extra)
        out.append(list(items[start:end]))
        start = end
    return out


def block_order(arms: Sequence[Item], blocks: int) -> list[tuple[int, Item]]:
    """(block, arm) in the order they run: every arm runs each block, the arms' order rotated by one
    from one block to the next, so that drift on a noisy machine falls on every arm alike."""
    return [(block, arm) for block in range(blocks) for arm in rotated(arms, block)]


def repeated_records(records: Sequence[Mapping[str, Any]], rows: int) -> list[dict[str, Any]]:
    """``rows`` records cycling through ``records``, each with a fresh id (``<id>#<round>``)."""
    return [
        dict(
            records[index % len(records)], id=f"{records[index % len(records)]['id']}#{index // len(records)}"
        )
        for index in range(rows)
    ]


def answered(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [row for row in rows if row.get("status") == 200]


def model_seconds(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Per model, its stages' latencies summed over the answered rows (a stage without one counts 0)."""
    seconds = dict.fromkeys(ROLES, 0.0)
    for row in answered(rows):
        for stage in row.get("stages") or []:
            if stage.get("model") in seconds:
                seconds[stage["model"]] += stage.get("latency_s") or 0.0
    return seconds


def busy_shares(rows: Sequence[Mapping[str, Any]], wall_s: float) -> dict[str, float | None]:
    """Per model, its stage-seconds over the wall time: the mean number of that model's stages in
    flight (over 1 when its calls overlap in the engine's batch)."""
    return {
        model: round(seconds / wall_s, 3) if wall_s > 0 else None
        for model, seconds in model_seconds(rows).items()
    }


def tokens_of(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per model, prompt, cached and completion tokens summed over the answered rows' stages."""
    tokens = {model: dict.fromkeys(TOKEN_FIELDS, 0) for model in ROLES}
    for row in answered(rows):
        for stage in row.get("stages") or []:
            if stage.get("model") in tokens:
                for field in TOKEN_FIELDS:
                    tokens[stage["model"]][field] += stage.get(field) or 0
    return tokens


def scores_by_id(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    return {row["id"]: row["score"] for row in answered(rows) if row.get("score") is not None}


def accuracy(scores: Mapping[str, float]) -> dict[str, Any]:
    """Accuracy over the questions answered, with its 95 % bootstrap interval over questions."""
    from evaluation.scoring import bootstrap_interval

    values = list(scores.values())
    return {
        "accuracy_pct": round(100 * statistics.fmean(values), 2) if values else None,
        "accuracy_interval_pct": [round(b, 2) for b in bootstrap_interval(values)] if values else None,
        "questions": len(values),
    }


def paired_difference(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, Any]:
    """``a``'s score minus ``b``'s, question by question over those both answered: the mean in points
    and its 95 % bootstrap interval."""
    from evaluation.scoring import bootstrap_interval

    differences = [a[question] - b[question] for question in a if question in b]
    return {
        "points": round(100 * statistics.fmean(differences), 2) if differences else None,
        "interval_95": [round(x, 2) for x in bootstrap_interval(differences)] if differences else None,
        "questions": len(differences),
    }


def peak(values: Sequence[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return max(present) if present else None


def arm_figures(arm: Arm, blocks: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One arm over its blocks (each ``{"block", "wall_s", "rows", "summary", "command_s"}``): total wall
    and rows/s of the answered rows, accuracy, routes, tokens and busy share per model; a batch arm's
    retries, peak memory (max over blocks), whole-command time and one block's Ray Data stats."""
    rows = [row for block in blocks for row in block["rows"]]
    ok = answered(rows)
    wall = sum(block["wall_s"] for block in blocks)
    figures: dict[str, Any] = {
        "policy": arm.policy,
        "via": arm.via,
        "rows": len(rows),
        "answered": len(ok),
        "errors": len(rows) - len(ok),
        "wall_s": round(wall, 3),
        "rows_per_s": round(len(ok) / wall, 3) if wall > 0 else None,
        "block_wall_s": [block["wall_s"] for block in blocks],
        **accuracy(scores_by_id(rows)),
        "routes": dict(Counter(str(row.get("route")) for row in ok).most_common()),
        "tokens": tokens_of(rows),
        "busy_share": busy_shares(rows, wall),
    }
    if arm.via == "batch":
        summaries = [block.get("summary") or {} for block in blocks]
        stats = [
            (block["block"], s.get("ray_data_stats")) for block, s in zip(blocks, summaries, strict=True)
        ]
        shown = [entry for entry in stats if entry[1]]
        figures |= {
            "retried": sum(s.get("retried", 0) for s in summaries),
            **{key: peak([s.get(key) for s in summaries]) for key in PEAKS},
            "command_s": round(sum(block.get("command_s") or 0.0 for block in blocks), 3),
            # A job's start (actors up, first rows answered) and its rate after it: medians over blocks.
            "first_lines_s": _median([s.get("first_line_s", s.get("first_lines_s")) for s in summaries]),
            "steady_rows_per_s": _median([s.get("steady_rows_per_s") for s in summaries]),
            "ray_data_stats": {"block": shown[-1][0], "text": shown[-1][1]} if shown else None,
        }
    return figures


def _median(values: Sequence[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return round(statistics.median(known), 3) if known else None


def block_ratios(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], numerator: str, denominator: str, metric: str
) -> dict[str, float] | None:
    """Per block, ``numerator``'s ``metric`` over ``denominator``'s (``wall_s``, or ``rows_per_s`` of
    the answered rows): median [min–max] over blocks."""

    def value(run: Mapping[str, Any]) -> float | None:
        if metric == "wall_s":
            return run["wall_s"]
        return len(answered(run["rows"])) / run["wall_s"] if run["wall_s"] > 0 else None

    a = {run["block"]: value(run) for run in runs[numerator]}
    b = {run["block"]: value(run) for run in runs[denominator]}
    return spread([a[block] / b[block] for block in sorted(a) if a[block] and b.get(block)], 3)


def verdict(arms: Mapping[str, Mapping[str, Any]], paired: Mapping[str, Any]) -> dict[str, Any]:
    """The goals (``GOAL``) on the totals over blocks, and whether each is met."""
    mai, full, server = arms[BATCH_MAI.name], arms[BATCH_FULL_RT.name], arms[SERVER_MAI.name]
    vs_full = mai["wall_s"] / full["wall_s"]
    vs_server = mai["rows_per_s"] / server["rows_per_s"] if server["rows_per_s"] else None
    below = (
        full["accuracy_pct"] - mai["accuracy_pct"]
        if full["accuracy_pct"] is not None and mai["accuracy_pct"] is not None
        else None
    )
    return {
        "wall_vs_full_rt": round(vs_full, 3),
        "accuracy_below_full_rt_points": None if below is None else round(below, 2),
        "accuracy_difference_vs_full_rt_95ci": paired.get("interval_95"),
        "rows_per_s_vs_server": None if vs_server is None else round(vs_server, 3),
        "met": {
            "wall_vs_full_rt": vs_full <= GOAL["wall_vs_full_rt"],
            "accuracy": below is not None and below <= GOAL["accuracy_below_full_rt_points"],
            "rows_per_s_vs_server": vs_server is not None and vs_server >= GOAL["rows_per_s_vs_server"],
        },
        "goal": GOAL,
    }


def memory_verdict(runs: Sequence[Mapping[str, Any]], limit: float = MEMORY_GOAL) -> dict[str, Any]:
    """Each peak at the most rows over the same peak at the fewest; met when every ratio is within
    ``limit`` (None when a run did not report a peak)."""
    fewest, most = min(runs, key=lambda run: run["rows"]), max(runs, key=lambda run: run["rows"])
    ratios = {
        key: round(most[key] / fewest[key], 3) if most.get(key) and fewest.get(key) else None for key in PEAKS
    }
    known = [ratio for ratio in ratios.values() if ratio is not None]
    return {
        "rows": [fewest["rows"], most["rows"]],
        "ratios": ratios,
        "met": all(ratio <= limit for ratio in known) if len(known) == len(PEAKS) else None,
        "goal": limit,
    }


def ray_env(gcs_address: str) -> dict[str, str]:
    """The environment ``mai-batch`` joins the bench's own Ray with."""
    return {**os.environ, "RAY_ADDRESS": gcs_address, "RAY_AUTH_MODE": "disabled"}


def mai_batch_command(data: str, out: str, policy: str, *, config: Path, app: str) -> list[str]:
    """The installed ``mai-batch DATA --output OUT --config CONFIG --attach APP --policy POLICY
    --cache off --no-progress``; ``data`` and ``out`` as a user types them (a path, a glob, a URI).
    Without the answer cache: every row runs the cascade (the memory phase repeats rows)."""
    command = [str(MAI_BATCH), data, "--output", out, "--config", str(config)]
    return command + ["--attach", app, "--policy", policy, "--cache", "off", "--no-progress"]


def run_mai_batch(
    data: Path, out: Path, policy: str, *, config: Path, app: str, env: Mapping[str, str], cwd: Path
) -> dict[str, Any]:
    """``mai-batch DATA --output OUT --config CONFIG --attach APP --policy POLICY``, as a user runs it:
    the prediction rows, the summary, its wall time (rows only) and the whole command's."""
    from harness.jsonl import read_jsonl

    rows = sum(1 for line in data.open() if line.strip())
    command = mai_batch_command(str(data), str(out), policy, config=config, app=app)
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=600 + 2.0 * rows
    )
    elapsed = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    summary = json.loads((out / "summary.json").read_text())
    predictions = read_jsonl(out / "predictions" / f"{policy}.jsonl", skip_truncated=True)
    return {
        "wall_s": summary["wall_s"],
        "rows": predictions,
        "summary": summary,
        "command_s": round(elapsed, 3),
    }


def best_concurrency(probe: Sequence[Mapping[str, Any]]) -> int:
    """The probed concurrency with the most answered rows per second (the lowest on a tie)."""
    best = max(probe, key=lambda run: (run["rows_per_s"] or 0.0, -run["concurrency"]))
    return best["concurrency"]


def compare_arms(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Every arm's figures (``arm_figures``), batch mai's paired accuracy difference from batch Full
    RT, the per-block ratios and the verdict."""
    arms = {arm.name: arm_figures(arm, runs[arm.name]) for arm in ARMS}
    rows = {name: [row for run in runs[name] for row in run["rows"]] for name in runs}
    paired = paired_difference(scores_by_id(rows[BATCH_MAI.name]), scores_by_id(rows[BATCH_FULL_RT.name]))
    return {
        "arms": arms,
        "paired_vs_full_rt": paired,
        "block_ratios": {
            "wall_batch_mai_vs_batch_full_rt": block_ratios(
                runs, BATCH_MAI.name, BATCH_FULL_RT.name, "wall_s"
            ),
            "rows_per_s_batch_mai_vs_server": block_ratios(
                runs, BATCH_MAI.name, SERVER_MAI.name, "rows_per_s"
            ),
        },
        "verdict": verdict(arms, paired),
    }


def memory_run(rows: int, summary: Mapping[str, Any], command_s: float | None) -> dict[str, Any]:
    """What the memory phase keeps of one run: its size, throughput, failures and peaks (no accuracy:
    the emulated engines' answers are scripted)."""
    return {
        "rows": rows,
        "wall_s": summary.get("wall_s"),
        "rows_per_s": summary.get("rows_per_s"),
        "errors": summary.get("errors"),
        "retried": summary.get("retried"),
        **{key: summary.get(key) for key in PEAKS},
        "command_s": command_s,
    }
