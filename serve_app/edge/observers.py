"""What an ingress replica observes of the requests it answers: its Prometheus metrics, and its own
load.

**Metrics.** The ingress's Prometheus metrics, exported through ``ray.serve.metrics`` next to Ray's
and vLLM's.

What one answered request contributes is computed by a pure function (``measure``) from its trace; the
``IngressMetrics`` class only hands those figures to Ray's metric objects. Ray exports each metric with
the prefix ``ray_`` (``ray_mai_requests_total``, ...), tagged also with the Serve deployment and replica.

**Load.** What an ingress replica measures of its own load: its calls to each model still in flight
(``InFlight``), the demand it reports for coupled autoscaling (``DemandMeter``), and its overload level
(``OverloadGuard``).

Calls in flight: a model client that counts this replica's calls to the model still in flight, the
model's queue as the replica sees it, served calls and audits' calls apart. Audits are shed past a
bound on the served calls (an audit never sheds itself), and the overload guard reads the large
model's served calls.

Demand: what this replica asks of each model, measured for coupled autoscaling: the decayed rate of
requests arriving, and per model the decayed mean of calls per finished request and seconds per call.
Arrivals are counted as a request reaches the ingress (a cascade request, or one passed to a model
unchanged); calls and their seconds are the finished request's trace (every stage it ran, with its
model and latency; an audit's calls are not a served request's and are not counted), a passthrough's
one call its own. Serve reads them through the ingress's ``record_autoscaling_stats`` (names in
``AUTOSCALING_METRICS``) and hands them to the application's policy (serve_app/fleet/autoscaling_policy.py)
with every deployment's context.

Overload (``cascade.overload``): each cascade request reads the large model's queue as this replica
sees it (its calls in flight) and moves the level (serve_app/core/decision.py); the request's decision
relaxes its thresholds at ``relax``, and the metrics count every request answered while the model was
overloaded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..cache.reuse import CACHE_METRICS
from ..core.contracts import GREEDY, Completion, Decoding, EngineCall, VLMClient
from ..core.decision import Decision, Level, OverloadReading, OverloadSettings, OverloadState
from ..core.roles import ROLES, SMALL
from ..core.routes import Route
from ..core.scaling import DecayedMean, DecayedRate, IngressDemand, ScalingPolicy
from ..core.trace import CascadeResult, Trace
from ..telemetry.exporter import DROPPED_DESCRIPTION, DROPPED_METRIC

# Seconds; requests run from tens of milliseconds (agreeing short answers) to minutes (long reasoning).
LATENCY_BUCKETS_S = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 60.0, 120.0, 300.0)

# name -> (kind, description, tag keys): every metric of the project's, Ray's Prometheus endpoint naming
# each ``ray_<name>`` (``_total`` for a counter). The ingress makes them all but ``MADE_ELSEWHERE``.
PROMETHEUS_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "mai_requests": ("counter", "Answered requests by policy and cascade route", ("policy", "route")),
    "mai_destinations": (
        "counter",
        "Requests by destination (cascade, passthrough) and reason: the cascade's one_image, follow_up "
        "and images, and why the rest passed through (a request with two unhonoured parameters counts "
        "under each)",
        ("destination", "reason"),
    ),
    "mai_request_latency_s": (
        "histogram",
        "Seconds from a request's arrival to its answer, by policy and route",
        ("policy", "route"),
    ),
    "mai_stage_latency_s": (
        "histogram",
        "Seconds of one model call, by model, prompt kind and outcome",
        ("model", "prompt_kind", "status"),
    ),
    "mai_tokens": (
        "counter",
        "Tokens by model, prompt kind and direction (prompt or completion)",
        ("model", "prompt_kind", "direction"),
    ),
    "mai_verifications": (
        "counter",
        "Cascade agreement checks by stage (short, reasoned) and outcome",
        ("stage", "agreed"),
    ),
    "mai_degraded_answers": (
        "counter",
        "Answers given without a model or stage that failed, by route",
        ("route",),
    ),
    "mai_audits": (
        "counter",
        "Early-exit answers audited against the reference policy, by question class and route",
        ("class", "route"),
    ),
    "mai_audit_disagreements": (
        "counter",
        "Audited answers the reference policy disagreed with, by question class and route",
        ("class", "route"),
    ),
    "mai_audits_not_run": (
        "counter",
        "Audits sampled but not run to the end: overload, shed, full, cancelled, failed or error",
        ("reason",),
    ),
    "mai_plans": (
        "counter",
        "Cascade requests by question class and the plan they ran (cascade.adaptive)",
        ("class", "plan"),
    ),
    "mai_overload_answers": (
        "counter",
        "Cascade requests answered while the large model was overloaded, by level (shed, relax) and "
        "route: relax answers ran with relaxed thresholds (cascade.overload)",
        ("level", "route"),
    ),
    "mai_overload_level": (
        "gauge",
        "This replica's overload level: 0 normal, 1 audits shed, 2 thresholds relaxed",
        (),
    ),
    "mai_request_errors": (
        "counter",
        "Requests answered with an error, by HTTP status and error code",
        ("status", "code"),
    ),
    "mai_key_requests": (
        "counter",
        "Requests by API key name and outcome: answered, rejected (a 4xx for its body or model), "
        "error, or the quota or share that refused it",
        ("key", "outcome"),
    ),
    "mai_key_tokens": (
        "counter",
        "Tokens (prompt and completion) by API key name, model and path (cascade or passthrough)",
        ("key", "model", "path"),
    ),
    # Counted by the tracing exporter in every process that exports spans (serve_app/telemetry/exporter.py).
    DROPPED_METRIC: ("counter", DROPPED_DESCRIPTION, ("reason",)),
    **CACHE_METRICS,  # made by the answer cache (serve_app/cache/reuse.py)
}
# Made where they are counted, not by the ingress: a second metric of the same name in the ingress's
# process would clash with the exporter's.
MADE_ELSEWHERE = frozenset({DROPPED_METRIC, *CACHE_METRICS})


@dataclass
class Measurements:
    """What one request adds: counter increments and histogram observations, each with its tags."""

    counters: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    histograms: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def measure(policy: str, result: CascadeResult) -> Measurements:
    """The figures of one answered request, from its trace (pure)."""
    trace, route = result.trace, result.route
    out = Measurements()
    out.counters.append(("mai_requests", {"policy": policy, "route": route}, 1))
    out.histograms.append(("mai_request_latency_s", {"policy": policy, "route": route}, trace.latency_s))
    for stage in trace.stages:
        out.histograms.append(
            (
                "mai_stage_latency_s",
                {"model": stage.model, "prompt_kind": stage.prompt_kind, "status": stage.status},
                stage.latency_s,
            )
        )
        for direction, tokens in (("prompt", stage.prompt_tokens), ("completion", stage.completion_tokens)):
            if tokens:
                out.counters.append(
                    (
                        "mai_tokens",
                        {"model": stage.model, "prompt_kind": stage.prompt_kind, "direction": direction},
                        tokens,
                    )
                )
    for check in trace.checks:  # the verifications the request's plan ran
        if check.check in ("short", "reasoned"):
            agreed = "true" if check.accepted else "false"
            # The label keeps its name ``stage``: the dashboards and alerts in use read it.
            out.counters.append(("mai_verifications", {"stage": check.check, "agreed": agreed}, 1))
    if route.startswith("degraded_"):
        out.counters.append(("mai_degraded_answers", {"route": route}, 1))
    return out


class Metrics(Protocol):
    """What an ingress replica records: ``IngressMetrics`` into Ray Serve's metrics (Prometheus),
    the tests' stand-in into lists they read."""

    def record(self, policy: str, result: CascadeResult) -> None: ...
    def record_passthrough(self, model_id: str, latency_s: float) -> None: ...
    def record_destination(self, destination: str, reasons: tuple[str, ...]) -> None: ...
    def record_audit(self, cls: str, route: str, disagreed: bool) -> None: ...
    def record_audit_not_run(self, reason: str) -> None: ...
    def record_plan(self, cls: str, plan: str) -> None: ...
    def record_overload(self, level: str, route: str) -> None: ...
    def set_overload_level(self, level: int) -> None: ...
    def record_error(self, status: int, code: str) -> None: ...
    def record_key(
        self, key: str, outcome: str, tokens: Mapping[str, int], path: str = "cascade"
    ) -> None: ...


