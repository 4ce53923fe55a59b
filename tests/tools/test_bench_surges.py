"""The autoscaling scenarios' arithmetic (loadtest/bench/surges.py, scenarios/autoscaling/): what
they report is computed from the timeline and the phases the way their docs say; and what
scenarios/autoscaling/real.py deploys is a config the server accepts."""

from loadtest.bench.scenarios.autoscaling.policies import summarize
from loadtest.bench.scenarios.autoscaling.real import FLOORS, deployment_args
from loadtest.bench.surges import SCALING, expected_replicas, objective_s, replica_seconds, time_to_reach
from serve_app.config import load_app_config

TIMELINE = [
    {"t_s": 0.0, "small": 1, "large": 1},
    {"t_s": 1.0, "small": 2, "large": 1},
    {"t_s": 2.0, "small": 4, "large": 2},
    {"t_s": 4.0, "small": 4, "large": 2},
]


def test_replica_seconds_integrate_the_samples_over_the_window():
    assert replica_seconds(TIMELINE, 0.0, 5.0) == {"small": 1 + 2 + 8, "large": 1 + 1 + 4}
    assert replica_seconds(TIMELINE, 1.0, 5.0) == {"small": 2 + 8, "large": 1 + 4}


def test_time_to_reach_counts_from_the_surge_and_none_when_never():
    assert time_to_reach(TIMELINE, "large", 2, since=0.5) == 1.5
    assert time_to_reach(TIMELINE, "large", 3, since=0.0) is None


def test_littles_law_expects_the_issue_figures_on_chartqa_at_64_users():
    assert expected_replicas("chartqa", 64, SCALING) == {"small": 4, "large": 2}
    assert expected_replicas("chartqa", 8, SCALING) == {"small": 2, "large": 1}
    assert objective_s("mmmu", 0.25) < objective_s("mmmu", 1.0)


def shape(past, p99, small, large, reached):
    return {
        "shape": "burst",
        "past_objective": past,
        "requests": 100,
        "phases": [{"users": 64, "p99_s": p99}],
        "replica_seconds": {"small": small, "large": large},
        "large_reached_s": reached,
    }


def test_the_summary_compares_coupled_with_per_deployment():
    runs = [
        {
            "dataset": "chartqa",
            "policy": "per-deployment",
            "repetition": 0,
            "shapes": [shape(40, 9.0, 100, 50, None)],
        },
        {
            "dataset": "chartqa",
            "policy": "coupled",
            "repetition": 0,
            "shapes": [shape(20, 5.0, 110, 55, 3.0)],
        },
    ]
    cell = summarize(runs)["chartqa/burst"]
    assert cell["goals"] == {"fewer_past_objective": 0.5, "replica_seconds_ratio": 1.1}
    assert (
        cell["coupled"]["large_reached_s"] == [3.0] and cell["per-deployment"]["surge_p99_s"]["median"] == 9.0
    )


def test_autoscaling_real_deploys_the_shipped_cpu_config_with_floors_under_its_thresholds():
    off, on = load_app_config(deployment_args(False)), load_app_config(deployment_args(True))
    assert off.cascade.overload.max_large_queue is None and on.cascade.overload.max_large_queue == 2
    floors = on.cascade.overload.relax_to
    assert floors.min_confidence is not None and floors.min_confidence <= off.cascade.min_confidence
    assert floors.confident_large == min(FLOORS["confident_large"], off.cascade.confident_large)
