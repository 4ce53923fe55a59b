"""A byte stream's lines, numbered from 1, each at most ``max_bytes`` long (pure: any ``read(n)``).

Each byte is looked at once: a chunk's newlines are found in it, and the line that spans chunks is kept
as a list of pieces joined once at its end. A line past ``max_bytes`` is never held whole: its pieces are
dropped as soon as it is known to be too long and the rest is only counted to its newline, so a line
takes at most ``max_bytes`` plus one chunk of memory however long it is.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

CHUNK_BYTES = 1 << 20


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


@dataclass(frozen=True)
class Overlong:
    """A line past the limit: its size in bytes (up to its ``\\n``), never its bytes, and the limit."""

    size: int
    limit: int


def numbered_raw_lines(
    stream: Readable, max_bytes: int, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[int, bytes | Overlong]]:
    """The stream's lines without their newline (``\\n``, or ``\\r\\n``: trailing ``\\r`` are cut),
    numbered from 1; a line longer than ``max_bytes`` is ``Overlong``. A last line without a newline
    counts when it is not empty."""
    number = 0
    pieces: list[bytes] = []
    size = 0  # of the current line so far
    while chunk := stream.read(chunk_bytes):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            number += 1
            size += end - start
            if size > max_bytes:
                yield number, Overlong(size, max_bytes)
            else:
                pieces.append(chunk[start:end])
                yield number, b"".join(pieces).rstrip(b"\r")
            pieces, size, start = [], 0, end + 1
        size += len(chunk) - start
        if size <= max_bytes:
            pieces.append(chunk[start:])
        else:
            pieces = []  # too long already: only its size is kept
    if size:
        yield number + 1, (Overlong(size, max_bytes) if size > max_bytes else b"".join(pieces).rstrip(b"\r"))
