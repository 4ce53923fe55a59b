"""adaptive --param variant=shift.

One class whose traffic shifts on the real CPU stack: colour and shape questions, then
yes/no questions sent as open text (the same class, where the demo pair's short answers agree by
luck), then colour and shape again, 600 each at concurrency 8: the plan of every request in order and
how many requests each shift took."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.local_server import config_args, deploy

from ...load import answer_body, ask_plans
from ...plans import PLAN_LEGEND, PLAN_LETTERS, completed_plans, named_now, plans_in_order, settled_after
from ...scenario import Bench


@dataclass(frozen=True)
class Parameters:
    requests_per_phase: int = 600
    concurrency: int = 8


def phase(rows: Sequence[Mapping[str, Any]], dataset: str, wall: float) -> dict[str, Any]:
    """One phase of the stream: the plan it settled on and after how many requests, the stage-1
    share the controller quoted first and last, its plans in order."""
    plans = completed_plans(rows)
    ordered = sorted((row for row in rows if row["status"] == 200), key=lambda row: row["done_at"])
    accepts = [row["stage1_accept"] for row in ordered if row.get("stage1_accept") is not None]
    return {
        "dataset": dataset,
        **settled_after(plans),
        "stage1_accept_quoted": {
            "first": accepts[0] if accepts else None,
            "last": accepts[-1] if accepts else None,
        },
        "wall_s": round(wall, 2),
        "plans_in_order": plans_in_order(plans),
    }


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, per_phase, concurrency = bench.url, parameters.requests_per_phase, parameters.concurrency
    """One class (``text``) whose traffic shifts on the real stack: colour and shape questions, then
    yes/no questions sent as open text (the same class, where the demo pair's short answers agree by
    luck), then colour and shape again; the plan of every request in order."""
    from harness.datasets import easy_vqa_records

    records = list(easy_vqa_records("test"))  # seeded order; colour and shape are a quarter of them
    shapes = [r for r in records if r["answer_type"] != "yes_no"][: per_phase * 2]
    yes_no = [r for r in records if r["answer_type"] == "yes_no"][:per_phase]
    deploy(config_args("mai-cpu.yaml"))
    phases = []
    streams = (
        ("colour and shape", shapes[:per_phase]),
        ("yes/no as text", yes_no),
        ("colour and shape", shapes[per_phase:]),
    )
    for number, (name, stream) in enumerate(streams):
        bodies = [answer_body(r) | {"answer_type": "text"} for r in stream]
        rows, wall = asyncio.run(ask_plans(url, bodies, f"rshift{number}-", concurrency))
        phases.append(phase(rows, name, wall))
        print(
            f"  real shift {name}: {phases[-1]['plan']} after {phases[-1]['requests_until_settled']}",
            file=sys.stderr,
        )
    return {
        "phases": phases,
        "requests_per_phase": per_phase,
        "concurrency": concurrency,
        "class": "text (every question sent with answer_type text)",
        "note": f"plans_in_order: {PLAN_LEGEND}, by completion",
    }


def table(result: dict[str, Any]) -> list[str]:
    names = {letter: plan for plan, letter in PLAN_LETTERS.items()}
    phases = result["phases"]
    lines = [
        f"`configs/mai-cpu.yaml` as served, one deployment throughout; one class, {result['class']}: "
        f"{' → '.join(phase['dataset'] for phase in phases)}, {result['requests_per_phase']} requests a "
        f"phase at concurrency {result['concurrency']}.",
        "",
        "| phase | questions | settled on | requests until settled | stage-1 accept quoted, first → last | "
        "plans (by completion) | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for number, phase in enumerate(phases, start=1):
        counts: dict[str, int] = {}
        for letter in phase["plans_in_order"]:
            counts[names.get(letter, letter)] = counts.get(names.get(letter, letter), 0) + 1
        plans = ", ".join(
            f"{plan} {count}" for plan, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        )
        quoted = phase.get("stage1_accept_quoted") or {}
        accept = " → ".join(
            "–" if quoted.get(end) is None else f"{quoted[end]:.2f}" for end in ("first", "last")
        )
        lines.append(
            f"| {number} | {phase['dataset']} | {named_now(phase['plan']) or '–'} | "
            f"{phase['requests_until_settled']} of {phase['requests']} | {accept} | {plans or '–'} | "
            f"{phase['wall_s']} |"
        )
    lines += [
        "",
        "Requests until settled: how many of the phase's requests finished before every later one that did "
        "not explore ran the plan the phase settled on (0: from its first).",
    ]
    return lines
