"""A value read at most once a ``max_age_s``, shared: ``GET /v1/mai/stats`` answers from a snapshot at
most a second old, so however often callers ask, a replica asks the statistics holder and the key
ledger at most once a second. A caller that comes while a reading runs waits for that one; a reading
that fails is not kept (its callers get its error, the next caller reads again)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextvars import Context
from typing import Generic, TypeVar

T = TypeVar("T")


class Snapshot(Generic[T]):
    def __init__(
        self,
        read: Callable[[], Awaitable[T]],
        max_age_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._read, self.max_age_s, self._clock = read, max_age_s, clock
        self._value: tuple[float, T] | None = None  # when its reading started, and what it read
        self._running: asyncio.Future[T] | None = None

    async def get(self) -> T:
        """The last reading while it is under ``max_age_s`` old (counted from when it started), else
        a new one."""
        if self._value is not None and self._clock() - self._value[0] < self.max_age_s:
            return self._value[1]
        if self._running is None:
            # Shared by every caller: in a context of its own, not the first caller's (its trace).
            self._running = asyncio.get_running_loop().create_task(self._reading(), context=Context())
        return await asyncio.shield(self._running)

    async def _reading(self) -> T:
        started = self._clock()
        try:
            value = await self._read()
            self._value = (started, value)
            return value
        finally:
            self._running = None
