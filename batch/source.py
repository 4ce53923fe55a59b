"""The input file as a Ray Data dataset of ``(line, text)`` rows, streamed from any filesystem Ray Data
reads (a local path, ``s3://``, ``gs://``, NFS).

Ray Data's ``read_json`` would fail the whole read on one malformed line and drops the line numbers a
row's error and a resumed run need; this datasource keeps every non-blank line as text, numbered from 1,
and leaves parsing to the rows (batch/inputs.py). Lines a previous run answered are skipped at the read;
a line past the job's ``max_line_bytes`` is never read whole (batch/lines.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from ray.data.datasource import FileBasedDatasource

from .lines import Overlong, Readable, numbered_raw_lines
from .settings import MAX_LINE_BYTES

_BLOCK_BYTES = 64 << 20  # a block is cut short past this much text, whatever its row count


class NumberedLines(FileBasedDatasource):
    """Every non-blank line of the input, with its 1-based number, in blocks of ``rows_per_block``.
    A line longer than ``max_line_bytes`` is a row without text (``text`` null, ``size`` its length):
    its answer is the error naming the limit."""

    def __init__(
        self,
        path: str,
        *,
        skip: frozenset[int] = frozenset(),
        rows_per_block: int = 64,
        max_line_bytes: int = MAX_LINE_BYTES,
        **kwargs: Any,
    ):
        super().__init__(path, **kwargs)
        self.skip, self.rows_per_block, self.max_line_bytes = skip, rows_per_block, max_line_bytes

    def _read_stream(self, f: pa.NativeFile, path: str) -> Iterator[pa.Table]:
        yield from line_blocks(
            f, skip=self.skip, rows_per_block=self.rows_per_block, max_line_bytes=self.max_line_bytes
        )


def line_blocks(
    stream: Readable, *, skip: frozenset[int], rows_per_block: int, max_line_bytes: int
) -> Iterator[pa.Table]:
    """The blocks of ``(line, text, size)`` rows a stream reads as: at most ``rows_per_block`` rows and
    about ``_BLOCK_BYTES`` of text each; ``text`` null for a line past ``max_line_bytes``."""
    numbers: list[int] = []
    texts: list[str | None] = []
    sizes: list[int] = []
    held = 0
    for number, raw in numbered_raw_lines(stream, max_line_bytes):
        if number in skip or (isinstance(raw, bytes) and not raw.strip()):
            continue
        numbers.append(number)
        if isinstance(raw, Overlong):
            texts.append(None)
            sizes.append(raw.size)
        else:
            texts.append(raw.decode("utf-8", errors="replace"))
            sizes.append(len(raw))
            held += len(raw)
        if len(numbers) == rows_per_block or held >= _BLOCK_BYTES:
            yield _block(numbers, texts, sizes)
            numbers, texts, sizes, held = [], [], [], 0
    if numbers:
        yield _block(numbers, texts, sizes)


def _block(numbers: list[int], texts: list[str | None], sizes: list[int]) -> pa.Table:
    return pa.table(
        {
            "line": pa.array(numbers, pa.int64()),
            "text": pa.array(texts, pa.string()),
            "size": pa.array(sizes, pa.int64()),
        }
    )


def open_input(path: str) -> pa.NativeFile:
    """The input as a stream, from a local path or a filesystem URI; ``OSError`` when unreadable."""
    from pyarrow import fs

    if "://" in path:
        filesystem, inner = fs.FileSystem.from_uri(path)
    else:
        filesystem, inner = fs.LocalFileSystem(), path
    return filesystem.open_input_stream(inner)


def numbered_lines(path: str, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, str | Overlong]]:
    """The input's non-blank lines as the dataset numbers them (for the driver's one pass over ids); a
    line longer than ``max_line_bytes`` is ``Overlong``."""
    with open_input(path) as stream:
        for number, raw in numbered_raw_lines(stream, max_line_bytes):
            if isinstance(raw, Overlong):
                yield number, raw
            elif raw.strip():
                yield number, raw.decode("utf-8", errors="replace")
