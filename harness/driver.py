"""The one HTTP driver: N concurrent clients, each sending its next request when the last one
returned (a closed loop), used by mai-eval and the load benchmarks alike."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

Item = TypeVar("Item")
Result = TypeVar("Result")


async def closed_loop(
    base_url: str,
    items: Sequence[Item],
    send: Callable[[httpx.AsyncClient, int, Item], Awaitable[Result]],
    *,
    concurrency: int,
    timeout_s: float = 600,
    headers: Mapping[str, str] | None = None,
    on_result: Callable[[Result], None] | None = None,
    until: Callable[[], bool] | None = None,
) -> tuple[list[Result], float]:
    """``send(http, index, item)`` for every item with ``concurrency`` clients sharing one connection
    pool (stopping early once ``until()`` is true); returns the results in completion order and the
    wall time. ``on_result`` sees each result as it arrives."""
    queue: asyncio.Queue[tuple[int, Item]] = asyncio.Queue()
    for index, item in enumerate(items):
        queue.put_nowait((index, item))
    results: list[Result] = []
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty() and not (until is not None and until()):
            index, item = queue.get_nowait()
            result = await send(http, index, item)
            results.append(result)
            if on_result is not None:
                on_result(result)

    started = time.perf_counter()
    if items:
        async with httpx.AsyncClient(
            base_url=base_url, timeout=timeout_s, limits=limits, headers=dict(headers or {})
        ) as http:
            await asyncio.gather(*(client(http) for _ in range(min(concurrency, len(items)))))
    return results, time.perf_counter() - started


@dataclass
class ClientReply:
    status: int
    latency_s: float
    route: str | None = None
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)
    retry_after: str | None = None
    error: str | None = None
    overload: dict[str, Any] | None = None  # the trace's overload entry (cascade.overload)
    answer: str | None = None
    index: int | None = None  # the body's position in what was sent (results come in completion order)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


async def drive(
    base_url: str,
    path: str,
    bodies: Sequence[dict[str, Any]],
    *,
    concurrency: int,
    timeout_s: float = 600,
    on_tick: Callable[[], None] | None = None,
    until: Callable[[], bool] | None = None,
    request_ids: str | None = None,
) -> tuple[list[ClientReply], float]:
    """POST every body once to ``path`` through ``closed_loop``; returns the outcomes and the wall time.
    With ``request_ids``, body i is sent with the header ``x-request-id: <request_ids><i>``, which makes
    emulated runs reproducible."""

    async def post(http: httpx.AsyncClient, index: int, body: dict[str, Any]) -> ClientReply:
        headers = {"x-request-id": f"{request_ids}{index}"} if request_ids is not None else None
        started = time.perf_counter()
        try:
            response = await http.post(path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            return ClientReply(
                0, time.perf_counter() - started, error=f"{type(exc).__name__}: {exc}", index=index
            )
        outcome = ClientReply(
            response.status_code,
            time.perf_counter() - started,
            retry_after=response.headers.get("retry-after"),
            index=index,
        )
        if response.status_code == 200:
            data = response.json()
            trace = data.get("trace") or data.get("mai", {}).get("trace", {})
            outcome.route, outcome.tokens = trace.get("route"), trace.get("tokens", {})
            outcome.overload, outcome.answer = trace.get("overload"), data.get("answer")
        else:
            outcome.error = response.text[:300]
        return outcome

    return await closed_loop(
        base_url,
        bodies,
        post,
        concurrency=concurrency,
        timeout_s=timeout_s,
        on_result=(lambda _: on_tick()) if on_tick is not None else None,
        until=until,
    )
