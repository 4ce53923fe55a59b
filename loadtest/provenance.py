"""What a result file was made with: the commit (and whether the tree had changes), the config file
and the checkpoints it serves, each by a content hash, so a figure can be traced to what produced it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evaluation.run import file_sha256
from harness.local_server import config_args
from harness.paths import CONFIGS, ROOT
from harness.provenance import git_commit


def sha256_prefix(path: Path, length: int = 16) -> str:
    return file_sha256(path)[:length]


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
