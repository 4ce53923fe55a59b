"""The answer cache in the request path: a request's answer from the store, from an identical request's
run in flight, or from its own run, which it then keeps (docs/cache.md).

``AnswerCache.answer`` takes the request's key (``keys.cache_key``: None for a sampled request), its
mode (``keys.CacheMode``) and its run (the decision, the cascade and what the server learns of it). In
order:
1. a mode that reads joins an identical request in flight (``coalesce``): it waits for that one's
   answer under its own deadline; leaving (a disconnect, its deadline) ends its wait, not the run;
2. else the request leads, as the one others may join: when its mode reads it looks the key up,
   bounded by ``lookup_timeout_s`` (a hit is the kept answer, with its age; an entry that does not
   parse is removed and is a miss), then it runs: both in a task of its own (one lookup and at most
   one run per key at a time in this replica), so that the leader leaving
   does not end it for them; the leader then waits on with them, holding its admission and paying
   for the run, and the run ends when the last request waiting on it leaves (at the request timeout
   in any case); its answer is kept when the mode writes and the answer is ``keys.storable``.
Only the run is what the server learns from: a hit or a coalesced answer is no observation (the caller
skips the observers and the audit for them) and is counted apart (``CacheCounters``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import fnmatch
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ..core.contracts import CascadeOptions, Question
from ..core.trace import CacheRecord, CascadeResult
from .keys import (
    CacheKey,
    CacheMode,
    EntryError,
    cache_key,
    decode,
    decode_reply,
    encode,
    encode_reply,
    passthrough_key,
    storable,
    tenant_of,
    uncached_reason,
)
from .settings import CacheSettings
from .stores import RedisStore, StoreDown, redis_store_of

logger = logging.getLogger("ray.serve")

# store_error: a store call that failed or outran the lookup bound; store_skipped: one not made, the
# store being left alone after a failure (``retry_after_s``).
EVENTS = (
    "hit",
    "miss",
    "coalesced",
    "bypass",
    "stored",
    "unparsable",
    "store_error",
    "store_skipped",
    "purged",
)


ENTRY_OVERHEAD_BYTES = 160  # what the in-process store counts per entry beyond its name and value


class MemoryStore:
    """Entries in this replica's memory, least recently used first out once ``max_bytes`` is reached."""

    kind = "memory"

    def __init__(self, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_bytes, self.ttl_s, self.clock = max_bytes, ttl_s, clock
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self.bytes = 0
        self.evictions = 0

    @staticmethod
    def _size(name: str, value: bytes) -> int:
        return len(name) + len(value) + ENTRY_OVERHEAD_BYTES

    async def get(self, name: str) -> bytes | None:
        entry = self._entries.get(name)
        if entry is None:
            return None
        if entry[1] <= self.clock():
            self._remove(name)
            return None
        self._entries.move_to_end(name)
        return entry[0]

    async def put(self, name: str, value: bytes) -> bool:
        """Keep ``value`` under ``name``; False when it is larger than the whole store (kept nowhere,
        and nothing older under its name either)."""
        self._remove(name)
        size = self._size(name, value)
        if size > self.max_bytes:
            return False
        while self._entries and self.bytes + size > self.max_bytes:
            self._remove(next(iter(self._entries)))
            self.evictions += 1
        self._entries[name] = (value, self.clock() + self.ttl_s)
        self.bytes += size
        return True

    async def delete(self, name: str) -> None:
        self._remove(name)

    def _remove(self, name: str) -> None:
        entry = self._entries.pop(name, None)
        if entry is not None:
            self.bytes -= self._size(name, entry[0])

    async def purge(self, pattern: str) -> int:
        names = [name for name in self._entries if fnmatch.fnmatchcase(name, pattern)]
        for name in names:
            self._remove(name)
        return len(names)

    def usage(self) -> dict[str, Any]:
        return {"entries": len(self._entries), "bytes": self.bytes, "max_bytes": self.max_bytes}


def store_of(settings: CacheSettings) -> MemoryStore | RedisStore:
    """The store the settings name: this replica's memory, or a Redis checked once as it starts."""
    if settings.url is None:
        return MemoryStore(settings.max_bytes, settings.ttl_s)
    return redis_store_of(settings)


class JoinTimeout(TimeoutError):
    """A request that joined an identical run in flight had no answer within its own deadline."""


def _with_record(result: CascadeResult, record: CacheRecord) -> CascadeResult:
    """``result`` as this request's: the cache's record its own, and no trace id but its own (set by its
    span, when sampled): a kept or shared trace's id is the run's."""
    trace = dataclasses.replace(result.trace, cache=record, trace_id=None)
    return dataclasses.replace(result, trace=trace)


# The cache's Prometheus metrics (Ray exports each as ``ray_<name>``, a counter with ``_total``), listed
# with the ingress's own (edge/observers.py, PROMETHEUS_METRICS) and made here.
CACHE_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mai_cache_events": ("counter", "Answer cache events by kind: " + ", ".join(EVENTS), ("event",)),
    "mai_cache_bytes": ("gauge", "Bytes the in-process answer store holds", ()),
}


