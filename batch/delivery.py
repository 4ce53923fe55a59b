"""The driver's end of the stream: each answered row's line written once, counted, and timed (no Ray).

Rows arrive in small blocks as the actors finish them (batch/answerer.py, batch/pipeline.py); each
block's new lines are appended and flushed at once (``LineWriter``), so a crash or Ctrl-C loses only the
rows still in flight. A row that arrives twice (Ray retrying an actor's task after the actor died: the
retry answers its whole batch again) is written the first time only; one that never arrived is the
runner's to ask again (``missing``).
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .packing import unpacked
from .tally import Tally


class Writer(Protocol):
    def write(self, lines: list[str]) -> None: ...


class Delivery:
    """Takes the answered rows' blocks as they come: writes each row's line once, tallies it, and keeps
    when it was written (seconds since ``started``) and how long after its answer."""

    def __init__(
        self,
        writer: Writer,
        tally: Tally,
        on_progress: Callable[[int, Tally], None] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ):
        self.writer, self.tally, self.on_progress = writer, tally, on_progress
        self._clock, self._wall_clock = clock, wall_clock
        self.started = clock()
        self.written: set[int] = set()  # the input lines this run wrote
        self.repeated = 0  # rows that came again after their line was written (not written again)
        self.line_times_s: list[float] = []  # when each line was written, from the start
        self.delays_s: list[float] = []  # how long each line took from its answer to the output
        self.actor_starts: list[dict[str, float]] = []  # each actor's start, as it reported it

    def take(self, columns: Mapping[str, Sequence[Any]]) -> int:
        """Writes the block's rows not written before; returns how many it wrote."""
        columns = unpacked(columns)  # the block's packed rows of lines (batch/packing.py)
        self.actor_starts += [json.loads(start) for start in columns.get("actor_start", ()) if start]
        fresh = [index for index, line in enumerate(columns["line"]) if line not in self.written]
        self.repeated += len(columns["line"]) - len(fresh)
        if not fresh:
            return 0
        self.writer.write([columns["output"][index] for index in fresh])
        now, wall = self._clock() - self.started, self._wall_clock()
        for index in fresh:
            self.written.add(columns["line"][index])
            self.line_times_s.append(now)
            self.delays_s.append(max(0.0, wall - columns["answered_at"][index]))
            self.tally.add(
                columns["status"][index],
                columns["route"][index],
                json.loads(columns["tokens"][index]),
                columns["node"][index],
                columns["attempts"][index],
                columns["peak_rss_mb"][index],
            )
        if self.on_progress is not None:
            self.on_progress(len(fresh), self.tally)
        return len(fresh)

    @property
    def first_line_s(self) -> float | None:
        return self.line_times_s[0] if self.line_times_s else None

    def figures(self) -> dict[str, Any]:
        """What the summary says of the stream: the first line, how the lines spread over the job, and
        how long a line took from its answer to the output."""
        return {
            "first_line_s": None if self.first_line_s is None else round(self.first_line_s, 3),
            "line_times_s": quantiles(self.line_times_s),
            "line_delay_s": quantiles(self.delays_s),
            "rows_repeated": self.repeated,
            "actor_starts": self.actor_starts,
        }


def quantiles(values: Sequence[float]) -> dict[str, float] | None:
    """The least, median, 90th percentile and most of ``values`` (seconds), or None for none."""
    if not values:
        return None
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return {
        "min": round(ordered[0], 3),
        "median": round(statistics.median(ordered), 3),
        "p90": round(p90, 3),
        "max": round(ordered[-1], 3),
    }
