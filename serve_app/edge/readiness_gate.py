"""The readiness of the model deployments one ingress replica calls, checked through their handles:
``GET /readyz``'s check (reused for ``readiness.MAX_AGE_S``), and the wait of a request that arrives
before every deployment has answered. Once they all have, the gate is open for the replica's life and
requests pass it without a check; ``/readyz`` goes on checking."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from .keys import NO_KEYS, KeyRing
from .readiness import (
    MIN_PROBE_S,
    PROBE_TIMEOUT_S,
    RECHECK_S,
    Check,
    NotReadyError,
    NotServing,
    is_fresh,
    not_ready_reason,
    unanswered,
)

logger = logging.getLogger("ray.serve")

Probe = Callable[[], Awaitable[Any]]


def keys_probe(ring: KeyRing) -> Probe:
    """Whether a replica whose exposure requires API keys has some (its keys file read again first):
    until it has, it is not ready, and says why without naming a key source."""

    async def probe() -> None:
        ring.reload()
        if ring.closed:
            raise NotServing(NO_KEYS)

    return probe


def handle_probe(handle: Any) -> Probe:
    """A deployment's ``check_health`` called through its handle (ray.serve.llm's LLMServer has it;
    the emulated VLM and the attention scorer have the same). Before the deployment has a replica the
    call waits in the handle's queue; when the gate's timeout ends the wait, the call is cancelled, so
    nothing is left queued."""

    async def probe() -> None:
        response = handle.check_health.remote()
        try:
            await response
        except asyncio.CancelledError:
            response.cancel()
            raise

    return probe


class ReadinessGate:
    """``probes``: deployment name -> its check. ``clock`` and ``sleep`` replace the monotonic clock
    and ``asyncio.sleep`` (tests)."""

    def __init__(
        self,
        probes: Mapping[str, Probe],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ):
        self._probes = dict(probes)
        self._clock, self._sleep = clock, sleep
        self._last: Check | None = None
        self._running: asyncio.Future[Check] | None = None
        self.open = not self._probes  # True once every deployment has answered a check

    def now(self) -> float:
        return self._clock()

    def require(self, name: str, probe: Probe) -> None:
        """Check ``probe`` too (``name`` in /readyz): the gate is not open until it answers."""
        self._probes[name] = probe
        self.open = False

    async def current(self) -> Check:
        """``/readyz``: the last check while it is fresh, else a new one."""
        if self._last is not None and is_fresh(self._last, self._clock()):
            return self._last
        return await self._check(PROBE_TIMEOUT_S)

    async def wait(self, bound_s: float) -> None:
        """Return at once when the gate is open; else check until every deployment answers, or raise
        ``NotReadyError`` naming those that did not once ``bound_s`` has passed."""
        if self.open:
            return
        started = self._clock()
        while True:
            left = bound_s - (self._clock() - started)
            check = await self._check(min(PROBE_TIMEOUT_S, max(left, MIN_PROBE_S)))
            if check.ready:
                return
            left = bound_s - (self._clock() - started)
            if left <= 0:
                raise NotReadyError(check, self._clock(), waited_s=bound_s)
            await self._sleep(min(RECHECK_S, left))

    async def _check(self, timeout_s: float) -> Check:
        """A check of every deployment, shared: a caller that comes while one runs waits for that one
        (at most ``timeout_s``: past it, the last result, or every deployment not yet answering)."""
        if self._running is None:
            self._running = asyncio.ensure_future(self._run(timeout_s))
        try:
            return await asyncio.wait_for(asyncio.shield(self._running), timeout_s + MIN_PROBE_S)
        except TimeoutError:
            return self._last or unanswered(tuple(self._probes), self._clock(), timeout_s)

    async def _run(self, timeout_s: float) -> Check:
        try:
            names = tuple(self._probes)
            reasons = await asyncio.gather(*(self._ask(self._probes[name], timeout_s) for name in names))
            check = Check(
                self._clock(),
                names,
                {name: reason for name, reason in zip(names, reasons, strict=True) if reason is not None},
            )
            self._last = check
            self.open = self.open or check.ready
            return check
        finally:
            self._running = None

    @staticmethod
    async def _ask(probe: Probe, timeout_s: float) -> str | None:
        try:
            await asyncio.wait_for(probe(), timeout_s)
        except TimeoutError as exc:  # still loading
            return not_ready_reason(exc, timeout_s)
        except NotServing as exc:  # the replica's own reason, in words safe to show
            return str(exc)
        except Exception as exc:  # the deployment's own failure: not ready, the detail in the log
            error_id = uuid.uuid4().hex[:16]
            logger.warning("MAI readiness check failed (error id %s)", error_id, exc_info=exc)
            return not_ready_reason(exc, timeout_s, error_id)
        return None