class IngressMetrics(Metrics):
    """Ray Serve metric objects for ``PROMETHEUS_METRICS``; created in the replica (not picklable)."""

    def __init__(self) -> None:
        from ray.serve import metrics

        # Ray annotates tag_keys as a 1-tuple (tuple[str]); any tuple of names is what it takes.
        self._metrics: dict[str, Any] = {}
        for name, (kind, description, tags) in PROMETHEUS_METRICS.items():
            if name in MADE_ELSEWHERE:
                continue
            if kind == "counter":
                self._metrics[name] = metrics.Counter(name, description=description, tag_keys=tags)  # type: ignore[arg-type]
            elif kind == "gauge":
                self._metrics[name] = metrics.Gauge(name, description=description, tag_keys=tags)  # type: ignore[arg-type]
            else:
                self._metrics[name] = metrics.Histogram(
                    name,
                    description=description,
                    boundaries=list(LATENCY_BUCKETS_S),
                    tag_keys=tags,  # type: ignore[arg-type]
                )

    def record(self, policy: str, result: CascadeResult) -> None:
        measurements = measure(policy, result)
        for name, tags, value in measurements.counters:
            self._metrics[name].inc(value, tags=tags)
        for name, tags, value in measurements.histograms:
            self._metrics[name].observe(value, tags=tags)

    def record_passthrough(self, model_id: str, latency_s: float) -> None:
        """A request passed to a model unchanged: counted under its model id and the route ``passthrough``."""
        tags = {"policy": model_id, "route": Route.PASSTHROUGH.value}
        self._metrics["mai_requests"].inc(1, tags=tags)
        self._metrics["mai_request_latency_s"].observe(latency_s, tags=tags)

    def record_destination(self, destination: str, reasons: tuple[str, ...]) -> None:
        """A request went to ``destination`` for ``reasons`` (``routing.destination_reasons``)."""
        for reason in reasons:
            self._metrics["mai_destinations"].inc(1, tags={"destination": destination, "reason": reason})

    def record_audit(self, cls: str, route: str, disagreed: bool) -> None:
        self._metrics["mai_audits"].inc(1, tags={"class": cls, "route": route})
        if disagreed:
            self._metrics["mai_audit_disagreements"].inc(1, tags={"class": cls, "route": route})

    def record_audit_not_run(self, reason: str) -> None:
        self._metrics["mai_audits_not_run"].inc(1, tags={"reason": reason})

    def record_plan(self, cls: str, plan: str) -> None:
        self._metrics["mai_plans"].inc(1, tags={"class": cls, "plan": plan})

    def record_overload(self, level: str, route: str) -> None:
        self._metrics["mai_overload_answers"].inc(1, tags={"level": level, "route": route})

    def set_overload_level(self, level: int) -> None:
        self._metrics["mai_overload_level"].set(level)

    def record_error(self, status: int, code: str) -> None:
        self._metrics["mai_request_errors"].inc(1, tags={"status": str(status), "code": code})

    def record_key(self, key: str, outcome: str, tokens: Mapping[str, int], path: str = "cascade") -> None:
        """A request of the API key named ``key`` (a name, never a key): its outcome and tokens, by
        ``path`` (``cascade`` or ``passthrough``)."""
        self._metrics["mai_key_requests"].inc(1, tags={"key": key, "outcome": outcome})
        for model, count in tokens.items():
            self._metrics["mai_key_tokens"].inc(count, tags={"key": key, "model": model, "path": path})


