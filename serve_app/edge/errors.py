"""Errors a client can act on, as OpenAI-style JSON bodies, and the one place exceptions become them:
``install_error_handlers`` (FastAPI exception handlers for what the server expects, and a middleware
that answers any other exception, a bug, with a 500 and an error id)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..cache.reuse import JoinTimeout
from ..core.cascade import ModelUnavailableError
from ..core.contracts import EngineError, InputRejectedError, UnknownSelectorError

logger = logging.getLogger("ray.serve")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    408: "timeout",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "internal_error",
    503: "service_unavailable",
    504: "timeout",
}


class RequestError(Exception):
    """A request the server will not run. ``status`` is a 4xx, or 503/504 for capacity and time."""

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str = "invalid_request",
        status: int = 400,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": _TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }


def describe_validation_error(exc: Any) -> tuple[str, str | None]:
    """A one-line message and the parameter path from a pydantic ``ValidationError``."""
    errors = exc.errors()
    if not errors:
        return "invalid request", None
    first = errors[0]
    path = ".".join(str(part) for part in first.get("loc", ()) if part not in ("body",))
    message = first.get("msg", "invalid value")
    if first.get("type") == "extra_forbidden":
        message = f"unknown field {path!r}"
    elif path:
        message = f"{path}: {message}"
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    return message + more, path or None


# -- exceptions -> HTTP bodies: the one place --------------------------------------------------------

RETRY_AFTER_S = 5  # what a 503 asks a client to wait before it retries


def unavailable(message: str, code: str = "model_unavailable") -> RequestError:
    """A 503 "retry later" for a model (or the statistics holder) that failed or is overloaded, with
    the one ``Retry-After``."""
    return RequestError(
        f"{message}; retry later",
        code=code,
        status=503,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


def request_error_of(exc: Exception) -> RequestError:
    """The client-facing error of an exception the server expects: a refused input, a failed model,
    an unknown selector, an HTTP error of the framework. ``TypeError`` for anything else: that is a
    bug, answered by ``InternalErrors``."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, InputRejectedError):
        where = f"the {exc.model} model cannot take this input (stage {exc.stage!r}): " if exc.stage else ""
        return RequestError(f"{where}{exc}", param="messages", code=exc.code, status=exc.status)
    if isinstance(exc, ModelUnavailableError | EngineError):
        return unavailable(str(exc))
    if isinstance(exc, JoinTimeout):
        return RequestError(str(exc), code="timeout", status=504)
    if isinstance(exc, UnknownSelectorError):
        return RequestError(str(exc), param="options.transfer_selector", code="invalid_options")
    if isinstance(exc, StarletteHTTPException):
        code = "not_found" if exc.status_code == 404 else "http_error"
        return RequestError(str(exc.detail), code=code, status=exc.status_code)
    raise TypeError(f"no client error for {type(exc).__name__}")


EXPECTED = (
    RequestError,
    InputRejectedError,
    ModelUnavailableError,
    EngineError,
    UnknownSelectorError,
    JoinTimeout,
)


def warning_headers(warnings: tuple[str, ...]) -> dict[str, str]:
    """A reply's ``Warning`` header (RFC 9111 warn-code 299, "miscellaneous persistent warning") for
    what a request sent under a name that goes in the next release (``protocol.Warnings``); none
    without any."""
    if not warnings:
        return {}
    return {"Warning": ", ".join(f'299 - "{text}"' for text in warnings)}


def warned(warnings: tuple[str, ...]) -> AbstractContextManager[None]:
    """An expected exception inside, refused with ``warnings``' header too: a request's warnings reach
    its error reply as they reach its answer. Without warnings (nearly every request), nothing to do."""
    return _warned(warnings) if warnings else nullcontext()


@contextmanager
def _warned(warnings: tuple[str, ...]) -> Iterator[None]:
    try:
        yield
    except EXPECTED as exc:
        error = request_error_of(exc)
        headers = error.headers | warning_headers(warnings)
        raise RequestError(
            error.message, param=error.param, code=error.code, status=error.status, headers=headers
        ) from exc


def noted(error: RequestError, record: Callable[[int, str], None]) -> RequestError:
    """``error``, counted (``record``: by status and code) and, for a failure of the server's side,
    logged: what every refusal goes through once, whichever way it reaches the client."""
    if error.status >= 500:
        logger.warning("MAI request failed: %s", error.message)
    record(error.status, error.code)
    return error


def error_response(error: RequestError) -> Response:
    """A refusal as HTTP: its JSON body, status and headers."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def install_error_handlers(api: FastAPI, record: Callable[[int, str], None]) -> None:
    """Every expected exception a route raises becomes its JSON error body (``record``-ed by status and
    code); anything else becomes a 500 with an error id and a logged traceback."""

    async def expected(request: Request, exc: Exception) -> Response:
        return error_response(noted(request_error_of(exc), record))

    for kind in (*EXPECTED, StarletteHTTPException):
        api.add_exception_handler(kind, expected)
    api.add_middleware(InternalErrors, record=record)


class InternalErrors:
    """ASGI middleware: an exception no handler expects is a bug in MAI Serve. The client gets a 500
    naming an error id (never a 503 "retry later"), the log gets the traceback under the same id, and
    the replica keeps serving."""

    def __init__(self, app: ASGIApp, record: Callable[[int, str], None]):
        self.app, self.record = app, record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracked_send)
        except Exception:
            error_id = uuid.uuid4().hex
            logger.exception(
                "MAI internal error %s on %s %s", error_id, scope.get("method"), scope.get("path")
            )
            if started:  # a stream already under way: nothing more can be said to the client
                raise
            self.record(500, "internal_error")
            await JSONResponse(internal_error_body(error_id), status_code=500)(scope, receive, send)


def internal_error_body(error_id: str) -> dict[str, Any]:
    """The 500 of a bug: no detail, an id the log's traceback carries."""
    return {
        "error": {
            "message": f"internal server error (error id {error_id}); the request was not at "
            "fault: please report it with this id",
            "type": "internal_error",
            "param": None,
            "code": "internal_error",
            "error_id": error_id,
        }
    }
