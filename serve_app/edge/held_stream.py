"""A streamed reply that keeps its request's admission until the stream is done.

A request's admission (its fair share, its quotas' reservation: serve_app/edge/access.py) ends when
the request is done. A streamed passthrough is done when its last event is sent, long after the
request path returned it, so the admission travels with the stream: it ends once, when the stream
ends, fails, is closed (a client that left), or, for a stream nobody reads, at a backstop past the
request's deadline. A class, not a generator: a generator that never started runs no ``finally``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any


class HeldStream:
    """``events``, holding what ``release`` ends until they are done (``release`` runs once, after
    ``events`` is closed), and at the latest ``backstop_s`` seconds after it was made."""

    def __init__(self, events: AsyncIterator[str], release: Callable[[], Awaitable[Any]], backstop_s: float):
        self._events, self._release = events, release
        self._done = False
        self._backstop = asyncio.get_running_loop().call_later(backstop_s, self._at_backstop)
        self._closing: asyncio.Task[None] | None = None

    def __aiter__(self) -> HeldStream:
        return self

    async def __anext__(self) -> str:
        if self._done:
            raise StopAsyncIteration
        try:
            return await anext(self._events)
        except BaseException:  # its end, a client that left (cancelled), or a failure
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close the events and end what they held, once."""
        if self._done:
            return
        self._done = True
        self._backstop.cancel()
        try:
            close = getattr(self._events, "aclose", None)
            if close is not None:
                await close()
        finally:
            await self._release()

    def _at_backstop(self) -> None:
        if not self._done:
            self._closing = asyncio.ensure_future(self.aclose())
