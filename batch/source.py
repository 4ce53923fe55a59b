"""The input file as a Ray Data dataset of ``(line, text)`` rows, streamed from any filesystem Ray Data
reads (a local path, ``s3://``, ``gs://``, NFS).

Ray Data's ``read_json`` would fail the whole read on one malformed line and drops the line numbers a
row's error and a resumed run need; this datasource keeps every non-blank line as text, numbered from 1,
and leaves parsing to the rows (batch/inputs.py). Lines a previous run answered are skipped at the read.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from ray.data.datasource import FileBasedDatasource

_CHUNK_BYTES = 1 << 20


class NumberedLines(FileBasedDatasource):
    """Every non-blank line of the input, with its 1-based number, in blocks of ``rows_per_block``."""

    def __init__(
        self, path: str, *, skip: frozenset[int] = frozenset(), rows_per_block: int = 64, **kwargs: Any
    ):
        super().__init__(path, **kwargs)
        self.skip, self.rows_per_block = skip, rows_per_block

    def _read_stream(self, f: pa.NativeFile, path: str) -> Iterator[pa.Table]:
        numbers: list[int] = []
        texts: list[str] = []
        for number, raw in _lines(f):
            if number in self.skip or not raw.strip():
                continue
            numbers.append(number)
            texts.append(raw.decode("utf-8", errors="replace"))
            if len(numbers) == self.rows_per_block:
                yield _block(numbers, texts)
                numbers, texts = [], []
        if numbers:
            yield _block(numbers, texts)


def _block(numbers: list[int], texts: list[str]) -> pa.Table:
    return pa.table({"line": pa.array(numbers, pa.int64()), "text": pa.array(texts, pa.string())})


def _lines(f: pa.NativeFile) -> Iterator[tuple[int, bytes]]:
    """The file's lines (without their newline), numbered from 1, read a chunk at a time."""
    number, rest = 0, b""
    while chunk := f.read(_CHUNK_BYTES):
        parts = (rest + chunk).split(b"\n")
        rest = parts.pop()
        for part in parts:
            number += 1
            yield number, part.rstrip(b"\r")
    if rest:
        yield number + 1, rest.rstrip(b"\r")


def open_input(path: str) -> pa.NativeFile:
    """The input as a stream, from a local path or a filesystem URI; ``OSError`` when unreadable."""
    from pyarrow import fs

    if "://" in path:
        filesystem, inner = fs.FileSystem.from_uri(path)
    else:
        filesystem, inner = fs.LocalFileSystem(), path
    return filesystem.open_input_stream(inner)


def numbered_lines(path: str) -> Iterator[tuple[int, str]]:
    """The input's non-blank lines as the dataset numbers them (for the driver's one pass over ids)."""
    with open_input(path) as stream:
        for number, raw in _lines(stream):
            if raw.strip():
                yield number, raw.decode("utf-8", errors="replace")
