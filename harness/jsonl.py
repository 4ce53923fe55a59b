"""JSON Lines: the one reader and writer of datasets, predictions and run segments."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, *, skip_truncated: bool = False) -> list[Any]:
    """Every value of ``path``, one per non-blank line. With ``skip_truncated``, a line that is not
    JSON (one cut short when a run was killed while appending) is skipped instead of raising."""
    values = []
    with path.open() as file:
        for line in file:
            if not line.strip():
                continue
            try:
                values.append(json.loads(line))
            except json.JSONDecodeError:
                if not skip_truncated:
                    raise
    return values


def write_jsonl(values: Iterable[Any], path: Path) -> int:
    """Write ``values`` to ``path`` (its folder made when missing), one a line; returns how many."""
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w") as file:
        for value in values:
            file.write(json.dumps(value) + "\n")
            count += 1
    return count


def append_jsonl(value: Any, path: Path) -> None:
    with path.open("a") as file:
        file.write(json.dumps(value) + "\n")
