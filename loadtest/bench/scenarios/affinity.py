"""affinity: stage affinity on the emulated tier (a capacity model: routing and latency, never
accuracy) with 4 and 8 replicas per model: the share of a request's follow-up calls to a model that
reach the replica its first call to that model reached, and served p50/p99, under stage affinity and
under Serve's default router (``stage_affinity.enabled: false``), the two interleaved in a rotated
order; each under an even load and a skewed one (one replica of each model slowed down)."""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from harness.local_server import deploy, deployment_handle, replica_counts

from ..cells import cell, percent
from ..load import ANSWER, EMULATED_LARGE, EMULATED_SMALL, bodies, emulated_args, run_load
from ..scenario import Bench, Scenario
from ..schedule import run_order
from ..summary import spread, summarize

ROUTERS = ("affinity", "default")
LOADS = ("even", "skewed")


@dataclass(frozen=True)
class Parameters:
    replicas: tuple[int, ...] = (4, 8)
    requests: int = 160  # per run
    concurrency: int = 16
    repetitions: int = 2
    dataset: str = "mmmu"  # long reasoning: most requests escalate
    time_scale: float = 0.05
    skew_delay_s: float = 0.5  # added to every call of one replica per model under the skewed load


def _args(replicas: int, router: str, parameters: Parameters) -> dict[str, Any]:
    fixed = {"min_replicas": replicas, "max_replicas": replicas, "target_ongoing_requests": 16}
    model = {"stage_affinity": {"enabled": router == "affinity"}}
    args = emulated_args(parameters.dataset, parameters.time_scale, autoscaling=fixed)
    for role in ("small", "large"):
        args[role] |= model
    return args


def _served(deployment: str, replicas: int) -> dict[str, list[tuple[float, str]]]:
    """Every replica's calls since it was last asked, by replica (asked until all have answered)."""
    handle, calls = deployment_handle(deployment), {}
    deadline = time.monotonic() + 60
    while len(calls) < replicas and time.monotonic() < deadline:
        replica, served = handle.calls_served.remote().result()
        calls.setdefault(replica, []).extend(served)
    return calls


def follow_up_share(calls_by_replica: dict[str, list[tuple[float, str]]]) -> tuple[int, int]:
    """(follow-up calls on the replica of their request's first call to the model, follow-up calls)."""
    by_key: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for replica, calls in calls_by_replica.items():
        for at, key in calls:
            by_key[key].append((at, replica))
    same = total = 0
    for calls in by_key.values():
        ordered = sorted(calls)
        first = ordered[0][1]
        total += len(ordered) - 1
        same += sum(replica == first for _, replica in ordered[1:])
    return same, total


def _slow_one_replica(deployment: str, seconds: float) -> None:
    deployment_handle(deployment).inject_delay.remote(seconds).result()


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, records = bench.url, bench.records
    runs: list[dict[str, Any]] = []
    for replicas in parameters.replicas:
        for repetition, _, router in run_order(ROUTERS, (parameters.concurrency,), parameters.repetitions):
            deploy(_args(replicas, router, parameters))
            counts = replica_counts()
            for deployment in (EMULATED_SMALL, EMULATED_LARGE):
                _served(deployment, counts[deployment])  # empty the logs the warm-up filled
            for load in LOADS:
                if load == "skewed":
                    for deployment in (EMULATED_SMALL, EMULATED_LARGE):
                        _slow_one_replica(deployment, parameters.skew_delay_s)
                ids = f"aff-{replicas}-{repetition}-{router}-{load}-"
                outcomes, wall = run_load(
                    url,
                    ANSWER,
                    bodies(records, parameters.requests),
                    parameters.concurrency,
                    request_ids=ids,
                )
                shares = {}
                for role, deployment in (("small", EMULATED_SMALL), ("large", EMULATED_LARGE)):
                    same, total = follow_up_share(_served(deployment, counts[deployment]))
                    shares[role] = {
                        "same": same,
                        "follow_ups": total,
                        "share": round(same / total, 4) if total else None,
                    }
                run = summarize(outcomes, wall) | {
                    "replicas": replicas,
                    "router": router,
                    "load": load,
                    "repetition": repetition,
                    "follow_ups": shares,
                }
                runs.append(run)
                print(
                    f"  affinity R={replicas} {router} {load} #{repetition + 1}: p50 {run['p50_s']} s, "
                    f"p99 {run['p99_s']} s, same replica small {shares['small']['share']}, "
                    f"large {shares['large']['share']}",
                    file=sys.stderr,
                    flush=True,
                )
    return {
        "requests_per_run": parameters.requests,
        "concurrency": parameters.concurrency,
        "repetitions": parameters.repetitions,
        "dataset": parameters.dataset,
        "time_scale": parameters.time_scale,
        "skew_delay_s": parameters.skew_delay_s,
        "runs": runs,
        "summary": _summary(runs),
        "goal": {"follow_up_share_at_least": 0.95},
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for run in runs:
        cells.setdefault(f"{run['replicas']}/{run['load']}/{run['router']}", []).append(run)
    out = {}
    for name, group in cells.items():
        same = sum(run["follow_ups"][role]["same"] for run in group for role in ("small", "large"))
        total = sum(run["follow_ups"][role]["follow_ups"] for run in group for role in ("small", "large"))
        out[name] = {
            "follow_up_share": round(same / total, 4) if total else None,
            "follow_ups": total,
            "p50_s": spread([run["p50_s"] for run in group]),
            "p99_s": spread([run["p99_s"] for run in group]),
            "errors": sum(run["errors"] for run in group),
        }
    return out


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"Emulated engines on the {result['dataset']} profile at time scale {result['time_scale']}, "
        f"{result['requests_per_run']} requests per run at concurrency {result['concurrency']}, the two "
        f"routers interleaved in a rotated order, {result['repetitions']} repetitions; skewed: one replica "
        f"of each model {result['skew_delay_s']} s slower per call. Same replica: the share of a "
        "request's follow-up calls to a model (its reasoning, transfer, audit) that reached the replica "
        "its first call to that model reached; p50/p99 median [min–max] over the repetitions. Goal: "
        f"≥ {result['goal']['follow_up_share_at_least'] * 100:.0f}% under stage affinity.",
        "",
        "| replicas per model | load | router | same replica | p50 s | p99 s | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in result["summary"].items():
        replicas, load, router = name.split("/")
        lines.append(
            f"| {replicas} | {load} | {'stage affinity' if router == 'affinity' else 'Serve default'} | "
            f"{percent(entry['follow_up_share'])} of {entry['follow_ups']} | {cell(entry['p50_s'], 2)} | "
            f"{cell(entry['p99_s'], 2)} | {entry['errors']} |"
        )
    return lines


SCENARIO = Scenario(
    name="affinity",
    title="Stage affinity: a request's stages on one replica (emulated, 4 and 8 replicas)",
    result="affinity.json",
    config="mai-emulated.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
