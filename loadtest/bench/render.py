"""bench/RESULTS.md from the result files in bench/results/: every scenario's section (its table and the
provenance line of the file), then the sections other commands' files fill. `make bench` renders it
after every scenario; the docs link here instead of copying tables.

    python -m loadtest.bench --render      # only re-render, from the committed results
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from harness.paths import RESULTS_SUMMARY, ROOT

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


# The sections that stand apart from their scenario's (their family's) place: the file whose section
# each follows.
PLACED = {AUDIT_TRUTH_SECTION.result: "audit/audit-load.json", "autoscaling.json": "request_path.json"}


def sections() -> list[Scenario]:
    """Every section of RESULTS.md, in order: the scenarios, each file another command writes beside
    the scenarios it belongs with, then the drills and the evaluations."""
    order = [*(one for scenario in SCENARIOS.values() for one in scenario.each()), AUDIT_TRUTH_SECTION]
    for result, after in PLACED.items():
        moved = next(one for one in order if one.result == result)
        order.remove(moved)
        order.insert(next(i for i, one in enumerate(order) if one.result == after) + 1, moved)
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


# The product: what a result measured. A result run on a commit whose product differs from HEAD's
# measured other code.
PRODUCT = ("serve_app", "deployments")


def product_trees(commits: Iterable[str]) -> dict[str, tuple[str | None, ...] | None]:
    """Per commit (and ``HEAD``), the git tree ids of serve_app/ and deployments/ at it (None for a
    folder it lacks), or None when the commit is not in this clone's history or there is no git: one
    ``git cat-file --batch-check`` for every commit, so rendering stays fast."""
    names = ["HEAD", *dict.fromkeys(commits)]
    query = "".join(
        f"{name}^{{commit}}\n" + "".join(f"{name}:{part}\n" for part in PRODUCT) for name in names
    )
    try:
        done = subprocess.run(
            ["git", "cat-file", "--batch-check"], input=query, cwd=ROOT, capture_output=True, text=True,
            timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return dict.fromkeys(names)
    answers = done.stdout.splitlines() if done.returncode == 0 else []
    if len(answers) != len(names) * (1 + len(PRODUCT)):
        return dict.fromkeys(names)
    trees: dict[str, tuple[str | None, ...] | None] = {}
    for index, name in enumerate(names):
        commit, *parts = answers[index * (1 + len(PRODUCT)) : (index + 1) * (1 + len(PRODUCT))]
        found = [None if line.endswith(" missing") else line.split()[0] for line in parts]
        trees[name] = None if commit.endswith(" missing") else tuple(found)
    return trees


def product_differs(commits: Iterable[str]) -> Callable[[str], bool | None]:
    """For ``commits``: whether serve_app/ and deployments/ at one differ from HEAD's (as ``git diff
    --quiet <commit> HEAD -- serve_app deployments`` tells), None when this clone cannot tell."""
    trees = product_trees(commits)

    def differs(commit: str) -> bool | None:
        at, head = trees.get(commit), trees.get("HEAD")
        return None if at is None or head is None else at != head

    return differs


@cache
def committed_digest(path: str, length: int) -> str | None:
    """The digest provenance records (a SHA-256 prefix) of the file at ``path`` as HEAD commits it, not
    as the working tree has it; None when HEAD has no such file (a checkpoint made locally, never
    committed) or there is no git."""
    try:
        done = subprocess.run(
            ["git", "cat-file", "blob", f"HEAD:{path}"], cwd=ROOT, capture_output=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return hashlib.sha256(done.stdout).hexdigest()[:length] if done.returncode == 0 else None


def stale_reasons(
    meta: Mapping[str, Any],
    *,
    differs: Callable[[str], bool | None],
    digest: Callable[[str, int], str | None] = committed_digest,
) -> list[str]:
    """What a result was run on that main no longer is: uncommitted changes, a commit whose product
    code differs from HEAD's (or "unknown" when this clone cannot tell), a config or a local checkpoint
    (``<folder>@<digest>``, provenance's record) whose bytes differ from the file HEAD commits (one HEAD
    does not commit is not compared)."""
    reasons = []
    if meta.get("uncommitted_changes"):
        reasons.append("run with uncommitted changes")
    commit = meta.get("commit")
    product = "the product code (serve_app/, deployments/)"
    if not commit:
        reasons.append(f"unknown whether {product} differs: the result names no commit")
    else:
        same = differs(commit)
        if same is None:
            reasons.append(f"unknown whether {product} differs: {commit[:10]} is not in this clone's history")
        elif same:
            reasons.append(f"{product} at {commit[:10]} differs from HEAD's")
    if meta.get("config") and meta.get("config_sha256"):
        recorded = meta["config_sha256"]
        now = digest(meta["config"], len(recorded))
        if now is not None and now != recorded:
            reasons.append(f"`{meta['config']}` differs from the one it ran ({recorded})")
    for role, checkpoint in (meta.get("checkpoints") or {}).items():
        source, _, recorded = str(checkpoint).rpartition("@")
        if not source.startswith("./") or not recorded:
            continue  # emulated, or a hub model: no committed weights to compare
        now = digest(f"{source[2:]}/model.safetensors", len(recorded))
        if now is not None and now != recorded:  # None: no committed checkpoint to compare with
            reasons.append(f"{role} checkpoint {source}@{recorded} differs from the committed @{now}")
    return reasons


def section(scenario: Scenario, differs: Callable[[str], bool | None] | None = None) -> list[str]:
    """A section of RESULTS.md: its title, table and provenance, and a "Stale:" line when what it ran
    is not main (``differs``: :func:`product_differs` of every result's commit, made once)."""
    lines = [f"## {scenario.title}", ""]
    if not scenario.path.exists():
        return [*lines, f"Not run yet: `{scenario.rerun()}`.", ""]
    result = json.loads(scenario.path.read_text())
    lines += [*scenario.table(result), "", provenance_line(result, scenario.result), ""]
    meta = result["meta"]
    differs = differs or product_differs([meta["commit"]] if meta.get("commit") else [])
    if reasons := stale_reasons(meta, differs=differs):
        lines += [f"Stale: {'; '.join(reasons)}.", ""]
    return lines


def render_report() -> str:
    """bench/RESULTS.md as the result files give it."""
    lines = list(HEADER)
    shown = sections()
    metas = [json.loads(s.path.read_text()).get("meta", {}) for s in shown if s.path.exists()]
    differs = product_differs(meta["commit"] for meta in metas if meta.get("commit"))
    for scenario in shown:
        lines += section(scenario, differs)
    return "\n".join(lines)


def write_report() -> Path:
    RESULTS_SUMMARY.write_text(render_report())
    return RESULTS_SUMMARY
