"""Where a batch actor's first seconds go, from its process's start to its first answered row (no Ray).

Each actor keeps one ``StartClock`` and hands its phases on with its first rows (batch/answerer.py);
the summary lists every actor's (batch/delivery.py), and the batch_stream bench scenario reports them.
The phases, in order: ``process_s`` (the worker process started and ``batch.answerer`` imported, with
the server code it needs), ``init_s`` (``RowAnswerer.__init__``), ``to_first_batch_s`` (until Ray Data
hands it its first batch), ``replica_s`` (the ingress replica and its handles made on the rows' loop,
begun as ``__init__`` ends, side by side with Ray Data's dispatch; no vLLM types are loaded: the
cascade's calls are plain values, deployments/model_server.py), ``first_row_s`` (from the replica made
to the first row answered: the models' readiness checks and the first calls), and ``total_s``, the
process's start to the first row.
"""

from __future__ import annotations

import json
import os
import time

IMPORTED_AT = time.time()  # this module is imported with batch.answerer's own imports


def process_started_at() -> float | None:
    """When this process started (wall clock), from Linux's /proc; None elsewhere."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: start time in clock ticks
        with open("/proc/stat") as system:
            boot = next(int(line.split()[1]) for line in system if line.startswith("btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


class StartClock:
    """The marks of one actor's start; ``phases`` once its first row is answered."""

    def __init__(self) -> None:
        self.marks: dict[str, float] = {"process": process_started_at() or IMPORTED_AT}
        self.marks["imported"] = IMPORTED_AT
        self.marks["init"] = time.time()
        self.reported = False

    def mark(self, name: str) -> None:
        """The first time ``name`` happened (later calls keep the first)."""
        self.marks.setdefault(name, time.time())

    def report(self) -> str:
        """The phases as JSON the first time every mark is in; "" otherwise and ever after."""
        needed = ("initialised", "first_batch", "replica_started", "replica", "first_row")
        if self.reported or any(name not in self.marks for name in needed):
            return ""
        self.reported = True
        return json.dumps(self.phases())

    def phases(self) -> dict[str, float]:
        m = self.marks
        spans = {
            "process_s": m["imported"] - m["process"],
            "init_s": m["initialised"] - m["init"],
            "to_first_batch_s": m["first_batch"] - m["initialised"],
            "replica_s": m["replica"] - m["replica_started"],
            "first_row_s": m["first_row"] - m["replica"],
            "total_s": m["first_row"] - m["process"],
        }
        return {name: round(seconds, 3) for name, seconds in spans.items()}
