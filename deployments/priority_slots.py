"""Batch slots handed out by priority, as vLLM's priority scheduling orders its waiting queue: at most
``capacity`` holders at once; a waiter with a lower priority value goes first, equals in arrival
order (first come, first served among them). A running holder is never pre-empted."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class PrioritySlots:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.held = 0
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    @property
    def waiting(self) -> int:
        return sum(1 for _, _, future in self._waiting if not future.done())

    @asynccontextmanager
    async def slot(self, priority: int = 0) -> AsyncIterator[None]:
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: int) -> None:
        if self.held < self.capacity and not self.waiting:
            self.held += 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (priority, next(self._arrivals), future)
        heapq.heappush(self._waiting, entry)
        try:
            await future  # a releasing holder hands its slot over
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # handed a slot in the same instant it was cancelled: pass it on
            else:
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, future = heapq.heappop(self._waiting)
            if not future.done():
                future.set_result(None)  # the slot passes to the waiter: ``held`` is unchanged
                return
        self.held -= 1