class CacheCounters:
    """What the cache did on this replica: for ``GET /v1/mai/stats`` and, in a replica, Prometheus
    (``mai_cache_events`` by event, ``mai_cache_bytes``)."""

    def __init__(self, *, prometheus: bool = False):
        self.events: Counter[str] = Counter({event: 0 for event in EVENTS})
        self.bypassed: Counter[str] = Counter()
        self._events_metric: Any = None
        self._bytes_metric: Any = None
        if prometheus:
            from ray.serve import metrics

            (events, (_, events_text, tags)), (size, (_, size_text, _)) = CACHE_METRICS.items()
            self._events_metric = metrics.Counter(events, description=events_text, tag_keys=tags)  # type: ignore[arg-type]
            self._bytes_metric = metrics.Gauge(size, description=size_text)

    def count(self, event: str, amount: int = 1, reason: str | None = None) -> None:
        self.events[event] += amount
        if reason is not None:
            self.bypassed[reason] += amount
        if self._events_metric is not None and amount:
            self._events_metric.inc(amount, tags={"event": event})

    def stored_bytes(self, value: int) -> None:
        if self._bytes_metric is not None:
            self._bytes_metric.set(value)


class AnswerCache:
    """One ingress replica's (or batch job's) answer cache over its store."""

    def __init__(
        self,
        store: MemoryStore | RedisStore,
        *,
        identity: str,
        shared: bool = False,
        coalesce: bool = True,
        counters: CacheCounters | None = None,
        wall: Callable[[], float] = time.time,
    ):
        self.store, self.identity, self.shared = store, identity, shared
        self.coalesce, self.wall = coalesce, wall
        self.counters = counters or CacheCounters()
        self._in_flight: dict[str, tuple[asyncio.Future[CascadeResult], str]] = {}
        self._waiting: Counter[int] = Counter()  # per run in flight (its id), the requests waiting on it

    def key(
        self, question: Question, options: CascadeOptions, task: str | None, key_name: str, key_digest: str
    ) -> CacheKey | None:
        """A request's key under this cache's serving identity, for the API key named ``key_name``
        whose digest is ``key_digest``."""
        tenant = tenant_of(key_name, key_digest, shared=self.shared)
        return cache_key(question, options, task=task, tenant=tenant, identity=self.identity)

    async def answer(
        self,
        key: CacheKey | None,
        mode: CacheMode,
        request_id: str,
        run: Callable[[], Awaitable[CascadeResult]],
        wait_s: float,
    ) -> CascadeResult:
        """The request's answer, its trace carrying what the cache did (``Trace.cache``)."""
        if key is None or mode is CacheMode.OFF:
            reason = "sampled" if key is None else "off"
            self.counters.count("bypass", reason=reason)
            return _with_record(await run(), CacheRecord("bypass", reason=reason))
        joined = self._in_flight.get(key.name) if self.coalesce and mode.reads else None
        if joined is not None:
            return await self._join(joined, wait_s)
        return await self._lead(key, mode, request_id, run)

    async def _lookup(self, key: CacheKey) -> tuple[CascadeResult | None, bool]:
        """The kept answer (None: none), and whether the store answered (``_kept``)."""
        kept, answered = await self._kept(key, decode)
        if kept is None:
            return None, answered
        result, created = kept
        self.counters.count("hit")
        age_s = round(max(0.0, self.wall() - created), 3)
        return _with_record(result, CacheRecord("hit", age_s=age_s)), answered

    async def _kept(self, key: CacheKey, decoded: Callable[[bytes], Any]) -> tuple[Any, bool]:
        """The entry under ``key``, decoded (None for none, or one that does not parse: removed), and
        whether the store answered: a request whose lookup failed writes nothing after its run, so
        that a store that fails costs it one bounded wait at most."""
        try:
            value = await self.store.get(key.name)
        except StoreDown as down:
            self.counters.count("store_skipped" if down.skipped else "store_error")
            return None, False
        if value is None:
            return None, True
        try:
            return decoded(value), True
        except EntryError as exc:
            self.counters.count("unparsable")
            logger.warning("answer cache: an entry did not parse (%s); removed", exc)
            await self._quietly(self.store.delete(key.name))
            return None, True

    async def forwarded(
        self,
        payload: Mapping[str, Any],
        model_id: str,
        caller: tuple[str, str],
        mode: CacheMode | None,
        forward: Callable[[], Awaitable[Any]],
        body_of: Callable[[Any], Mapping[str, Any] | None],
    ) -> tuple[Any, CacheRecord | None]:
        """``payload`` forwarded to ``model_id`` for ``caller`` (its API key's name and digest), when it
        asked for the cache (``mode``): its kept reply and the record (a hit), else ``forward()``'s
        outcome, whose JSON body (``body_of``) is kept when the mode writes. No coalescing: a forwarded
        request is the client's own."""
        if mode is None:
            return await forward(), None
        reason = "off" if mode is CacheMode.OFF else uncached_reason(payload)
        if reason is not None:
            self.counters.count("bypass", reason=reason)
            return await forward(), CacheRecord("bypass", reason=reason)
        tenant = tenant_of(*caller, shared=self.shared)
        key = passthrough_key(payload, model_id, tenant=tenant, identity=self.identity)
        assert key is not None  # uncached_reason said it may be cached
        kept, answered = await self._kept(key, decode_reply) if mode.reads else (None, True)
        if kept is not None:
            self.counters.count("hit")
            return kept[0], CacheRecord("hit", age_s=round(max(0.0, self.wall() - kept[1]), 3))
        outcome = await forward()
        self.counters.count("miss")
        body = body_of(outcome)
        stored = False
        if mode.writes and answered and body is not None:
            stored = await self._quietly(self.store.put(key.name, encode_reply(body, self.wall())))
            self.counters.count("stored", int(stored))
        return outcome, CacheRecord("miss", stored=stored)

    async def _join(self, joined: tuple[asyncio.Future[CascadeResult], str], wait_s: float) -> CascadeResult:
        run, leader = joined
        self._waiting[id(run)] += 1
        try:
            result = await asyncio.wait_for(asyncio.shield(run), wait_s)
        except TimeoutError:
            raise JoinTimeout(f"no answer within the request timeout of {wait_s:g} s") from None
        finally:
            self._left(run)
        record = result.trace.cache
        if record is not None and record.status == "hit":  # the request it joined found it kept
            self.counters.count("hit")
            return _with_record(result, record)
        self.counters.count("coalesced")
        return _with_record(result, CacheRecord("coalesced", coalesced_with=leader))

    async def _lead(
        self, key: CacheKey, mode: CacheMode, request_id: str, run: Callable[[], Awaitable[CascadeResult]]
    ) -> CascadeResult:
        """The run, in a task of its own that identical requests may join. The requester leaving ends
        it when no one else waits for it; else it waits on with them, its admission held (the run is
        its, and billed to it) until the run ends, then leaves."""
        task = asyncio.ensure_future(self._run_and_keep(key, mode, run))
        if self.coalesce:
            self._in_flight[key.name] = (task, request_id)
            task.add_done_callback(lambda _: self._forget(key.name, task))
        self._waiting[id(task)] += 1
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if self._waiting[id(task)] > 1:
                with contextlib.suppress(BaseException):
                    await asyncio.shield(task)  # the others' run: this request pays for it
            raise
        finally:
            self._left(task)

    def _left(self, run: asyncio.Future[CascadeResult]) -> None:
        """A request stopped waiting for ``run``: the last one leaving a run not yet done ends it."""
        self._waiting[id(run)] -= 1
        if self._waiting[id(run)] <= 0:
            del self._waiting[id(run)]
            if not run.done():
                run.cancel()

    def _forget(self, name: str, task: asyncio.Future[CascadeResult]) -> None:
        if self._in_flight.get(name, (None,))[0] is task:
            del self._in_flight[name]
        if not task.cancelled():
            task.exception()  # retrieved: a run no one waits for any more does not log its error

    async def _run_and_keep(
        self, key: CacheKey, mode: CacheMode, run: Callable[[], Awaitable[CascadeResult]]
    ) -> CascadeResult:
        """The kept answer when the mode reads and there is one, else the run's, kept when it may be."""
        kept, answered = await self._lookup(key) if mode.reads else (None, True)
        if kept is not None:
            return kept
        result = await run()
        self.counters.count("miss")
        stored = False
        if mode.writes and answered and storable(result):
            stored = await self._quietly(self.store.put(key.name, encode(result, self.wall())))
            if stored:
                self.counters.count("stored")
                if isinstance(self.store, MemoryStore):
                    self.counters.stored_bytes(self.store.bytes)
        result.trace.cache = CacheRecord("miss", stored=stored)
        return result

    async def _quietly(self, operation: Awaitable[bool | None]) -> bool:
        """Whether a write or a removal was done (a store that fails: counted, never raised)."""
        try:
            return await operation is not False
        except StoreDown as down:
            self.counters.count("store_skipped" if down.skipped else "store_error")
            return False

    async def purge(self, pattern: str) -> int:
        """Remove the entries ``pattern`` matches (``stores.pattern_of``); how many."""
        removed = await self.store.purge(pattern)
        self.counters.count("purged", removed)
        if isinstance(self.store, MemoryStore):
            self.counters.stored_bytes(self.store.bytes)
        return removed

    def events(self) -> dict[str, int]:
        """This replica's counts since it started (the in-process store's evictions among them)."""
        events = dict(self.counters.events)
        if isinstance(self.store, MemoryStore):
            events["evictions"] = self.store.evictions
        return events

    def stats(self) -> dict[str, Any]:
        """This replica's counts and its store's state."""
        return {
            "store": self.store.kind,
            "in_flight": len(self._in_flight),
            "events": self.events(),
            "bypassed": dict(self.counters.bypassed),
            "store_state": self.store.usage(),
        }
