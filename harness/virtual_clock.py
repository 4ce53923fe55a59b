"""A virtual clock for asyncio: code that sleeps and reads ``loop.time()`` runs in no wall time, its
times exact. The calibration replays the cascade on it (``evaluation/replay.py``: a stage takes its
recorded time, thousands of questions in seconds), and the unit tests run the cascade's scripted
delays on it. It imports nothing of the project, so a test of the served code can use it without
importing the tools."""

from __future__ import annotations

import asyncio
import heapq


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock jumps to the next timer whenever nothing else is ready: an
    ``asyncio.sleep(t)`` takes no wall time and ``loop.time()`` advances by exactly ``t``.

    It reads CPython's ``BaseEventLoop`` internals (``_ready``, ``_scheduled``, a timer handle's
    ``_when``), as asyncio's own test loops do; the replay's tests fail if a Python release moves them."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 0.0

    def time(self) -> float:
        return self._virtual_now

    def _run_once(self) -> None:
        scheduled = self._scheduled  # type: ignore[attr-defined]
        while scheduled and scheduled[0]._cancelled:  # a cancelled timer never moves the clock
            heapq.heappop(scheduled)._scheduled = False
            self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
        if not self._ready and scheduled:  # type: ignore[attr-defined]
            self._virtual_now = max(self._virtual_now, scheduled[0]._when)
        super()._run_once()  # type: ignore[misc]
