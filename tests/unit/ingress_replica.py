"""An ingress replica in process, without Ray: its real route handlers (``edge.ingress.build_api``) over
scripted model clients, the attributes a replica's ``__init__`` sets put in by hand."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from serve_app.config import AppConfig
from serve_app.core.cascade import Cascade
from serve_app.edge.auditor import Auditor
from serve_app.edge.demand_meter import DemandMeter
from serve_app.edge.ingress import MAIIngress, build_api
from serve_app.edge.overload_guard import OverloadGuard
from serve_app.edge.plan_controller import PlanController

CONFIG = AppConfig.model_validate(
    {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
)


class RecordedMetrics:
    """The metrics a replica records, kept for the test to read."""

    def __init__(self):
        self.errors: list[tuple[int, str]] = []
        self.plans: list[tuple[str, str]] = []
        self.overload: list[tuple[str, str]] = []
        self.overload_levels: list[int] = []

    def record_error(self, status: int, code: str) -> None:
        self.errors.append((status, code))

    def record(self, policy, result) -> None:
        pass

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
    api_keys: tuple = (),
    stats: Any = None,
    name: str = "replica-a",
    large_queue: Any = lambda: 0,
    clock: Any = None,
) -> Replica:
    """``large_queue``: the large model's calls in flight the overload guard reads; ``clock`` its time."""
    ingress = object.__new__(Replica)
    ingress.config, ingress.api_keys, ingress.model_handles = config, api_keys, {}
    ingress.metrics = RecordedMetrics()
    ingress.cascade = Cascade(small, large)
    audit = config.cascade.audit
    ingress.auditor = Auditor(ingress.cascade, audit, lambda: (0, 0), ingress.metrics)
    ingress.overload = OverloadGuard(
        config.cascade.overload, large_queue, ingress.metrics, **({"clock": clock} if clock else {})
    )
    ingress.demand = DemandMeter(config.autoscaling.policy, config.autoscaling.tau_s)
    ingress.plans = PlanController(
        config.cascade.adaptive, audit, ingress.auditor.book, shared=stats is not None
    )
    ingress.stats_holder, ingress.replica, ingress._reporter = stats, name, None
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


def client_of(ingress: Replica) -> TestClient:
    return TestClient(build_api(ingress, ingress.config.security), raise_server_exceptions=False)
