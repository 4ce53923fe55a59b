"""What a result file was made with: the commit (and whether the tree had changes), the config file
and the checkpoints it serves, each by a content hash, so a figure can be traced to what produced it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from evaluation.run import file_sha256
from harness.local_server import config_args
from harness.paths import CONFIGS, ROOT


def sha256_prefix(path: Path, length: int = 16) -> str:
    return file_sha256(path)[:length]


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


def checkpoints(config: str) -> dict[str, str]:
    """role -> ``<source>@<sha256 prefix of its weights>`` for the models ``configs/<config>`` serves
    from local folders; the source as written for emulated or hub models."""
    args = config_args(config)
    out = {}
    for role in ("small", "large"):
        model = args.get(role, {})
        source = model.get("source") or model.get("model_id")
        if source is None:
            continue
        weights = ROOT / source / "model.safetensors"
        local = str(source).startswith("./") and weights.exists()
        if "emulation" in model:
            out[role] = f"emulated: no weights (named {source})"
        else:
            out[role] = f"{source}@{sha256_prefix(weights)}" if local else source
    return out


def provenance(config: str) -> dict[str, Any]:
    path = CONFIGS / config
    return git_commit() | {
        "config": f"configs/{config}",
        "config_sha256": sha256_prefix(path),
        "checkpoints": checkpoints(config),
    }
