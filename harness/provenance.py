"""What a result file was made with, as one flat record every tool writes under ``meta``: the command,
the commit (and whether the tree had changes), the config and the checkpoints it serves (each by a
content hash), the machine, when it started and how long it took. A figure in the docs names its file;
this record traces the file to what produced it."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from .paths import CONFIGS, ROOT


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


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    with path.open("rb") as file:
        return stream_sha256(file)


def stream_sha256(stream: Any, digest: Any = None) -> str:
    """The SHA-256 of what a binary stream (a file, a pyarrow input stream) holds, read in 1 MiB
    blocks; with ``digest`` (a ``hashlib`` hash), that digest updated with it, so several streams
    hash as one."""
    digest = digest if digest is not None else hashlib.sha256()
    for block in iter(lambda: stream.read(1 << 20), b""):
        digest.update(block)
    return digest.hexdigest()


def sha256_prefix(path: Path, length: int = 16) -> str:
    return file_sha256(path)[:length]


def checkpoints(config: str) -> dict[str, str]:
    """role -> ``<source>@<sha256 prefix of its weights>`` for the models ``configs/<config>`` serves
    from local folders; the source as written for emulated or hub models."""
    from .local_server import config_args

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


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def provenance(
    command: str,
    *,
    config: str | None = None,
    started: float | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The flat ``meta`` record: ``command``, ``commit``, ``uncommitted_changes``, then ``config``,
    ``config_sha256`` and ``checkpoints`` when a config under ``configs/`` was served, ``started`` and
    ``duration_s`` when the start is given (the duration runs to now), ``machine``, then ``extra``."""
    record: dict[str, Any] = {"command": command, **git_commit()}
    if config is not None:
        record |= {
            "config": f"configs/{config}",
            "config_sha256": sha256_prefix(CONFIGS / config),
            "checkpoints": checkpoints(config),
        }
    if started is not None:
        record |= {"started": timestamp(started), "duration_s": round(time.time() - started, 1)}
    return record | {"machine": machine()} | extra
