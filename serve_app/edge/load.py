"""What an ingress replica measures of its own load: its calls to each model still in flight
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
from collections.abc import Callable
from typing import Any

from ..core.contracts import Completion, EngineCall, VLMClient
from ..core.decision import Decision, Level, OverloadReading, OverloadSettings, OverloadState
from ..core.options import GREEDY, Decoding
from ..core.roles import ROLES, SMALL
from ..core.scaling import DecayedMean, DecayedRate, IngressDemand, ScalingPolicy
from ..core.trace import CascadeResult, Trace


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
