"""What the answer cache costs and saves in process, with no Ray and no engine (the answer_cache
scenario's first part; cache_stack.py is its part on the real stack):

- **A hit through one ingress.** cascade_request.py's ``mai`` request (plan ``sequential``, three stage
  calls, scripted models answering at once) through one in-process ingress keeping the config's
  cache in its memory, ``await ingress.chat(body, None)`` one after another (the parsed body to the
  answer: no HTTP), in blocks: the kept answer (``hit``), a run that keeps its answer
  (``mai.cache: refresh``) and a run the cache leaves alone (``mai.cache: off``), the arms' order
  rotated from one round to the next.
- **The in-process store at its bound.** ``reuse.MemoryStore`` at ``max_bytes``, filled with that
  request's answer as the store keeps it (``reuse.encode``, a fresh value per entry) under distinct
  names until it first evicts: the Python heap it then holds (tracemalloc) and the process's RSS
  growth, against ``max_bytes``.
- **Lookups.** One entry on a real redis-server on loopback (persistence off): ``RedisStore.get`` of
  it and of a name not there, and ``AnswerCache._lookup`` (the get and the entry's decoding), each
  timed one call at a time; the in-process store's get and lookup beside them.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import shutil
import subprocess
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from harness.driver import percentile
from serve_app.cache.keys import CacheKey, tenant_of
from serve_app.cache.reuse import AnswerCache, MemoryStore, encode
from serve_app.cache.settings import CacheSettings
from serve_app.cache.stores import RedisStore, StoreDown
from serve_app.core.trace import CascadeResult

from .schedule import rotated
from .side_by_side import block_quantiles
from .summary import spread

# Each arm's ``mai.cache`` and the cache status its every answer must carry.
ARMS = {"hit": (None, "hit"), "refresh": ("refresh", "miss"), "off": ("off", "bypass")}
QUANTILES = ("median_us", "p90_us")


def arm_body(body: dict[str, Any], arm: str) -> dict[str, Any]:
    """``body`` with the arm's ``mai.cache`` (none for ``hit``: the default, ``use``)."""
    mode = ARMS[arm][0]
    mai = dict(body.get("mai") or {})
    if mode is not None:
        mai["cache"] = mode
    return body | {"mai": mai}


def status_of(outcome: Any) -> str | None:
    """What the cache did for an in-process outcome (None for a refusal)."""
    result = getattr(outcome, "result", None)
    return None if result is None or result.trace.cache is None else result.trace.cache.status


async def timed(ingress: Any, body: dict[str, Any], requests: int, expected: str) -> list[float]:
    """The seconds each of ``requests`` chat requests took through ``ingress``, one at a time; fails
    on an answer whose cache status is not ``expected`` (the arm would measure another path)."""
    seconds = []
    for _ in range(requests):
        started = time.perf_counter()
        outcome = await ingress.chat(body, None)
        seconds.append(time.perf_counter() - started)
        if status_of(outcome) != expected:
            raise RuntimeError(f"an answer had cache status {status_of(outcome)}, not {expected}")
    return seconds


def latency_summary(blocks: list[dict[str, Any]], requests: int, rounds: int) -> dict[str, Any]:
    """Per arm, each block quantile's median [min–max] over its blocks, and its ratio to ``off``'s."""
    summary: dict[str, Any] = {"requests_per_block": requests, "rounds": rounds}
    for arm in ARMS:
        mine = [block for block in blocks if block["arm"] == arm]
        summary[arm] = {q: spread([block[q] for block in mine], 1) for q in QUANTILES}
    for arm in ARMS:
        summary[arm]["over_off"] = {
            q: round(summary[arm][q]["median"] / summary["off"][q]["median"], 3) for q in QUANTILES
        }
    summary["blocks"] = blocks
    return summary


async def latency(ingress: Any, body: dict[str, Any], requests: int, rounds: int, warm_up: int) -> dict:
    """Every arm ``rounds`` blocks of ``requests`` requests, interleaved, after ``warm_up`` each (the
    first ``refresh`` request keeps the answer every ``hit`` reads)."""
    arms = list(ARMS)
    for arm in ("refresh", "hit", "off"):
        await timed(ingress, arm_body(body, arm), warm_up, ARMS[arm][1])
    blocks = []
    for round_ in range(rounds):
        for arm in rotated(arms, round_):
            gc.collect()
            seconds = await timed(ingress, arm_body(body, arm), requests, ARMS[arm][1])
            blocks.append({"arm": arm, "round": round_, **block_quantiles(seconds)})
    return latency_summary(blocks, requests, rounds)


def entry_name(n: int, image: str) -> str:
    """The ``n``-th distinct entry's name, as long as a real key's (a tenant, one image, a digest)."""
    digest = hashlib.sha256(f"bench entry {n}".encode()).hexdigest()
    return CacheKey(tenant_of("bench", "0" * 64, shared=False), (image,), digest).name


async def fill(store: MemoryStore, result: CascadeResult) -> int:
    """Entries put into ``store``, each a freshly encoded ``result``, until it evicts one; how many."""
    image = hashlib.sha256(b"bench image").hexdigest()
    n = 0
    while store.evictions == 0:
        await store.put(entry_name(n, image), encode(result, time.time()))
        n += 1
    return n


