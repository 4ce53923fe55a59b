"""Readiness: whether every model deployment the application needs answers a check, as ``GET /readyz``
says it and as a request that arrives before then is told. Pure: a check's result, its reply (status,
body, ``Retry-After``), how long it is reused, and what a probe's end means; then the checking itself
(``ReadinessGate``), through the deployment handles: ``GET /readyz``'s check (reused for ``MAX_AGE_S``),
and the wait of a request that arrives before every deployment has answered. Once they all have, the
gate is open for the replica's life and requests pass it without a check; ``/readyz`` goes on
checking."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from contextvars import Context
from dataclasses import dataclass, field
from typing import Any

from .errors import RequestError
from .keys import NO_KEYS, KeyRing

MAX_AGE_S = 5.0  # a check answers /readyz this long before the deployments are asked again
PROBE_TIMEOUT_S = 2.0  # a deployment that has not answered a check within this is still loading
MIN_PROBE_S = 0.25  # the shortest check: a deployment that is up answers within milliseconds
RECHECK_S = 0.5  # a waiting request asks again this long after a check that found one not ready


class NotServing(Exception):
    """A probe's answer that the replica itself cannot serve (not a deployment still loading or
    failing): its words are safe to show anyone, and ``/readyz`` shows them."""


@dataclass(frozen=True)
class Check:
    """One readiness check: when it ended (monotonic seconds), the deployments it asked, in order, and
    why each one that is not ready is not (``name -> reason``)."""

    checked_at: float
    deployments: tuple[str, ...]
    not_ready: Mapping[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> bool:
        return not self.not_ready


def not_ready_reason(
    error: BaseException | None, timeout_s: float, error_id: str | None = None
) -> str | None:
    """Why a deployment is not ready, from how its check ended: None when it answered; a timeout is a
    deployment still loading (a call waits in its handle's queue until a replica exists); any other
    failure is named by ``error_id`` alone (``/readyz`` answers without a key: the exception's words
    go to the log under that id, never to the caller)."""
    if error is None:
        return None
    if isinstance(error, TimeoutError):
        return f"loading: no answer within {timeout_s:g} s"
    logged = f"error id {error_id}; " if error_id else ""
    return f"failing ({logged}the detail is in the server log)"


def unanswered(deployments: tuple[str, ...], now: float, timeout_s: float) -> Check:
    """The check of deployments none of which answered within ``timeout_s``."""
    reason = not_ready_reason(TimeoutError(), timeout_s)
    return Check(now, deployments, {name: str(reason) for name in deployments})


def is_fresh(check: Check | None, now: float, max_age_s: float = MAX_AGE_S) -> bool:
    """Whether ``check`` may still answer /readyz at ``now``."""
    return check is not None and 0 <= now - check.checked_at < max_age_s


def retry_after_s(check: Check, now: float, max_age_s: float = MAX_AGE_S) -> int:
    """When a client should ask again: once this check has expired (asking sooner gets the same
    answer), in whole seconds, at least 1."""
    return max(1, math.ceil(check.checked_at + max_age_s - now))


class NotReadyError(RequestError):
    """The 503 of a check that found deployments not ready: the API's error body, which also lists
    them under ``loading``, and ``Retry-After``."""

    def __init__(self, check: Check, now: float, *, waited_s: float | None = None):
        names = "; ".join(f"{name} ({reason})" for name, reason in check.not_ready.items())
        after = "" if waited_s is None else f" after a wait of {waited_s:g} s"
        super().__init__(
            f"the models are not ready{after}: {names}; retry later",
            code="not_ready",
            status=503,
            headers={"Retry-After": str(retry_after_s(check, now))},
        )
        self.loading = tuple(check.not_ready)

    def body(self) -> dict[str, Any]:
        body = super().body()
        body["error"]["loading"] = list(self.loading)
        return body


def readiness_reply(check: Check, now: float) -> tuple[int, dict[str, Any], dict[str, str]]:
    """``GET /readyz``'s status, body and headers for ``check``: 200 naming the deployments that
    answered, or the 503 of ``NotReadyError``."""
    if check.ready:
        return 200, {"status": "ready", "deployments": list(check.deployments)}, {}
    error = NotReadyError(check, now)
    return error.status, error.body(), error.headers


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
            # Shared by every caller: in a context of its own, not the first caller's (its trace).
            self._running = asyncio.get_running_loop().create_task(self._run(timeout_s), context=Context())
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
