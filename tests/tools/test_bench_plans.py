"""The adaptive scenarios' arithmetic (loadtest/bench/plans.py, scenarios/adaptive/real.py): the
goal's verdict from the runs, the plan shares per kind, and how many requests a shift took to
settle."""

from loadtest.bench.load import stage1_accept
from loadtest.bench.plans import plan_shares, settled_after
from loadtest.bench.scenarios.adaptive.real import ADAPTIVE, FULL_RT, LARGE_REASON, SEQUENTIAL, verdict


def test_the_verdict_compares_medians_of_the_repetitions_with_the_goal():
    table = {
        ADAPTIVE: {"accuracy_pct": 87.0},
        FULL_RT: {"accuracy_pct": 87.0},
        SEQUENTIAL: {"accuracy_pct": 86.0},
    }
    table[LARGE_REASON] = {"accuracy_pct": 50.0}
    walls = {ADAPTIVE: [70, 71, 200], FULL_RT: [100, 90, 95], SEQUENTIAL: [100, 95, 90], LARGE_REASON: [60]}
    # per question: adaptive right where Full RT is wrong on q1, the other way on q2, both right on q3
    rows = [
        {"id": q, "policy": policy, "score": score}
        for q, scores in {"q1": (1, 0), "q2": (0, 1), "q3": (1, 1)}.items()
        for policy, score in zip((ADAPTIVE, FULL_RT), scores, strict=True)
    ]
    result = verdict(table, walls, rows)
    assert result["wall_vs_full_rt"] == round(71 / 95, 3) and result["wall_vs_sequential"] == round(
        71 / 95, 3
    )
    assert result["met"] == {"wall_vs_full_rt": True, "accuracy": True}
    low, high = result["accuracy_difference_vs_full_rt_95ci"]
    assert low < 0 < high  # one question each way: no difference either side
    slower = verdict(table, walls | {ADAPTIVE: [80, 81, 82]}, rows)
    assert slower["met"]["wall_vs_full_rt"] is False
    worse = verdict(table | {ADAPTIVE: {"accuracy_pct": 86.9}}, walls, rows)
    assert worse["accuracy_below_full_rt_points"] == 0.1 and worse["met"]["accuracy"] is False


def test_plan_shares_are_per_kind_over_answered_requests():
    rows = [
        {"status": 200, "kind": "yes_no", "plan": "eager"},
        {"status": 200, "kind": "yes_no", "plan": "eager"},
        {"status": 200, "kind": "yes_no", "plan": "sequential"},
        {"status": 503, "kind": "yes_no", "plan": None},
        {"status": 200, "kind": "text", "plan": "sequential"},
        {"status": 200, "kind": "text", "plan": None},  # a policy that is not the cascade
    ]
    assert plan_shares(rows) == {
        "text": {"sequential": 1.0},
        "yes_no": {"eager": 0.6667, "sequential": 0.3333},
    }


def test_a_shift_settles_after_the_last_request_that_did_not_run_the_final_plan():
    plans = [("sequential", False)] * 30 + [("eager", False)] * 5 + [("sequential", False)] * 2
    plans += [("eager", False)] * 150 + [("sequential", True)] * 3 + [("eager", False)] * 10
    assert settled_after(plans) == {"plan": "eager", "requests_until_settled": 37, "requests": 200}
    assert settled_after([("sequential", False)] * 10)["requests_until_settled"] == 0


def test_the_stage1_share_is_read_from_the_reason_the_trace_gives():
    assert (
        stage1_accept("text: stage-1 accept 0.12 over 64 requests; transfer 1.09 engine-s expected") == 0.12
    )
    assert (
        stage1_accept("text: 3 of 50 observations; the default plan") is None and stage1_accept(None) is None
    )
