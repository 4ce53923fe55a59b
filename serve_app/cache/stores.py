"""Where the answer cache keeps its entries when they are shared: a Redis server every replica and
``mai-batch`` reach (``RedisStore``); the embedded default, this replica's memory, is
``reuse.MemoryStore``. Both hold bytes under the names ``keys.CacheKey.name`` makes, expire them after
the TTL, and purge by pattern (``pattern_of``: a tenant, an image, all).

A Redis that does not answer, or not within the lookup bound, three calls in a row is left alone for
``retry_after_s``: lookups are misses and writes are dropped meanwhile, counted, and logged once when
it goes and once when it is back. One it answers with a refusal (full) fails that call alone.
A request never waits on it past the bound, and never fails for it.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from .keys import PREFIX
from .settings import CacheSettings, redacted

logger = logging.getLogger("ray.serve")


def pattern_of(tenant: str | None = None, image: str | None = None) -> str:
    """The glob of the entries a purge removes: a tenant's, those of an image (by its SHA-256), or all."""
    if tenant is not None:
        return f"{PREFIX}:{tenant}:*"
    if image is not None:
        return f"{PREFIX}:*:*{image}*:*"
    return f"{PREFIX}:*"


FAILURES_TO_REST = 3  # calls failed in a row before the store is left alone for retry_after_s


class Store(Protocol):
    kind: str

    async def get(self, name: str) -> bytes | None: ...
    async def put(self, name: str, value: bytes) -> bool: ...
    async def delete(self, name: str) -> None: ...
    async def purge(self, pattern: str) -> int: ...
    def usage(self) -> dict[str, Any]: ...


class StoreDown(Exception):
    """The store failed (``skipped``: it is being left alone after a failure, and was not asked); the
    request runs as a miss."""

    def __init__(self, reason: str, *, skipped: bool = False):
        super().__init__(reason)
        self.skipped = skipped


class RedisStore:
    """Entries on a Redis server, each with the TTL as its expiry. Every call is bounded by
    ``lookup_timeout_s``; an error or a timeout leaves the server alone for ``retry_after_s``."""

    kind = "redis"

    def __init__(self, settings: CacheSettings, clock: Callable[[], float] = time.monotonic):
        assert settings.url is not None
        self.settings, self.clock = settings, clock
        self.where = redacted(settings.url)
        self._clients: dict[asyncio.AbstractEventLoop, Any] = {}  # a client's connections serve one loop
        self.down_until = 0.0
        self.errors = 0
        self.last_error: str | None = None
        self.in_outage = False  # logged when one starts and when it ends, not at every retry
        self.refusal_logged_at = -math.inf
        self.failures_in_row = 0

    def check_at_start(self) -> bool:
        """A PING as the replica starts (blocking, bounded): False, logged, when the server does not
        answer; the cache is then off and tried again after ``retry_after_s``."""
        import redis

        try:
            client = redis.Redis.from_url(
                self.settings.url or "", socket_connect_timeout=1.0, socket_timeout=1.0
            )
            client.ping()
            client.close()
            return True
        except (redis.RedisError, OSError) as exc:
            self._failed(exc, at_start=True)
            return False

    @property
    def _client(self) -> Any:
        """The client of the running event loop (a replica has one; a test's client may run several)."""
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            import redis.asyncio

            timeout = self.settings.lookup_timeout_s
            client = self._clients[loop] = redis.asyncio.Redis.from_url(
                self.settings.url or "",
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry_on_timeout=False,
            )
        return client

    @property
    def available(self) -> bool:
        return self.clock() >= self.down_until

    def _refused(self, exc: BaseException) -> None:
        """A call the server refused: that call fails, the store stays in use; logged at most once
        per ``retry_after_s`` (a full Redis under ``noeviction`` refuses every write)."""
        self.errors += 1
        now = self.clock()
        if now >= self.refusal_logged_at + self.settings.retry_after_s:
            self.refusal_logged_at = now
            logger.warning("answer cache: Redis at %s refused a call: %s", self.where, str(exc)[:200])

    def _failed(self, exc: BaseException, *, at_start: bool = False) -> None:
        """A call with no answer (or none within the bound): the store is left alone once
        ``FAILURES_TO_REST`` calls in a row have failed (at start, at once). One slow call on a busy
        replica does not turn the cache off for everyone."""
        self.errors += 1
        self.last_error = type(exc).__name__
        self.failures_in_row += 1
        if self.failures_in_row < FAILURES_TO_REST and not at_start and not self.in_outage:
            return
        self.down_until = self.clock() + self.settings.retry_after_s
        if self.in_outage:
            return
        self.in_outage = True
        if at_start:
            logger.warning(
                "answer cache: Redis at %s does not answer (%s); the server starts with the cache off and "
                "tries it again every %g s",
                self.where,
                self.last_error,
                self.settings.retry_after_s,
            )
        else:
            logger.warning(
                "answer cache: Redis at %s failed (%s); the cache is off for %g s",
                self.where,
                self.last_error,
                self.settings.retry_after_s,
            )

    async def _call(self, operation: Any) -> Any:
        if not self.available:
            operation.close()  # the coroutine, never awaited
            raise StoreDown(self.last_error or "down", skipped=True)
        import redis

        try:
            value = await asyncio.wait_for(operation, self.settings.lookup_timeout_s)
        except asyncio.CancelledError:
            raise
        except redis.ResponseError as exc:  # the server answered, refusing this call (e.g. its maxmemory)
            self._refused(exc)
            raise StoreDown(type(exc).__name__) from None
        except Exception as exc:  # no answer: a connection or a timeout; the store is left alone a while
            self._failed(exc)
            raise StoreDown(type(exc).__name__) from None
        self.failures_in_row = 0
        if self.in_outage:
            self.in_outage = False
            logger.warning("answer cache: Redis at %s answers again; the cache is on", self.where)
        return value

    async def get(self, name: str) -> bytes | None:
        return await self._call(self._client.get(name))

    async def put(self, name: str, value: bytes) -> bool:
        return bool(await self._call(self._client.set(name, value, px=int(self.settings.ttl_s * 1000))))

    async def delete(self, name: str) -> None:
        await self._call(self._client.delete(name))

    async def purge(self, pattern: str) -> int:
        """Every entry matching ``pattern`` (SCAN, then DEL in batches): an admin's call, not bounded by
        the lookup time, but by ``retry_after_s`` in all."""

        async def scan_and_delete() -> int:
            removed, batch = 0, []
            async for name in self._client.scan_iter(match=pattern, count=1000):
                batch.append(name)
                if len(batch) >= 1000:
                    removed += await self._client.delete(*batch)
                    batch = []
            if batch:
                removed += await self._client.delete(*batch)
            return removed

        try:
            return await asyncio.wait_for(scan_and_delete(), self.settings.retry_after_s)
        except Exception as exc:
            self._failed(exc)
            raise StoreDown(type(exc).__name__) from None

    def usage(self) -> dict[str, Any]:
        return {"where": self.where, "available": self.available, "last_error": self.last_error}

    async def close(self) -> None:
        client = self._clients.pop(asyncio.get_running_loop(), None)
        if client is not None:
            await client.aclose()


def redis_store_of(settings: CacheSettings) -> RedisStore:
    """The Redis the settings name, checked once (``RedisStore.check_at_start``)."""
    store = RedisStore(settings)
    store.check_at_start()
    return store
