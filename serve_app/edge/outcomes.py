"""What the request path returns: a value, never HTTP. A request was answered by the cascade,
forwarded to a model, or refused; the HTTP API renders these (``responses.http_reply``) and
``mai-batch`` reads them as they are (batch/answerer.py). An exception the server expects becomes a
refusal in one place (``settled``, through ``errors.request_error_of``); anything else is a bug, left
to rise: a 500 with a logged traceback at either end."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from typing import Any

from ..core.decision import Decision
from ..core.routes import Route
from ..core.trace import CascadeResult
from .errors import EXPECTED, RequestError, request_error_of
from .jobs import Job


@dataclass(frozen=True)
class Answered:
    """The cascade (or a single-model policy) answered ``job`` as ``decision`` said."""

    job: Job
    decision: Decision
    result: CascadeResult


@dataclass(frozen=True)
class Forwarded:
    """A request passed to the model it named (or that ``mai`` chose, for ``reason``): the engine's
    reply, either its JSON ``body`` or its ``events`` (server-sent events, streamed)."""

    model_id: str
    reason: str | None
    body: dict[str, Any] | None = None
    events: AsyncIterator[str] | None = None

    @property
    def headers(self) -> dict[str, str]:
        headers = {"x-mai-route": Route.PASSTHROUGH.value}
        if self.reason is not None:
            headers["x-mai-route-reason"] = self.reason
        return headers


@dataclass(frozen=True)
class Refused:
    """A request the server will not run, or could not: the client's error and its status."""

    error: RequestError

    @property
    def status(self) -> int:
        return self.error.status


RequestOutcome = Answered | Forwarded | Refused


async def settled(path: Awaitable[Answered | Forwarded]) -> RequestOutcome:
    """``path``'s outcome: what it returned, or the refusal of an exception the server expects."""
    try:
        return await path
    except EXPECTED as exc:
        return Refused(request_error_of(exc))
