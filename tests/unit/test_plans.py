"""The plans' expected costs (serve_app/core/plans.py) against a brute-force walk of the real cascade
over every outcome of its verifications, and the estimates read from observed traces
(serve_app/core/plan_stats.py)."""

import itertools
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.replay import RecordedStage, engine_seconds, replay
from serve_app.core.contracts import CascadeOptions
from serve_app.core.plan_stats import (
    REASON_FIRST_PRIOR_WEIGHT,
    Observation,
    PlanBook,
    estimates_of,
    exact,
    exact_mean,
)
from serve_app.core.plans import Plan, PlanEstimates, expected_cost
from serve_app.core.question_parsing import read_question

share = st.floats(0, 1, allow_nan=False)
seconds = st.floats(0.001, 30, allow_nan=False)
tokens = st.integers(1, 5000)


OBJECTIVES = ("latency", "engine_time", "large_tokens")


def walk(plan, accept1, accept2, accept_first, e):
    """One request run by the real cascade (``evaluation.replay``: its stages answered from a
    recording, on a virtual clock), its verifications settling as given: (seconds until the answer,
    seconds of model calls, large-model tokens)."""
    agrees = accept_first if plan is Plan.REASON_FIRST else accept2
    stages = {
        "short_small": RecordedStage("yes" if accept1 else "no", None, 0, 1, e.small_short_s),
        "short_large": RecordedStage("yes", None, 0, e.large_short_tokens, e.large_short_s),
        "reason_small": RecordedStage("yes" if agrees else "no", None, 0, 1, e.reasoning_s),
        "transfer_large": RecordedStage("yes", None, 0, e.transfer_tokens, e.transfer_s),
    }
    [result] = replay({"q": read_question("Is it red?")}, CascadeOptions(plan=plan), {"q": stages}).values()
    large = result.trace.tokens()["large"]
    return result.trace.latency_s, engine_seconds(result), large["prompt_tokens"] + large["completion_tokens"]


def brute_force(plan, e, objective):
    """The expectation over every outcome of the plan's verifications, each walked by the cascade."""
    total = 0.0
    for accept1, accept2, accept_first in itertools.product((True, False), repeat=3):
        probability = (
            (e.p1 if accept1 else 1 - e.p1)
            * (e.p2 if accept2 else 1 - e.p2)
            * (e.q if accept_first else 1 - e.q)
        )
        if probability:
            total += probability * walk(plan, accept1, accept2, accept_first, e)[OBJECTIVES.index(objective)]
    return total


@settings(max_examples=300, deadline=None)
@given(
    p1=share,
    p2=share,
    q=share,
    ss=seconds,
    ls=seconds,
    r=seconds,
    t=seconds,
    lst=tokens,
    tt=tokens,
    plan=st.sampled_from(list(Plan)),
    objective=st.sampled_from(OBJECTIVES),
)
def test_expected_costs_equal_the_cascade_walked_over_every_outcome(
    p1, p2, q, ss, ls, r, t, lst, tt, plan, objective
):
    e = PlanEstimates(
        p1=p1,
        p2=p2,
        q=q,
        stage1_s=max(ss, ls),
        small_short_s=ss,
        large_short_s=ls,
        reasoning_s=r,
        transfer_s=t,
        large_short_tokens=lst,
        transfer_tokens=tt,
    )
    assert math.isclose(expected_cost(plan, e, objective), brute_force(plan, e, objective), rel_tol=1e-9)


@given(p1=share, p2=share, s1=seconds, r=seconds, t=seconds)
def test_eager_never_expects_more_latency_than_sequential(p1, p2, s1, r, t):
    e = PlanEstimates(p1=p1, p2=p2, stage1_s=s1, reasoning_s=r, transfer_s=t)
    assert expected_cost(Plan.EAGER, e) <= expected_cost(Plan.SEQUENTIAL, e) + 1e-9


def test_an_unmeasured_stage_costs_nothing_where_it_is_never_reached_and_is_unknown_where_it_is():
    settled_at_stage1 = PlanEstimates(p1=1.0, stage1_s=0.2, large_short_tokens=100)
    assert expected_cost(Plan.SEQUENTIAL, settled_at_stage1) == 0.2
    assert expected_cost(Plan.SEQUENTIAL, settled_at_stage1, "large_tokens") == 100
    assert expected_cost(Plan.FULL_TRANSFER, settled_at_stage1) is None  # never reasoned: unknown
    assert expected_cost(Plan.SEQUENTIAL, PlanEstimates(p1=0.5, stage1_s=0.2)) is None


def observation(at, plan, route, **stages):
    return Observation(at, plan, route, **stages)


def test_estimates_read_each_rate_from_the_plans_that_measure_it():
    rows = (
        [observation(i, "sequential", "agree_short", stage1_s=0.2, large_short_s=0.2) for i in range(6)]
        + [observation(10 + i, "eager", "agree_reasoned", stage1_s=0.2, reasoning_s=1.0) for i in range(3)]
        + [observation(20, "sequential", "transfer", stage1_s=0.2, reasoning_s=1.0, transfer_s=0.5)]
        + [observation(30 + i, "transfer", "transfer", reasoning_s=2.0, transfer_s=0.5) for i in range(5)]
    )
    e = estimates_of(rows)
    assert (e.requests, e.stage1_runs, e.reason_first_runs) == (15, 10, 0)
    assert e.p1 == 0.6 and e.p2 == 0.75  # transfer runs say nothing of stage 1's agreement
    assert e.q == pytest.approx(0.6 + 0.4 * 0.75)  # reason-first never ran: the derived prior
    assert e.reasoning_s == pytest.approx((3 * 1.0 + 1.0 + 5 * 2.0) / 9)
    ran = [
        observation(40 + i, "reason-first", "transfer", large_short_s=0.2, reasoning_s=1.0) for i in range(30)
    ]
    e = estimates_of(rows + ran)
    assert e.reason_first_runs == 30
    assert e.q == pytest.approx(REASON_FIRST_PRIOR_WEIGHT * 0.9 / (30 + REASON_FIRST_PRIOR_WEIGHT))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.sampled_from(["yes_no", "text"]), st.sampled_from(list(Plan))),
        max_size=60,
    ),
    st.integers(1, 20),
)
def test_merged_replica_books_hold_the_latest_window_of_all_observations(events, window):
    books = [PlanBook(window) for _ in range(3)]
    one = PlanBook(window)
    for at, (replica, cls, plan) in enumerate(events):
        row = observation(float(at), plan.value, "transfer", reasoning_s=float(at))
        books[replica].record(cls, row)
        one.record(cls, row)
    merged = PlanBook.merged([book.state() for book in books], window)
    for cls in ("yes_no", "text"):
        # each replica keeps its own latest window, so the latest window of all is among them
        assert list(merged.classes.get(cls, ())) == list(one.classes.get(cls, ()))
        assert merged.estimates(cls) == one.estimates(cls)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
            st.integers(-(2**53), 2**53),
        ),
        min_size=1,
        max_size=30,
    )
)
def test_the_exact_sum_gives_fmean_bit_for_bit(values):
    """The stats holder's running sums (``MergedPlans``) give the means one book's ``fmean`` gives."""
    total = sum(exact(value) for value in values)
    expected = statistics.fmean(values)
    assert repr(exact_mean(total, len(values))) == repr(expected)
    if len(values) > 1:  # what leaves a window is subtracted exactly
        rest = total - exact(values[0])
        assert repr(exact_mean(rest, len(values) - 1)) == repr(statistics.fmean(values[1:]))
