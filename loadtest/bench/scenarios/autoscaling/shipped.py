"""autoscaling --param variant=shipped.

On configs/mai-emulated.yaml as shipped (the coupled policy) with the bench's target and
delay: a burst of 64 cascade users, and when the large model reaches the replicas Little's law expects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.local_server import config_args, deploy

from ...scenario import Bench
from ...surges import (
    Sampler,
    cool_down,
    drive_phases,
    expected_replicas,
    objective_s,
    phase_summary,
    replica_seconds,
    time_to_reach,
)


@dataclass(frozen=True)
class Parameters:
    repetitions: int = 2


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, records = bench.url, bench.records
    model = {"autoscaling": {"target_ongoing_requests": 4, "upscale_delay_s": 2}}
    # The cascade's runs are what this measures (each phase cycles through the records from the first,
    # every repetition on the same deployment): no answer reused.
    args = config_args("mai-emulated.yaml", {"small": model, "large": model, "cache": {"enabled": False}})
    expected = expected_replicas("chartqa", 64, {"max_replicas": 4, "target_ongoing_requests": 4})
    runs = []
    for rep in range(parameters.repetitions):
        deploy(args)
        with Sampler() as sampler:
            cool_down(sampler, 90)
            surge_at = sampler.now()
            driven = drive_phases(url, records, ((64, 45),), sampler, "burst")
            end = sampler.now()
        runs.append(
            {
                "repetition": rep,
                "large_reached_s": time_to_reach(sampler.timeline, "large", expected["large"], surge_at),
                "small_reached_s": time_to_reach(sampler.timeline, "small", expected["small"], surge_at),
                "burst": phase_summary(driven[0], objective_s("chartqa", 1.0)),
                "replica_seconds": replica_seconds(sampler.timeline, surge_at, end),
                "timeline": sampler.timeline,
            }
        )
    return {
        "config": "configs/mai-emulated.yaml",
        "overrides": model,
        "expected_at_64": expected,
        "runs": runs,
    }


def table(result: dict[str, Any]) -> list[str]:
    expected, runs = result["expected_at_64"], result["runs"]
    overrides = ", ".join(
        f"`{key}` {value}" for key, value in result["overrides"].get("autoscaling", {}).items()
    )
    users = runs[0]["burst"]["users"] if runs else 64
    lines = [
        f"`{result['config']}` as shipped (the coupled policy) with {overrides or 'no overrides'} on both "
        f"models; {len(runs)} repetitions of a burst of {users} cascade users (ChartQA profile), each after "
        f"a cool-down. Little's law expects {expected['small']} small and {expected['large']} large "
        f"replicas at {users} users; reached: seconds from the start of the burst until the model ran them "
        "(– not within the burst). The burst's requests, latency, requests past the objective and goodput "
        "(answers within it per second); replica-seconds over the burst.",
        "",
        f"| repetition | large reached {expected['large']}, s | small reached {expected['small']}, s | most "
        "replicas in the burst, small / large | requests | p50 s | p99 s | past the objective | goodput /s | "
        "replica-s small / large |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        burst = run["burst"]
        during = [
            point for point in run.get("timeline", []) if str(point.get("phase", "")).startswith("burst")
        ]
        most = " / ".join(str(max((p[model] for p in during), default="–")) for model in ("small", "large"))
        reached = {
            model: "–" if run[f"{model}_reached_s"] is None else f"{run[f'{model}_reached_s']:g}"
            for model in ("small", "large")
        }
        seconds = run["replica_seconds"]
        lines.append(
            f"| {run['repetition'] + 1} | {reached['large']} | {reached['small']} | {most} | "
            f"{burst['requests']} | {burst['p50_s']} | {burst['p99_s']} | {burst['past_objective']} | "
            f"{burst['goodput_per_s']} | {seconds['small']:g} / {seconds['large']:g} |"
        )
    return lines
