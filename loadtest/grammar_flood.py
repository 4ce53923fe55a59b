"""A cached grammar beside a flood of costly ones, on threads sized as vLLM 0.32's engine sizes its
grammar pool (``StructuredOutputManager``: ``ThreadPoolExecutor(max_workers=max(1, (cpus + 1) // 2))``,
vllm/v1/structured_output/__init__.py). The engine hands every structured request's compile to that pool,
a grammar the compiler has cached too, so the cascade's own answer regex waits behind whatever compiles
are queued before it. Run in ``python -m loadtest.grammar_cost``'s child process."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any


def flood(
    compile_one: Callable[[str, str], Any], cached: tuple[str, str], costly: list[tuple[str, str]]
) -> dict[str, Any]:
    """Seconds from submitting ``cached`` (compiled once before) to its grammar: alone (median of 5),
    then submitted right after every one of ``costly`` (distinct, so none is cached)."""
    threads = max(1, ((os.cpu_count() or 1) + 1) // 2)
    compile_one(*cached)
    with ThreadPoolExecutor(max_workers=threads) as pool:

        def latency() -> float:
            started = time.perf_counter()
            pool.submit(compile_one, *cached).result()
            return time.perf_counter() - started

        alone = [latency() for _ in range(5)]
        started = time.perf_counter()
        queued = [pool.submit(compile_one, *request) for request in costly]
        beside = latency()
        wait(queued)
        flood_s = time.perf_counter() - started
    return {
        "threads": threads,
        "flood_requests": len(costly),
        "cached_alone_s": round(statistics.median(alone), 4),
        "cached_beside_flood_s": round(beside, 4),
        "flood_s": round(flood_s, 4),
    }
