"""A closed-loop load driver: N concurrent clients, each sending its next request when the last one
returned, until a request count is reached. Records what each request got."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class Outcome:
    status: int
    latency_s: float
    route: str | None = None
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    retry_after: str | None = None
    error: str | None = None


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def drive(base_url: str, path: str, bodies: Sequence[dict[str, Any]], *, concurrency: int,
                timeout_s: float = 600, on_tick: Callable[[], None] | None = None,
                until: Callable[[], bool] | None = None, request_ids: str | None = None) -> tuple[list[Outcome], float]:
    """Send every body once with ``concurrency`` clients (stopping early once ``until()`` is true);
    returns the outcomes and the wall time. With ``request_ids``, body i is sent with the header
    ``x-request-id: <request_ids><i>``, which makes emulated runs reproducible."""
    queue: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()
    for index, body in enumerate(bodies):
        queue.put_nowait((index, body))
    outcomes: list[Outcome] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty() and not (until is not None and until()):
            index, body = queue.get_nowait()
            headers = {"x-request-id": f"{request_ids}{index}"} if request_ids is not None else None
            started = time.perf_counter()
            try:
                response = await http.post(path, json=body, headers=headers)
                latency = time.perf_counter() - started
                outcome = Outcome(response.status_code, latency, retry_after=response.headers.get("retry-after"))
                if response.status_code == 200:
                    data = response.json()
                    trace = data.get("trace") or data.get("mai", {}).get("trace", {})
                    outcome.route, outcome.tokens = trace.get("route"), trace.get("tokens", {})
                else:
                    outcome.error = response.text[:300]
            except httpx.HTTPError as exc:
                outcome = Outcome(0, time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}")
            outcomes.append(outcome)
            if on_tick is not None:
                on_tick()

    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        wall = time.perf_counter() - started
    return outcomes, wall
