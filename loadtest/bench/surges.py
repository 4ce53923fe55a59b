"""Surges against autoscaling, the library of the ``autoscaling``, ``overload``, ``shipped`` and
``autoscaling_real`` scenarios: a sampler of replica counts, closed-loop load in phases, and what a
phase and a timeline add up to (requests past the latency objective, replica-seconds, how long the
large model took to reach the replicas Little's law expects)."""

from __future__ import annotations

import threading
import time
from typing import Any

from harness.driver import ClientReply
from harness.local_server import replica_counts
from serve_app.core.scaling import little_replicas

from .analytic import ongoing_share, policy_seconds
from .load import ANSWER, bodies, emulated_args, run_load
from .summary import quantiles

SCALING = {
    "min_replicas": 1,
    "max_replicas": 4,
    "target_ongoing_requests": 4,
    "upscale_delay_s": 2,
    "downscale_delay_s": 10,
    "look_back_period_s": 3,
    "metrics_interval_s": 1,
}
PROFILES = {"chartqa": 1.0, "mmmu": 0.25}
# (users, seconds) per phase; the surge is the phase at 64 users.
SHAPES: dict[str, tuple[tuple[int, float], ...]] = {
    "ramp": ((8, 15), (32, 25), (64, 25), (8, 15)),
    "burst": ((8, 10), (64, 30), (8, 15)),
}
POLICIES = ("per-deployment", "coupled")
# The latency objective: this many times one cascade request alone (batch 1) on the profile.
OBJECTIVE_FACTOR = 3.0


def objective_s(dataset: str, time_scale: float) -> float:
    return round(OBJECTIVE_FACTOR * policy_seconds(dataset).cascade_parallel * time_scale, 2)


def expected_replicas(dataset: str, users: int, scaling: dict[str, Any]) -> dict[str, int]:
    """Little's law at batch 1: users × the share of a request's time at each model, over the target."""
    share = ongoing_share(dataset)["cascade"]
    return {
        model: little_replicas(
            users * share[model], scaling["target_ongoing_requests"], scaling["max_replicas"]
        )
        for model in ("small", "large")
    }


class Sampler:
    """Replica counts every second, in a thread, tagged with the phase the load is in."""

    def __init__(self) -> None:
        self.timeline: list[dict[str, Any]] = []
        self.phase = "idle"
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def now(self) -> float:
        return time.monotonic() - self.started

    def _run(self) -> None:
        while not self._stop.is_set():
            counts = replica_counts()
            by_role = {
                role: sum(n for name, n in counts.items() if name.startswith(f"{role}:"))
                for role in ("small", "large")
            }
            self.timeline.append({"t_s": round(self.now(), 1), "phase": self.phase, **by_role})
            self._stop.wait(1.0)


def drive_phases(
    url: str, records: list[dict], phases: tuple[tuple[int, float], ...], sampler: Sampler, label: str
) -> list[dict[str, Any]]:
    """Each phase's closed-loop users for its seconds; per phase its outcomes and when it started."""
    out = []
    for index, (users, seconds) in enumerate(phases):
        sampler.phase = f"{label} {index}: {users}"
        started = sampler.now()
        deadline = time.monotonic() + seconds
        outcomes, wall = run_load(
            url,
            ANSWER,
            bodies(records, 100000, policy="cascade"),
            users,
            until=lambda deadline=deadline: time.monotonic() > deadline,
        )
        out.append({"users": users, "started_s": round(started, 1), "outcomes": outcomes, "wall_s": wall})
    return out


def cool_down(sampler: Sampler, limit_s: float = 60) -> None:
    """Until both models are back at one replica (at most ``limit_s``)."""
    sampler.phase = "cool down"
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if sampler.timeline and sampler.timeline[-1]["small"] <= 1 and sampler.timeline[-1]["large"] <= 1:
            return
        time.sleep(1)


def phase_summary(phase: dict[str, Any], objective: float) -> dict[str, Any]:
    outcomes: list[ClientReply] = phase["outcomes"]
    ok = [o for o in outcomes if o.status == 200]
    latencies = [o.latency_s for o in ok]
    return {
        "users": phase["users"],
        "started_s": phase["started_s"],
        "requests": len(outcomes),
        "errors": len(outcomes) - len(ok),
        **quantiles(latencies, 3),
        "past_objective": sum(1 for o in outcomes if o.status != 200 or o.latency_s > objective),
        "goodput_per_s": round(sum(1 for x in latencies if x <= objective) / phase["wall_s"], 2),
    }


def replica_seconds(timeline: list[dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """Per model, the replicas sampled over [start, end) times the sampling step."""
    points = [t for t in timeline if start <= t["t_s"] < end]
    totals = {"small": 0.0, "large": 0.0}
    for before, after in zip(points, points[1:], strict=False):
        for model in totals:
            totals[model] += before[model] * (after["t_s"] - before["t_s"])
    return {model: round(value, 1) for model, value in totals.items()}


def time_to_reach(timeline: list[dict[str, Any]], model: str, replicas: int, since: float) -> float | None:
    for point in timeline:
        if point["t_s"] >= since and point[model] >= replicas:
            return round(point["t_s"] - since, 1)
    return None


def run_shape(
    url: str, records: list[dict], dataset: str, shape: str, scaling: dict[str, Any], sampler: Sampler
) -> dict[str, Any]:
    objective = objective_s(dataset, PROFILES[dataset])
    phases = SHAPES[shape]
    start = sampler.now()
    driven = drive_phases(url, records, phases, sampler, shape)
    end = sampler.now()
    cool_down(sampler)
    surge_index = next(i for i, (users, _) in enumerate(phases) if users == 64)
    surge_at = driven[surge_index]["started_s"]
    expected = expected_replicas(dataset, 64, scaling)
    summaries = [phase_summary(phase, objective) for phase in driven]
    return {
        "shape": shape,
        "objective_s": objective,
        "phases": summaries,
        "past_objective": sum(s["past_objective"] for s in summaries),
        "requests": sum(s["requests"] for s in summaries),
        "expected_at_64": expected,
        "large_reached_s": time_to_reach(sampler.timeline, "large", expected["large"], surge_at),
        "small_reached_s": time_to_reach(sampler.timeline, "small", expected["small"], surge_at),
        "replica_seconds": replica_seconds(sampler.timeline, start, end),
    }


def scaled_args(dataset: str, time_scale: float, policy: str, **app: Any) -> dict[str, Any]:
    """The emulated app with the bench's autoscaling on both models, under ``policy``; the ingress
    reports its metrics as often as the models (the coupled policy reads them)."""
    args = emulated_args(dataset, time_scale, autoscaling=SCALING, **app)
    args["autoscaling"] = {"policy": policy}
    args["ingress"]["autoscaling"] |= {"look_back_period_s": 3, "metrics_interval_s": 1}
    return args
