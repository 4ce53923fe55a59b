"""bench/RESULTS.md from the result files in bench/results/: every scenario's section (its table and the
provenance line of the file), then the sections other commands' files fill. `make bench` renders it
after every scenario; the docs link here instead of copying tables.

    python -m loadtest.bench --render      # only re-render, from the committed results
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.paths import RESULTS_SUMMARY

from .evaluations import EVALUATION_SECTIONS
from .external import (
    AUDIT_TRUTH_SECTION,
    BODY_PRECHECK_SECTION,
    FAULTS_SECTION,
    FUZZ_CPU_SECTION,
    FUZZ_SECTION,
    GRAMMAR_LIMITS_SECTION,
)
from .scenario import Scenario
from .scenarios import SCENARIOS

HEADER = [
    "# Benchmark results",
    "",
    "Written by `make bench` (`python -m loadtest.bench`) from `bench/results/*.json`; the fault "
    "drills, fuzzing and the evaluations at the end by their own commands. How to read it: "
    "`docs/benchmarks.md`.",
    "",
]


def sections() -> list[Scenario]:
    """Every section of RESULTS.md, in order: the scenarios, each file another command writes beside
    the scenarios it belongs with, then the drills and the evaluations."""
    order = list(SCENARIOS.values())
    order.insert(order.index(SCENARIOS["audit_load"]) + 1, AUDIT_TRUTH_SECTION)
    return [
        *order,
        FAULTS_SECTION,
        FUZZ_SECTION,
        FUZZ_CPU_SECTION,
        BODY_PRECHECK_SECTION,
        GRAMMAR_LIMITS_SECTION,
        *EVALUATION_SECTIONS,
    ]


def provenance_line(result: dict[str, Any], path: str) -> str:
    """Where a section's figures come from: the file, the command, when and how long, the commit and
    what it served."""
    meta = result["meta"]
    made_with = ""
    if meta.get("commit"):
        changed = " with uncommitted changes" if meta.get("uncommitted_changes") else ""
        checkpoints = ", ".join(f"{role} {ckpt}" for role, ckpt in meta.get("checkpoints", {}).items())
        served = f", `{meta['config']}`" if meta.get("config") else ""
        served += f" ({checkpoints})" if served and checkpoints else ""
        made_with = f" Commit {meta['commit'][:10]}{changed}{served}."
    elif meta.get("config"):
        made_with = f" `{meta['config']}`."
    cpus = f", {meta['machine']['cpus']} CPUs" if meta.get("machine") else ""
    took = f", {meta['duration_s']} s{cpus}" if meta.get("duration_s") is not None else cpus
    when = f" — run {meta['started']}{took}" if meta.get("started") else ""
    if not when and meta.get("duration_s") is not None:
        when = f" — {meta['duration_s']} s{cpus}"
    # A command that no longer exists, kept as run: why, and the nearest command now.
    replaced = (
        f" {meta['command_note']} Nearest now: `{meta['command_now']}`." if meta.get("command_note") else ""
    )
    return f"Source: `bench/results/{path}`. Command: `{meta['command']}`{when}.{made_with}{replaced}"


def section(scenario: Scenario) -> list[str]:
    lines = [f"## {scenario.title}", ""]
    if not scenario.path.exists():
        return [*lines, f"Not run yet: `{scenario.rerun()}`.", ""]
    result = json.loads(scenario.path.read_text())
    return [*lines, *scenario.table(result), "", provenance_line(result, scenario.result), ""]


def render_report() -> str:
    """bench/RESULTS.md as the result files give it."""
    lines = list(HEADER)
    for scenario in sections():
        lines += section(scenario)
    return "\n".join(lines)


def write_report() -> Path:
    RESULTS_SUMMARY.write_text(render_report())
    return RESULTS_SUMMARY
