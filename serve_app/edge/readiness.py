"""Readiness: whether every model deployment the application needs answers a check, as ``GET /readyz``
says it and as a request that arrives before then is told. Pure: a check's result, its reply (status,
body, ``Retry-After``), how long it is reused, and what a probe's end means. The checking itself, over
the deployment handles, is ``readiness_gate.py``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import RequestError

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
