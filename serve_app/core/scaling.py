"""Coupled autoscaling of the cascade's models, as arithmetic: what each model will be asked for,
from what the ingress sees arrive, before the model's own queue shows it.

Little's law: a model with calls arriving at ``λ`` per second that each stay ``W`` seconds holds
``λ × W`` calls at once. The ingress sees every request arrive (``rate``), and measures how many calls
a request makes to each model (stage 1, the reasoning and the transfer: ``calls_per_request``) and how
long one call takes there (``call_s``). So each model's coming load is ``rate × calls × call_s``, and its
replicas that load divided by the model's ``target_ongoing_requests``, never fewer than its own queue
asks for (Ray Serve's queue-depth rule, ``queue_replicas``). Pure: the Serve policy
(serve_app/fleet/autoscaling_policy.py) feeds it the metrics the ingress replicas report.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from .roles import ROLES


class ScalingPolicy(StrEnum):
    COUPLED = "coupled"  # the models' replicas from the ingress's arrivals (this module)
    PER_DEPLOYMENT = "per-deployment"  # each deployment on its own queue (Ray Serve's default)


class AppAutoscaling(BaseModel):
    """How the deployments scale together. ``coupled`` needs the config's application-level
    ``autoscaling_policy`` (serve_app.fleet.autoscaling_policy:coupled_policy); each deployment's
    ``autoscaling`` keeps its bounds, target and delays under either policy."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    policy: ScalingPolicy = ScalingPolicy.PER_DEPLOYMENT
    tau_s: float = Field(
        5.0, gt=0, description="time constant of the decayed arrival rate and per-call means"
    )


def queue_replicas(ongoing_requests: float, target_ongoing_requests: float) -> float:
    """Ray Serve's queue-depth rule: the replicas that hold the deployment's ongoing (running and
    queued) requests at the target per replica."""
    return ongoing_requests / target_ongoing_requests


@dataclass(frozen=True)
class IngressDemand:
    """What one ingress replica reports: its decayed arrival rate and, per model, the decayed mean of
    calls per request and seconds per call. ``requests``: the decayed count of finished requests the
    means rest on (0: nothing measured yet)."""

    rate: float
    requests: float
    calls_per_request: dict[str, float]
    call_s: dict[str, float]

    def load(self, role: str) -> float:
        """The calls of ``role`` in flight that this replica's arrivals keep up (Little's law)."""
        return self.rate * self.calls_per_request.get(role, 0.0) * self.call_s.get(role, 0.0)


@dataclass(frozen=True)
class ScalingDecision:
    """One model's replicas under the coupled policy, and why."""

    replicas: float
    queue_replicas: float
    coupled_replicas: float | None  # None: no input, so the queue's answer stands (the fallback)
    expected_ongoing: float | None
    reason: str


def coupled_decision(
    role: str,
    demands: Iterable[IngressDemand],
    *,
    ongoing_requests: float,
    target_ongoing_requests: float,
    min_requests: float = 1.0,
) -> ScalingDecision:
    """``role``'s replicas: the cascade's coming load over the target, never below the queue's rule.
    Without a replica that has measured ``min_requests`` requests (the app starting, the ingress's
    metrics not reported yet) it falls back to the queue's rule alone."""
    by_queue = queue_replicas(ongoing_requests, target_ongoing_requests)
    measured = [demand for demand in demands if demand.requests >= min_requests]
    if not measured:
        return ScalingDecision(by_queue, by_queue, None, None, "fallback: no ingress demand measured")
    expected = sum(demand.load(role) for demand in measured)
    by_demand = expected / target_ongoing_requests
    reason = "demand" if by_demand > by_queue else "queue"
    return ScalingDecision(max(by_queue, by_demand), by_queue, by_demand, expected, reason)


def little_replicas(expected_ongoing: float, target_ongoing_requests: float, max_replicas: int) -> int:
    """The whole replicas that hold ``expected_ongoing`` calls at the target, within 1..max."""
    return min(max_replicas, max(1, math.ceil(expected_ongoing / target_ongoing_requests - 1e-9)))


class DecayedRate:
    """Events per second, exponentially decayed with time constant ``tau_s``: a step in the arrival
    rate shows 63 % of its size after ``tau_s`` and a burst of n arrivals adds n / tau_s at once."""

    def __init__(self, tau_s: float):
        self.tau_s = tau_s
        self._value = 0.0
        self._at: float | None = None

    def add(self, now: float, count: float = 1.0) -> None:
        self._value = self.value(now) + count / self.tau_s
        self._at = now

    def value(self, now: float) -> float:
        if self._at is None:
            return 0.0
        return self._value * math.exp(-max(0.0, now - self._at) / self.tau_s)


class DecayedMean:
    """A mean whose samples weigh less the older they are (the same time constant as the rate);
    ``weight``: the decayed count of samples behind it."""

    def __init__(self, tau_s: float):
        self.tau_s = tau_s
        self._sum = 0.0
        self._weight = 0.0
        self._at: float | None = None

    def _decay(self, now: float) -> float:
        return 1.0 if self._at is None else math.exp(-max(0.0, now - self._at) / self.tau_s)

    def add(self, now: float, value: float) -> None:
        decay = self._decay(now)
        self._sum = self._sum * decay + value
        self._weight = self._weight * decay + 1.0
        self._at = now

    def weight(self, now: float) -> float:
        return self._weight * self._decay(now)

    def mean(self) -> float:
        """0 before any sample."""
        return self._sum / self._weight if self._weight > 0 else 0.0


# What an ingress replica reports to Ray Serve for the coupled policy (serve_app/edge/observers.py: the
# demand meter writes them, serve_app/fleet/autoscaling_policy.py reads them back with ``demand_of``).
AUTOSCALING_METRICS = (
    "mai_coupled",
    "mai_arrivals_per_s",
    "mai_requests_measured",
    *(f"mai_{role}_calls_per_request" for role in ROLES),
    *(f"mai_{role}_call_s" for role in ROLES),
)


def demand_of(metrics: dict[str, float]) -> IngressDemand | None:
    """One replica's report read back; None when it lacks an input or is not coupled."""
    if any(name not in metrics for name in AUTOSCALING_METRICS) or metrics["mai_coupled"] < 0.5:
        return None
    return IngressDemand(
        rate=metrics["mai_arrivals_per_s"],
        requests=metrics["mai_requests_measured"],
        calls_per_request={role: metrics[f"mai_{role}_calls_per_request"] for role in ROLES},
        call_s={role: metrics[f"mai_{role}_call_s"] for role in ROLES},
    )
