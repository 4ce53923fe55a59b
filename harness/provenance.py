"""The commit a result was made at, and whether the tree had changes: every tool that writes a result
file records it (mai-eval's run.json, the benchmarks, the fault drills, the fuzzer)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from .paths import ROOT


def git_commit(root: Path = ROOT) -> dict[str, Any]:
    """HEAD and whether tracked files other than the results differ from it; ``None`` outside
    a git checkout."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    # What a run writes (bench/results, bench/RESULTS.md) is not what it measured.
    changes = git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench")
    return {"commit": commit, "uncommitted_changes": bool(changes) if changes is not None else None}
