"""``GET /console``: the page shipped in ``serve_app/console/`` (plain HTML, CSS and JavaScript modules,
example images), served by the ingress itself. Every file is read once when the replica builds its
app and served with a strict Content-Security-Policy: only the page's own files run or load, nothing
inline, nothing from elsewhere. The page holds no data: everything it shows comes from the API
(``/v1/models``, ``/v1/mai/answer``, ``/v1/chat/completions``, ``/v1/mai/stats``), behind the API key.

``/console/settings.json`` tells the page what a request may set on this server (the plans, the
transfer selectors it has), how often its statistics move (``audit.report_interval_s``) and where a
trace is shown (``telemetry.trace_url``, a link the page opens in a new tab: a navigation, which the
policy does not restrict): server configuration, no traffic data, behind the API key like the API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from pathlib import PurePosixPath
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, RedirectResponse, Response

from ..core.plans import Plan
from .errors import RequestError

# The Content-Security-Policy of every console file: the page's own scripts, styles, images and API.
CSP = "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}
TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
}


@dataclass(frozen=True)
class ConsoleFile:
    body: bytes
    media_type: str


def console_files(root: Any = None) -> dict[str, ConsoleFile]:
    """Every file of the console, by its path under ``/console/`` (``index.html``, ``js/api.js``, ...).
    ``root``: the folder (a ``Traversable``); the package's ``serve_app/console`` when None."""
    root = root if root is not None else files("serve_app").joinpath("console")
    found: dict[str, ConsoleFile] = {}

    def walk(folder: Any, prefix: str) -> None:
        for entry in folder.iterdir():
            name = f"{prefix}{entry.name}"
            if entry.is_dir():
                walk(entry, f"{name}/")
                continue
            media_type = TYPES.get(PurePosixPath(entry.name).suffix)
            if media_type is not None:  # only what a browser loads; never a stray file
                found[name] = ConsoleFile(entry.read_bytes(), media_type)

    walk(root, "")
    if "index.html" not in found:
        raise RuntimeError(f"the console's index.html is missing from {root}")
    return found


def console_settings(
    selectors: Iterable[str], report_interval_s: float, trace_url: str = ""
) -> dict[str, Any]:
    """What the page offers, how often it reads the statistics, and the operator's link to a trace
    (``telemetry.trace_url``: an http(s) URL with ``{trace_id}``, checked by the config; empty: the
    page shows the trace id as text)."""
    return {
        "plans": [plan.value for plan in Plan],
        "transfer_selectors": sorted(selectors),
        "report_interval_s": report_interval_s,
        "trace_url": trace_url,
    }


def add_console_routes(
    api: FastAPI,
    console: Mapping[str, ConsoleFile],
    settings: dict[str, Any],
    authorize: Callable[[Mapping[str, str]], object],
) -> None:
    """``GET /console`` (the page) and ``GET /console/<file>`` on ``api``. ``authorize``: the API key
    check, which ``settings.json`` passes like every API call (the page's own files hold no data)."""

    def serve(name: str) -> Response:
        file = console.get(name)
        if file is None:
            raise RequestError(f"the console has no file {name!r}", code="not_found", status=404)
        return Response(file.body, media_type=file.media_type, headers=HEADERS)

    async def page() -> Response:
        return serve("index.html")

    async def console_file(path: str, request: Request) -> Response:
        if path == "settings.json":
            authorize(request.headers)
            return JSONResponse(settings, headers=HEADERS)
        if path in ("", "index.html"):  # the page's links are relative to /console itself
            return RedirectResponse("../console", status_code=308)
        return serve(path)

    methods = ["GET", "HEAD"]
    api.add_api_route("/console", page, methods=methods, include_in_schema=False)
    api.add_api_route("/console/{path:path}", console_file, methods=methods, include_in_schema=False)
