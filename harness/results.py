"""The one writer of result files: JSON with two-space indents and a final newline, ``meta`` (the flat
provenance record of ``harness.provenance``) last, parent folders made. Every tool that writes a
result under bench/results goes through it, so every file carries the same record in the same place."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .paths import ROOT


def write_result(path: Path, result: dict[str, Any], meta: dict[str, Any]) -> Path:
    """Write ``result`` with ``meta`` to ``path`` and return the path; ``meta`` must name its command
    and commit (the fields every renderer and doc check reads)."""
    missing = {"command", "commit"} - set(meta)
    if missing:
        raise ValueError(f"a result's meta needs {', '.join(sorted(missing))}")
    body = {key: value for key, value in result.items() if key != "meta"} | {"meta": meta}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(body, indent=2) + "\n")
    return path


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it, for messages."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)
