"""Rows of lines packed into one row of lists, at the Ray Data boundary.

mai-batch hands each finished group of rows on as a block of its own (batch/pipeline.py), and Ray Data
2.60 cuts a job's blocks into one row each when blocks are that small (its output buffer, past
``target_max_block_size``). A block per line cost the driver and the actors enough to slow a job on a
busy machine; a block per group of lines does not. So each group travels as one row whose columns are
lists (``packed``), read and written by the driver and the actors as plain columns (``unpacked``). No
Ray."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def packed(columns: Mapping[str, Sequence[Any]]) -> dict[str, list[list[Any]]]:
    """``columns`` (one value per row) as one row of lists."""
    return {name: [list(values)] for name, values in columns.items()}


def unpacked(columns: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
    """Columns of packed rows (each value a list of the rows it holds) as one value per row; columns
    already of one value per row as they are."""
    lines = columns.get("line")
    if lines is None or len(lines) == 0 or not _is_list(lines[0]):
        return {name: list(values) for name, values in columns.items()}
    return {name: [value for group in values for value in group] for name, values in columns.items()}


def _is_list(value: Any) -> bool:
    return isinstance(value, list | tuple) or (hasattr(value, "ndim") and getattr(value, "ndim", 0) == 1)
