"""The input's shards as a Ray Data dataset of ``(line, text)`` rows, streamed from any filesystem Ray
Data reads (a local path, ``s3://``, ``gs://``, NFS), each shard by a read task of its own; rows are
numbered across the shards (batch/shards.py).

Ray Data's ``read_json`` would fail the whole read on one malformed line and drops the line numbers a
row's error and a resumed run need; this datasource keeps every non-blank line as text, numbered from 1,
and leaves parsing to the rows (batch/inputs.py). Lines a previous run answered are skipped at the read;
a line past the job's ``max_line_bytes`` is never read whole (batch/lines.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
from ray.data.datasource import FileBasedDatasource

from .lines import Overlong, Readable, numbered_raw_lines
from .settings import MAX_LINE_BYTES
from .shards import Shards, shards_of

_BLOCK_BYTES = 64 << 20  # a block is cut short past this much text, whatever its row count


class NumberedLines(FileBasedDatasource):
    """Every non-blank line of the input, with its 1-based number, in blocks of ``rows_per_block``.
    A line longer than ``max_line_bytes`` is a row without text (``text`` null, ``size`` its length):
    its answer is the error naming the limit."""

    def __init__(
        self,
        shards: Shards,
        *,
        offsets: Mapping[str, int] | None = None,
        skip: frozenset[int] = frozenset(),
        rows_per_block: int = 64,
        max_line_bytes: int = MAX_LINE_BYTES,
        **kwargs: Any,
    ):
        super().__init__(list(shards.paths), filesystem=shards.filesystem, **kwargs)
        self.offsets = dict(offsets or {})  # each shard's first line number, less one
        self.skip, self.rows_per_block, self.max_line_bytes = skip, rows_per_block, max_line_bytes

    def _read_stream(self, f: pa.NativeFile, path: str) -> Iterator[pa.Table]:
        """Each block of lines as one packed row (batch/packing.py): Ray Data cuts a job's blocks into
        one row each (batch/pipeline.py), and a row per line would cost a block per line."""
        for block in line_blocks(
            f,
            skip=self.skip,
            rows_per_block=self.rows_per_block,
            max_line_bytes=self.max_line_bytes,
            offset=self.offsets.get(path, 0),
        ):
            yield pa.table({name: pa.array([block.column(name).to_pylist()]) for name in block.column_names})


def line_blocks(
    stream: Readable, *, skip: frozenset[int], rows_per_block: int, max_line_bytes: int, offset: int = 0
) -> Iterator[pa.Table]:
    """The blocks of ``(line, text, size)`` rows a stream reads as: at most ``rows_per_block`` rows and
    about ``_BLOCK_BYTES`` of text each; ``text`` null for a line past ``max_line_bytes``."""
    numbers: list[int] = []
    texts: list[str | None] = []
    sizes: list[int] = []
    held = 0
    for number, raw in numbered_raw_lines(stream, max_line_bytes):
        number += offset  # the shard's lines count on from the shards before it
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


def numbered_lines(
    shards: Shards | str, max_line_bytes: int = MAX_LINE_BYTES, offsets: dict[str, int] | None = None
) -> Iterator[tuple[int, str | Overlong]]:
    """The input's non-blank lines as the dataset numbers them, shard after shard (for the driver's one
    pass over ids); a line longer than ``max_line_bytes`` is ``Overlong``. ``offsets``, when given, is
    filled with each shard's offset (its first line's number less one), for the read
    (``NumberedLines``)."""
    if isinstance(shards, str):
        shards = shards_of(shards)
    offset = 0
    for path in shards:
        if offsets is not None:
            offsets[path] = offset
        last = 0
        with shards.open(path) as stream:
            for number, raw in numbered_raw_lines(stream, max_line_bytes):
                last = number
                if isinstance(raw, Overlong):
                    yield offset + number, raw
                elif raw.strip():
                    yield offset + number, raw.decode("utf-8", errors="replace")
        offset += last
