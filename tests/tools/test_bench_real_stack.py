"""The real-stack benchmark's schedule and arithmetic (loadtest/bench/real_stack.py), on made-up rows."""

from collections import Counter

import pytest

from loadtest.bench.real_stack import aggregate, evenly_mixed, measure, questions_at, ratios
from loadtest.bench.schedule import run_order


def test_every_repetition_runs_each_policy_once_per_concurrency_in_a_rotated_order():
    order = run_order(("a", "b", "c"), (1, 8), 3)
    assert Counter((rep, c) for rep, c, _ in order) == {(r, c): 3 for r in range(3) for c in (1, 8)}
    firsts = [[p for rep, c, p in order if rep == r and c == 8] for r in range(3)]
    assert firsts == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]


def test_an_even_mixture_keeps_the_proportions_in_every_prefix():
    mixed = evenly_mixed([f"e{i}" for i in range(40)], [f"b{i}" for i in range(20)])
    assert len(mixed) == 60 and set(mixed) == {f"e{i}" for i in range(40)} | {f"b{i}" for i in range(20)}
    for size in (6, 15, 30):
        balanced = sum(item.startswith("b") for item in mixed[:size])
        assert abs(balanced - size / 3) <= 1
    assert [item for item in mixed if item.startswith("b")] == [f"b{i}" for i in range(20)]


def test_one_at_a_time_asks_a_quarter_and_at_least_eight():
    assert questions_at(8, 64) == questions_at(32, 64) == 64
    assert questions_at(1, 64) == 16
    assert questions_at(1, 20) == 8
    assert questions_at(1, 5) == 5


def _row(question, latency, score, stages=(), status=200, route="agree_short"):
    row = {"id": question, "status": status, "latency_s": latency}
    if status == 200:
        row |= {"score": score, "stages": list(stages), "route": route}
    return row


def test_a_run_counts_errors_apart_and_sums_tokens_per_model_over_the_stages():
    stages = [
        {"model": "small", "prompt_tokens": 30, "cached_tokens": 16, "completion_tokens": 4},
        {"model": "large", "prompt_tokens": 40, "cached_tokens": None, "completion_tokens": 3},
        {"model": "small", "prompt_tokens": 30, "cached_tokens": 0, "completion_tokens": 40},
    ]
    rows = [
        _row("q1", 0.2, 1.0, stages, route="transfer"),
        _row("q2", 0.4, 0.0, stages[:2]),
        _row("q3", 9.0, 0, status=503),
    ]
    run = measure(rows, wall_s=2.0)
    assert run["errors"] == 1 and run["requests"] == 3
    assert run["requests_per_s"] == 1.0  # answered requests only
    assert run["tokens_per_request"]["small"] == {
        "prompt_tokens": 45.0,
        "cached_tokens": 16.0,
        "completion_tokens": 24.0,
    }
    assert run["tokens_per_request"]["large"]["cached_tokens"] == 0  # not reported counts as none cached
    assert run["scores"] == {"q1": 1.0, "q2": 0.0}
    assert run["route_shares"] == {"agree_short": 0.5, "transfer": 0.5}
    assert run["p50_s"] == pytest.approx(0.3)


def _run(policy, concurrency, throughput, p50, scores, routes=None):
    return {
        "route_shares": routes or {"agree_short": 1.0},
        "policy": policy,
        "concurrency": concurrency,
        "requests": len(scores),
        "errors": 0,
        "requests_per_s": throughput,
        "p50_s": p50,
        "p99_s": p50 * 2,
        "tokens_per_request": {
            m: {"prompt_tokens": 10, "cached_tokens": 0, "completion_tokens": 2} for m in ("small", "large")
        },
        "scores": scores,
    }


def test_repetitions_become_a_median_with_min_and_max_and_accuracy_pools_every_answer():
    runs = [_run("mai", 8, throughput, 0.5, {"q1": 1.0, "q2": 0.0}) for throughput in (10.0, 30.0, 12.0)] + [
        _run("mai", 1, 2.0, 0.4, {"q1": 0.0})
    ]
    table = aggregate(runs)["mai"]
    assert table["by_concurrency"]["8"]["requests_per_s"] == {
        "median": 12.0,
        "min": 10.0,
        "max": 30.0,
        "n": 3,
    }
    assert table["by_concurrency"]["1"]["repetitions"] == 1
    assert table["by_concurrency"]["8"]["route_shares"] == {"agree_short": 1.0}
    # q1: right 3 times of 4 -> 0.75; q2: 0 -> mean over questions 0.375.
    assert table["accuracy_pct"] == pytest.approx(37.5)
    assert table["questions"] == 2
    low, high = table["accuracy_interval_pct"]
    assert 0.0 <= low <= 37.5 <= high <= 75.0


def test_ratios_are_taken_at_the_same_concurrency_against_full_rt():
    runs = [_run("mai-transfer", 8, 5.0, 1.0, {"q": 1.0}), _run("mai", 8, 10.0, 0.25, {"q": 1.0})]
    runs.append(_run("mai", 32, 20.0, 0.5, {"q": 1.0}))  # no Full RT run at 32: no ratio
    out = ratios(aggregate(runs))
    assert out["mai"] == {"8": {"requests_per_s": 2.0, "p50_s": 0.25}}
    assert out["mai-transfer"]["8"] == {"requests_per_s": 1.0, "p50_s": 1.0}


def test_route_shares_are_medians_over_repetitions_with_a_missing_route_as_zero():
    runs = [
        _run("mai", 8, 1.0, 1.0, {"q": 1.0}, routes={"agree_short": 0.5, "transfer": 0.5}),
        _run("mai", 8, 1.0, 1.0, {"q": 1.0}, routes={"agree_short": 1.0}),
        _run("mai", 8, 1.0, 1.0, {"q": 1.0}, routes={"agree_short": 0.75, "transfer": 0.25}),
    ]
    assert aggregate(runs)["mai"]["by_concurrency"]["8"]["route_shares"] == {
        "agree_short": 0.75,
        "transfer": 0.25,
    }
