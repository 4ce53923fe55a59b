"""Errors a client can act on, as OpenAI-style JSON bodies."""

from __future__ import annotations

from typing import Any

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
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