class RequestMetrics:
    """The metrics observer: a cascade or baseline request's outcome and, for the cascade, its plan."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def answered(self, decision: Decision, result: CascadeResult) -> None:
        self.metrics.record(decision.options.policy.value, result)
        if result.trace.plan is not None:
            self.metrics.record_plan(decision.cls, result.trace.plan)


class InFlight:
    """A model client that counts its calls in flight: served calls in ``count``, audits' in ``audits``."""

    def __init__(self, client: VLMClient):
        self.client = client
        self.count = 0
        self.audits = 0

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        self._add(call, 1)
        try:
            return await self.client.complete(messages, max_tokens=max_tokens, call=call, decoding=decoding)
        finally:
            self._add(call, -1)

    def _add(self, call: EngineCall, change: int) -> None:
        if call.is_audit:
            self.audits += change
        else:
            self.count += change


class DemandMeter:
    def __init__(
        self, policy: ScalingPolicy, tau_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.policy, self.clock = policy, clock
        self.arrivals = DecayedRate(tau_s)
        self.calls = {role: DecayedMean(tau_s) for role in ROLES}
        self.call_s = {role: DecayedMean(tau_s) for role in ROLES}

    def arrived(self) -> None:
        self.arrivals.add(self.clock())

    def finished(self, trace: Trace) -> None:
        """A cascade request answered: its calls per model and their seconds."""
        self._finished({role: [s.latency_s for s in trace.stages if s.model == role] for role in ROLES})

    def answered(self, decision: Decision, result: CascadeResult) -> None:
        self.finished(result.trace)

    def passed_through(self, role: str | None, seconds: float) -> None:
        """A request sent to one model unchanged: one call there (none when the model is not one of
        the pair's roles)."""
        self._finished({name: [seconds] if name == role else [] for name in ROLES})

    def _finished(self, seconds_by_role: dict[str, list[float]]) -> None:
        now = self.clock()
        for role, seconds in seconds_by_role.items():
            self.calls[role].add(now, len(seconds))
            for value in seconds:
                self.call_s[role].add(now, value)

    def demand(self) -> IngressDemand:
        now = self.clock()
        return IngressDemand(
            rate=self.arrivals.value(now),
            requests=self.calls[SMALL].weight(now),
            calls_per_request={role: self.calls[role].mean() for role in ROLES},
            call_s={role: self.call_s[role].mean() for role in ROLES},
        )

    def report(self) -> dict[str, float]:
        """The custom autoscaling metrics of this replica (Serve's ``record_autoscaling_stats``)."""
        demand = self.demand()
        return {
            "mai_coupled": 1.0 if self.policy is ScalingPolicy.COUPLED else 0.0,
            "mai_arrivals_per_s": demand.rate,
            "mai_requests_measured": demand.requests,
            **{f"mai_{role}_calls_per_request": demand.calls_per_request[role] for role in ROLES},
            **{f"mai_{role}_call_s": demand.call_s[role] for role in ROLES},
        }


class OverloadGuard:
    def __init__(
        self,
        settings: OverloadSettings,
        large_queue: Callable[[], int],
        metrics: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings, self.large_queue, self.metrics, self.clock = settings, large_queue, metrics, clock
        self.state = OverloadState(settings)

    def _level(self, queue: int) -> Level:
        """The level after this reading of the queue (a reading moves it)."""
        level = self.state.update(queue, self.clock())
        if self.metrics is not None and self.settings.enabled:
            self.metrics.set_overload_level(int(level))
        return level

    def read(self) -> OverloadReading | None:
        """A cascade request's reading of the large model's queue, which moves the level (``decide``
        reads it for the cascade alone); None when ``cascade.overload`` is off."""
        if not self.settings.enabled:
            return None
        queue = self.large_queue()
        return OverloadReading(self._level(queue), queue)

    def answered(self, decision: Decision, result: CascadeResult) -> None:
        overload = decision.overload
        if overload is not None and self.metrics is not None:
            self.metrics.record_overload(overload.level, result.route)

    def level_label(self) -> str:
        """This replica's level, as its reports to the stats holder carry it."""
        return self.state.level.label

    def sheds_audits(self) -> bool:
        return self.settings.enabled and self.state.level >= Level.SHED