def rss_bytes() -> int | None:
    """This process's resident set (Linux's /proc), None elsewhere."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def memory_at_bound(loop: asyncio.AbstractEventLoop, result: CascadeResult, max_bytes: int) -> dict:
    """The in-process store filled to its bound, twice: once for the RSS it added, once under
    tracemalloc for the Python heap it holds (tracing's own overhead kept out of the RSS)."""
    gc.collect()
    before = rss_bytes()
    store = MemoryStore(max_bytes, 3600.0)
    puts = loop.run_until_complete(fill(store, result))
    gc.collect()
    after = rss_bytes()
    usage = store.usage()
    del store
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    store = MemoryStore(max_bytes, 3600.0)
    loop.run_until_complete(fill(store, result))
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del store
    rss = None if before is None or after is None else after - before
    value = len(encode(result, time.time()))
    return {
        "max_bytes": max_bytes,
        "puts_until_first_eviction": puts,
        "entries": usage["entries"],
        "store_bytes": usage["bytes"],
        "entry_value_bytes": value,
        "entry_bytes": round(usage["bytes"] / usage["entries"], 1),
        "heap_bytes": heap,
        "heap_over_max_bytes": round(heap / max_bytes, 3),
        "heap_per_entry_bytes": round(heap / usage["entries"], 1),
        "rss_delta_bytes": rss,
        "rss_over_max_bytes": None if rss is None else round(rss / max_bytes, 3),
    }


@contextmanager
def redis_server() -> Iterator[str | None]:
    """Debian's redis-server on 127.0.0.1 and a free port, nothing saved (harness/redis_server.py);
    yields its URL, or None when there is no redis-server."""
    from harness.redis_server import RedisServer, RedisServerMissing

    try:
        server = RedisServer()
    except RedisServerMissing:
        yield None
        return
    with server:
        yield server.url


def redis_version() -> str | None:
    binary = shutil.which("redis-server")
    if binary is None:
        return None
    return subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()


async def call_times(call: Callable[[], Awaitable[Any]], calls: int, warm_up: int = 100) -> dict:
    """p50 and p99 in µs of ``calls`` awaited one at a time (after ``warm_up`` untimed); a call the
    store refused (``StoreDown``: an error, or past the lookup bound) is counted, not timed."""
    for _ in range(warm_up):
        await call()
    seconds, errors = [], 0
    for _ in range(calls):
        started = time.perf_counter()
        try:
            await call()
        except StoreDown:
            errors += 1
            continue
        seconds.append(time.perf_counter() - started)
    return {
        "calls": calls,
        "errors": errors,
        "p50_us": round(percentile(seconds, 0.5) * 1e6, 1),
        "p99_us": round(percentile(seconds, 0.99) * 1e6, 1),
    }


async def store_lookups(store: MemoryStore | RedisStore, value: bytes, calls: int) -> dict[str, Any]:
    """A kept entry's get, a missing one's, and the cache's whole lookup of the kept one (decoded)."""
    key = CacheKey("bench", (hashlib.sha256(b"bench image").hexdigest(),), "0" * 64)
    await store.put(key.name, value)
    cache = AnswerCache(store, identity="bench")
    found, (lookup, answered) = await store.get(key.name), await cache._lookup(key)
    if found != value or lookup is None or lookup.trace.cache is None or not answered:
        raise RuntimeError(f"the {store.kind} store did not give back the entry it was given")
    return {
        "get_hit": await call_times(lambda: store.get(key.name), calls),
        "get_miss": await call_times(lambda: store.get(key.name + "-absent"), calls),
        "lookup_decoded": await call_times(lambda: cache._lookup(key), calls),
    }


def lookups(loop: asyncio.AbstractEventLoop, result: CascadeResult, calls: int) -> dict[str, Any]:
    """Lookups on the in-process store and on a real Redis on loopback, the product's lookup bound;
    a Redis left alone after a slow call is tried again at once, so that each call counts alone."""
    value = encode(result, time.time())
    measured: dict[str, Any] = {"entry_value_bytes": len(value)}
    memory = MemoryStore(64 * 1024 * 1024, 3600.0)
    measured["memory"] = loop.run_until_complete(store_lookups(memory, value, calls))
    with redis_server() as url:
        if url is None:
            measured["redis"] = {"skipped": "no redis-server on PATH (apt-get install -y redis-server)"}
            return measured
        store = RedisStore(CacheSettings(url=url, retry_after_s=0.001))
        measured["redis"] = {
            "server": redis_version(),
            "lookup_timeout_s": store.settings.lookup_timeout_s,
            **loop.run_until_complete(store_lookups(store, value, calls)),
        }
        loop.run_until_complete(store.close())
    return measured


def in_process(requests: int, rounds: int, warm_up: int, max_bytes: int, calls: int) -> dict[str, Any]:
    """The in-process part: a hit's latency against runs, the store at its bound, lookups."""
    from .cascade_request import request_body
    from .tree_worker import _replica

    loop = asyncio.new_event_loop()
    try:
        ingress = loop.run_until_complete(_replica())
        body = request_body()
        part: dict[str, Any] = {
            "latency": loop.run_until_complete(latency(ingress, body, requests, rounds, warm_up))
        }
        outcome = loop.run_until_complete(ingress.chat(arm_body(body, "off"), None))
        result: CascadeResult = outcome.result
        part["route"] = result.route
        part["memory"] = memory_at_bound(loop, result, max_bytes)
        part["lookups"] = lookups(loop, result, calls)
    finally:
        loop.close()
    return part
