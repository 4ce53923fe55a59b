"""Coupled autoscaling: the arithmetic (serve_app/core/scaling.py), what an ingress replica measures
(serve_app/edge/observers.py), and the application-level policy Ray Serve calls
(serve_app/fleet/autoscaling_policy.py) on synthetic contexts: a surge, a drain, a missing input."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray.serve.autoscaling_policy import _apply_app_level_autoscaling_config
from ray.serve.config import AutoscalingConfig, AutoscalingContext

from serve_app.config import load_app_config
from serve_app.core.scaling import (
    AUTOSCALING_METRICS,
    DecayedMean,
    DecayedRate,
    IngressDemand,
    ScalingPolicy,
    coupled_decision,
    demand_of,
    little_replicas,
)
from serve_app.core.trace import StageRecord, Trace
from serve_app.edge.observers import DemandMeter
from serve_app.fleet.autoscaling_policy import coupled_policy, role_of


def demand(rate=10.0, large_calls=1.2, large_s=0.5, small_calls=1.5, small_s=2.0, requests=50.0):
    return IngressDemand(
        rate=rate,
        requests=requests,
        calls_per_request={"small": small_calls, "large": large_calls},
        call_s={"small": small_s, "large": large_s},
    )


def test_the_large_model_is_scaled_for_the_load_the_ingress_sees_arrive():
    # 10 requests/s x 1.2 large calls x 0.5 s = 6 calls in flight; 1.5 replicas at 4 each.
    decision = coupled_decision("large", [demand()], ongoing_requests=2, target_ongoing_requests=4)
    assert decision.replicas == pytest.approx(1.5) and decision.reason == "demand"
    assert decision.expected_ongoing == pytest.approx(6.0)
    # Two ingress replicas: their loads add up.
    two = coupled_decision("large", [demand(), demand(rate=5)], ongoing_requests=2, target_ongoing_requests=4)
    assert two.replicas == pytest.approx(2.25)


def test_never_below_what_the_model_own_queue_asks_for():
    decision = coupled_decision("large", [demand(rate=0.1)], ongoing_requests=20, target_ongoing_requests=4)
    assert decision.replicas == 5 and decision.reason == "queue"


def test_without_a_measured_demand_the_queue_alone_decides():
    for demands in ([], [demand(requests=0.2)]):
        decision = coupled_decision("small", demands, ongoing_requests=6, target_ongoing_requests=4)
        assert decision.replicas == 1.5 and decision.coupled_replicas is None
        assert decision.reason.startswith("fallback")


@given(
    st.floats(0, 100),
    st.floats(0, 5),
    st.floats(0, 60),
    st.floats(0, 500),
    st.floats(0.5, 64),
)
def test_the_decision_is_the_larger_of_little_and_the_queue(rate, calls, seconds, ongoing, target):
    d = demand(rate=rate, large_calls=calls, large_s=seconds)
    decision = coupled_decision("large", [d], ongoing_requests=ongoing, target_ongoing_requests=target)
    assert decision.replicas == pytest.approx(max(ongoing / target, rate * calls * seconds / target))


def test_little_replicas_rounds_up_within_the_bounds():
    assert (
        little_replicas(6.6, 4, 4) == 2 and little_replicas(0.0, 4, 4) == 1 and little_replicas(99, 4, 4) == 4
    )
    assert little_replicas(8.0, 4, 4) == 2


def test_a_burst_of_arrivals_shows_at_once_and_decays_with_the_time_constant():
    rate = DecayedRate(tau_s=5)
    rate.add(0.0, count=50)
    assert rate.value(0.0) == pytest.approx(10.0)
    assert rate.value(5.0) == pytest.approx(10.0 / math.e)
    steady = DecayedRate(tau_s=2)
    for i in range(400):  # 4 arrivals a second for 100 s
        steady.add(i / 4)
    assert steady.value(99.75) == pytest.approx(4.0, rel=0.15)


def test_a_decayed_mean_follows_the_recent_samples():
    mean = DecayedMean(tau_s=1)
    for t in range(10):
        mean.add(float(t), 1.0)
    for t in range(10, 20):
        mean.add(float(t), 3.0)
    assert mean.mean() > 2.9 and mean.weight(19.0) == pytest.approx(1 / (1 - math.exp(-1)), rel=0.01)
    assert mean.weight(29.0) < 0.001


def trace(*stages):
    result = Trace(policy="cascade", kind="yes_no")
    result.stages = [StageRecord(name=n, model=m, prompt_kind="simple", latency_s=s) for n, m, s in stages]
    return result


def test_the_ingress_counts_calls_and_seconds_per_model_from_each_trace():
    now = [0.0]
    meter = DemandMeter(ScalingPolicy.COUPLED, tau_s=1000, clock=lambda: now[0])
    meter.arrived()
    meter.finished(trace(("small_short", "small", 0.2), ("large_short", "large", 0.4)))
    meter.arrived()
    meter.finished(
        trace(
            ("small_short", "small", 0.2),
            ("large_short", "large", 0.4),
            ("reasoning", "small", 3.0),
            ("transfer", "large", 0.8),
        )
    )
    meter.arrived()
    meter.passed_through("large", 2.0)
    report = meter.report()
    assert set(report) == set(AUTOSCALING_METRICS)
    read = demand_of(report)
    assert read is not None and read.requests == pytest.approx(3.0)
    assert read.calls_per_request["small"] == pytest.approx(3 / 3)
    assert read.calls_per_request["large"] == pytest.approx(4 / 3)
    assert read.call_s["small"] == pytest.approx((0.2 + 0.2 + 3.0) / 3)
    assert read.call_s["large"] == pytest.approx((0.4 + 0.4 + 0.8 + 2.0) / 4)
    assert read.rate == pytest.approx(3 / 1000)


def test_a_per_deployment_app_reports_no_demand():
    meter = DemandMeter(ScalingPolicy.PER_DEPLOYMENT, tau_s=5)
    meter.arrived()
    meter.finished(trace(("small_short", "small", 0.2)))
    assert demand_of(meter.report()) is None
    assert demand_of({"mai_coupled": 1.0}) is None  # an input missing


# ---------------------------------------------------------------------------------------------------
# The policy Ray Serve calls, on Ray's own context objects.

SMALL, LARGE, INGRESS, STATS = "small:s", "large:l", "MAIIngress", "StatsHolder"


def context(name, *, ongoing, replicas=1, metrics=None, upscale_delay_s=0.0, **config):
    settings = AutoscalingConfig(
        min_replicas=1,
        max_replicas=8,
        target_ongoing_requests=4,
        upscale_delay_s=upscale_delay_s,
        downscale_delay_s=0.0,
        **config,
    )
    return AutoscalingContext(
        deployment_id=name,
        deployment_name=name,
        app_name="mai",
        current_num_replicas=replicas,
        target_num_replicas=replicas,
        running_replicas=[],
        total_num_requests=ongoing,
        total_queued_requests=0,
        aggregated_metrics=metrics,
        raw_metrics=None,
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=8,
        policy_state={},
        last_scale_up_time=None,
        last_scale_down_time=None,
        current_time=0.0,
        config=settings,
    )


def ingress_metrics(**values):
    report = DemandMeter(ScalingPolicy.COUPLED, tau_s=5).report() | values
    return {name: {"replica-1": value} for name, value in report.items()}


def demand_metrics(rate, measured):
    """An ingress whose requests make 1.6 small calls of 1 s and 1.1 large calls of 0.5 s."""
    return ingress_metrics(
        mai_arrivals_per_s=rate,
        mai_requests_measured=measured,
        mai_small_calls_per_request=1.6,
        mai_small_call_s=1.0,
        mai_large_calls_per_request=1.1,
        mai_large_call_s=0.5,
    )


SURGE = demand_metrics(rate=40.0, measured=200.0)


def contexts(ingress_report, *, small_ongoing=8, large_ongoing=4):
    return {
        INGRESS: context(INGRESS, ongoing=40, metrics=ingress_report),
        SMALL: context(SMALL, ongoing=small_ongoing),
        LARGE: context(LARGE, ongoing=large_ongoing),
        STATS: context(STATS, ongoing=0),
    }


def test_a_surge_scales_both_models_from_the_ingress_before_their_queues_show_it():
    decisions, state = coupled_policy(contexts(SURGE))
    # large: 40/s x 1.1 x 0.5 s = 22 in flight -> 5.5 replicas; its queue (4) asks for 1.
    assert decisions[LARGE] == pytest.approx(5.5) and decisions[SMALL] == pytest.approx(16.0)
    assert decisions[INGRESS] == 10 and decisions[STATS] == 0  # their own queues
    assert state[LARGE]["mai_decision"]["reason"] == "demand"
    # Through Ray's wrapper: bounds, factors and delays are Serve's, applied to our answer.
    final, _ = _apply_app_level_autoscaling_config(coupled_policy)(contexts(SURGE))
    assert final[LARGE] == 6 and final[SMALL] == 16


def test_a_drain_leaves_the_queue_in_charge():
    drained = demand_metrics(rate=0.01, measured=5.0)
    decisions, state = coupled_policy(contexts(drained, small_ongoing=0, large_ongoing=12))
    assert decisions[LARGE] == 3 and state[LARGE]["mai_decision"]["reason"] == "queue"
    assert decisions[SMALL] == pytest.approx(0.01 * 1.6 * 1.0 / 4)


@pytest.mark.parametrize(
    "report",
    [None, {}, ingress_metrics(mai_coupled=0.0), {"mai_arrivals_per_s": {"replica-1": 40.0}}],
    ids=["no metrics", "empty", "per-deployment", "an input missing"],
)
def test_a_missing_input_falls_back_to_per_deployment_queue_scaling(report):
    decisions, state = coupled_policy(contexts(report, small_ongoing=8, large_ongoing=4))
    assert decisions[SMALL] == 2 and decisions[LARGE] == 1
    assert state[LARGE]["mai_decision"]["reason"].startswith("fallback")


def test_upscale_delay_still_applies_to_the_coupled_answer():
    held = {
        name: context(
            name, ongoing=ctx.total_num_requests, metrics=ctx.aggregated_metrics, upscale_delay_s=30
        )
        for name, ctx in contexts(SURGE).items()
    }
    final, _ = _apply_app_level_autoscaling_config(coupled_policy)(held)
    assert final[LARGE] == 1  # wanted 6, but not for 30 s yet


def test_roles_come_from_the_deployment_names():
    assert (role_of("small:qwen"), role_of("large:q:8b"), role_of("MAIIngress"), role_of("tiny:x")) == (
        "small",
        "large",
        None,
        None,
    )


def test_an_unknown_policy_is_refused_naming_the_key():
    args = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
    with pytest.raises(ValueError, match="autoscaling.policy"):
        load_app_config(args | {"autoscaling": {"policy": "predictive"}})
    with pytest.raises(ValueError, match="autoscaling.tau_s"):
        load_app_config(args | {"autoscaling": {"policy": "coupled", "tau_s": 0}})
    assert load_app_config(args).autoscaling.policy is ScalingPolicy.PER_DEPLOYMENT
