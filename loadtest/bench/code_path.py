"""Which of the project's modules one request's code path runs through, and how large the code they belong
to is: a profiler hook counts every Python function entered (a coroutine's every resumption included)
while an ingress handles one request, after a warm-up request that fills first-use caches (and keeps no
answer: the request counted is a new question to the answer cache, which runs the cascade).

``modules_run`` takes the ingress as a factory and the request as a body, so the same measurement runs
against another checkout's ingress (``root``: that checkout)."""

from __future__ import annotations

import asyncio
import json
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.paths import ROOT

from .in_process import json_request

# The packages whose code is the product and its harness; the bench, its fakes and the tests are not.
PROJECT_PACKAGES = ("serve_app", "deployments", "harness", "evaluation")
# The packages whose modules' size the result reports.
SERVING_PACKAGES = ("serve_app", "deployments")


def project_module(filename: str, root: Path = ROOT) -> str | None:
    """``filename`` (a code object's) as a path relative to ``root`` when it is a module of one of the
    ``PROJECT_PACKAGES``, else None: the standard library, site-packages, the bench, generated code."""
    if not filename.endswith(".py"):
        return None
    try:
        relative = Path(filename).resolve().relative_to(root.resolve())
    except ValueError:
        return None
    if relative.parts[0] not in PROJECT_PACKAGES or "site-packages" in relative.parts:
        return None
    return relative.as_posix()


def project_type(value: Any) -> str | None:
    """``module.QualName`` of ``value``'s type when one of the ``PROJECT_PACKAGES`` defines it."""
    kind = type(value)
    module = getattr(kind, "__module__", "") or ""
    if module.partition(".")[0] not in PROJECT_PACKAGES:
        return None
    return f"{module}.{kind.__qualname__}"


@contextmanager
def calls_counted(calls: Counter[str], shapes: Counter[str] | None = None) -> Iterator[None]:
    """Count into ``calls``, per code file, every Python function entered in this thread and in threads
    started meanwhile, until the block ends; into ``shapes``, the project types of the values Python
    functions returned (a request's shapes as it walks the path: a pydantic model a validator returned
    counts, as does a dataclass a project function built)."""

    def record(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            calls[frame.f_code.co_filename] += 1
        elif event == "return" and shapes is not None and arg is not None:
            shape = project_type(arg)
            if shape is not None:
                shapes[shape] += 1

    threading.setprofile(record)
    sys.setprofile(record)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def by_module(calls: Counter[str], root: Path = ROOT) -> dict[str, int]:
    """The counted calls of the project's modules, by path relative to ``root``, sorted by path."""
    modules: Counter[str] = Counter()
    for filename, count in calls.items():
        module = project_module(filename, root)
        if module is not None:
            modules[module] += count
    return dict(sorted(modules.items()))


async def chat_completions(ingress: Any, request: Any) -> Any:
    """``POST /v1/chat/completions`` through the handler of the checkout in use: its HTTP API's
    (serve_app/edge/api.py) or, in a checkout from before that module, the replica's own method."""
    try:
        from serve_app.edge.api import chat_completions as handler
    except ImportError:
        return await ingress.chat_completions(request)
    return await handler(ingress, request)


async def _warm_then_measure(
    ingress_factory: Callable[[], Any], body: Any
) -> tuple[Counter[str], Counter[str], Any]:
    ingress = ingress_factory()  # built in the event loop, as a replica is
    # The warm-up keeps no answer (no-store), so that the request counted is what a new question is, a
    # miss of the answer cache that runs the cascade, not the warm-up's answer reused.
    await chat_completions(ingress, json_request(body, request_id="warm-up", cache_control="no-store"))
    request = json_request(body, request_id="measured")
    calls: Counter[str] = Counter()
    shapes: Counter[str] = Counter()
    with calls_counted(calls, shapes):
        reply = await chat_completions(ingress, request)
    return calls, shapes, reply


def modules_run(ingress_factory: Callable[[], Any], body: Any, *, root: Path = ROOT) -> dict[str, Any]:
    """The project modules whose code ran while the ingress ``ingress_factory()`` answered the chat
    request ``body`` (the second of two): ``modules`` (relative path -> calls, sorted), their ``count``,
    all their ``calls``, the project types the request's values took on the way (``shapes``: type ->
    values returned), and the reply's ``status`` and MAI ``route`` (None for a reply without one)."""
    calls, shapes, reply = asyncio.run(_warm_then_measure(ingress_factory, body))
    modules = by_module(calls, root)
    answer = json.loads(reply.body)
    return {
        "route": answer.get("mai", {}).get("route"),
        "status": reply.status_code,
        "count": len(modules),
        "calls": sum(modules.values()),
        "modules": modules,
        "shapes": dict(sorted(shapes.items())),
    }


def lines_of(path: Path) -> int:
    return len(path.read_text().splitlines())


def module_lines(root: Path = ROOT, packages: Iterable[str] = SERVING_PACKAGES) -> dict[str, int]:
    """Every module of ``packages`` under ``root`` -> its lines, by relative path."""
    return {
        path.relative_to(root).as_posix(): lines_of(path)
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }


def code_size(lines: dict[str, int]) -> dict[str, Any]:
    """From ``module_lines``: the lines of serve_app in all, and its or deployments' largest module."""
    largest = max(lines, key=lambda path: lines[path])
    return {
        "lines_in_serve_app": sum(count for path, count in lines.items() if path.startswith("serve_app/")),
        "largest_module": {"path": largest, "lines": lines[largest]},
    }
