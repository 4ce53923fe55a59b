"""An ingress replica in process, without Ray: its real route handlers (``edge.api.build_api``) and
parts (``edge.parts.build_parts``) over scripted model clients."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi.testclient import TestClient

from serve_app.config import AppConfig
from serve_app.edge.api import MAIIngress, build_api
from serve_app.edge.keys import KeyRing, unlimited
from serve_app.edge.observers import Metrics
from serve_app.edge.parts import build_parts

CONFIG = AppConfig.model_validate(
    {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
)


class RecordedMetrics(Metrics):
    """The metrics a replica records, kept for the test to read."""

    def __init__(self):
        self.errors: list[tuple[int, str]] = []
        self.keys: list[tuple[str, str, dict]] = []
        self.key_paths: list[str] = []
        self.plans: list[tuple[str, str]] = []
        self.overload: list[tuple[str, str]] = []
        self.overload_levels: list[int] = []
        self.destinations: list[tuple[str, str]] = []

    def record_error(self, status: int, code: str) -> None:
        self.errors.append((status, code))

    def record_key(self, key: str, outcome: str, tokens, path: str = "cascade") -> None:
        self.keys.append((key, outcome, dict(tokens)))
        self.key_paths.append(path)

    def record(self, policy, result) -> None:
        pass

    def record_passthrough(self, model_id: str, latency_s: float) -> None:
        pass

    def record_destination(self, destination: str, reasons: tuple[str, ...]) -> None:
        self.destinations.extend((destination, reason) for reason in reasons)

    def record_plan(self, cls: str, plan: str) -> None:
        self.plans.append((cls, plan))

    def record_overload(self, level: str, route: str) -> None:
        self.overload.append((level, route))

    def set_overload_level(self, level: int) -> None:
        self.overload_levels.append(level)

    def record_audit(self, cls: str, route: str, disagreed: bool) -> None:
        pass

    def record_audit_not_run(self, reason: str) -> None:
        pass


class Replica(MAIIngress.func_or_class):
    def __del__(self):  # Serve's wrapper shuts its ASGI app down here; this one never started
        pass


def replica(
    small: Any,
    large: Any,
    config: AppConfig = CONFIG,
    *,
    api_keys: tuple | KeyRing = (),
    stats: Any = None,
    name: str = "replica-a",
    large_queue: Any = None,
    clock: Any = None,
    cache: bool = False,
) -> Replica:
    """A replica over scripted ``small`` and ``large`` clients, built by the product's own factory
    (``edge.parts.build_parts`` and ``MAIIngress.assemble``), recording its metrics. ``large_queue``:
    the large model's calls in flight the overload guard reads; ``clock`` its time. ``cache``: keep
    the config's answer cache (on by default in a config); off otherwise, so that tests asking one
    question again and again see each run."""
    if not cache:
        config = config.model_copy(update={"cache": config.cache.model_copy(update={"enabled": False})})
    parts = build_parts(
        config,
        small,
        large,
        RecordedMetrics(),
        shared_stats=stats is not None,
        large_queue=large_queue,
        clock=clock,
    )
    ingress = object.__new__(Replica)  # __init__ builds the clients from deployment handles
    keys = (
        api_keys
        if isinstance(api_keys, KeyRing)
        else KeyRing.of(tuple(unlimited(f"key-{n}", digest.hex()) for n, digest in enumerate(api_keys)))
    )
    ingress.assemble(config, parts, {}, stats, keys, name)
    return ingress


class Remote:
    """A deployment method as a handle shows it: ``.remote(...)`` returns something to await."""

    def __init__(self, method):
        self.method = method

    def remote(self, *args):
        async def call():
            return self.method(*args)

        return call()


def holder_handle(report, snapshot) -> Any:
    """A handle to the stats holder whose ``report`` and ``snapshot`` are these functions."""
    return type("Holder", (), {"report": Remote(report), "snapshot": Remote(snapshot)})


def report_to(holder: Any, name: str, reporter: Any) -> Any:
    """``reporter``'s next exchange with an in-process holder (``stats_holder.StatsHolder``) as ``name``:
    the holder's reply."""

    async def send(report):
        return holder.report(name, report)

    return asyncio.run(reporter.exchange(send))


def client_of(ingress: Replica) -> TestClient:
    return TestClient(build_api(ingress, ingress.config.security), raise_server_exceptions=False)
