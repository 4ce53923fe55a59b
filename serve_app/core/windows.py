"""The latest ``size`` entries of several streams merged, kept up to date one entry at a time: what the
stats holder keeps of every replica's audit and plan windows (serve_app/fleet/stats_holder.py).

An entry's key orders it: ``(at, rank, seq)``, its time, its stream's rank and its place in its
stream; ties of time go to the lower rank, then the earlier entry, which is what a stable sort by time
of the streams' windows concatenated in rank order gives (``AuditBook.merged``, ``PlanBook.merged``).
When each stream's times never decrease, whatever is in the merged window is in its own stream's latest
``size`` too: the merged window needs no per-stream window. Pure.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Iterator
from operator import itemgetter
from typing import Generic, TypeVar

T = TypeVar("T")
Key = tuple[float, int, int]  # (at, rank, seq)

_KEY = itemgetter(0)


class LatestWindow(Generic[T]):
    """The ``size`` entries with the greatest keys among those added, in key order."""

    def __init__(self, size: int):
        self.size = size
        self.entries: list[tuple[Key, T]] = []

    def takes(self, key: Key) -> bool:
        """Whether an entry at ``key`` would be kept: not when it is older than a full window's oldest."""
        return len(self.entries) < self.size or key > self.entries[0][0]

    def add(self, key: Key, item: T) -> tuple[bool, T | None]:
        """Add ``item`` at ``key`` (unique): whether it was kept, and the item it pushed out, if any."""
        entries = self.entries
        if not self.takes(key):
            return False, None
        if not entries or key > entries[-1][0]:  # the usual case: the newest yet
            entries.append((key, item))
        else:
            insort(entries, (key, item), key=_KEY)
        if len(entries) > self.size:
            return True, entries.pop(0)[1]
        return True, None

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[T]:
        return (item for _, item in self.entries)
