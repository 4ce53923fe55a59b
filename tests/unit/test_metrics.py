"""What one answered request adds to the ingress's metrics, computed from its trace."""

import pytest

from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions, Question
from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind
from serve_app.core.trace import AgreementCheck, CascadeResult, StageRecord, Trace
from serve_app.edge.observers import MADE_ELSEWHERE, PROMETHEUS_METRICS, IngressMetrics, measure
from serve_app.telemetry.exporter import DROPPED_DESCRIPTION, DROPPED_METRIC

from .fakes import ScriptedVLM


def result(route, stages, policy="cascade", latency=1.5, checks=()):
    trace = Trace(policy=policy, kind="yes_no", route=route, latency_s=latency, stages=stages)
    trace.checks = list(checks)
    return CascadeResult(answer="yes", trace=trace)


def stage(model, kind, prompt, completion, status="ok", latency=0.1):
    return StageRecord(
        name=f"{kind}_{model}",
        model=model,
        prompt_kind=kind,
        status=status,
        prompt_tokens=prompt,
        completion_tokens=completion,
        latency_s=latency,
    )


def counters(measurements, name):
    return [(tags, value) for metric, tags, value in measurements.counters if metric == name]


def test_a_transfer_counts_its_route_stages_tokens_and_both_disagreements():
    stages = [
        stage("small", "simple", 300, 2),
        stage("large", "simple", 300, 3),
        stage("small", "reasoning", 310, 200, latency=4.0),
        stage("large", "transfer", 520, 2),
    ]
    disagreed = [
        AgreementCheck(name, ("no", "yes"), (True, True), (None, None), False, 0.0, False)
        for name in ("short", "reasoned")
    ]
    m = measure("cascade", result("transfer", stages, checks=disagreed))
    assert counters(m, "mai_requests") == [({"policy": "cascade", "route": "transfer"}, 1)]
    assert ("mai_request_latency_s", {"policy": "cascade", "route": "transfer"}, 1.5) in m.histograms
    assert (
        "mai_stage_latency_s",
        {"model": "small", "prompt_kind": "reasoning", "status": "ok"},
        4.0,
    ) in m.histograms
    tokens = {(t["model"], t["prompt_kind"], t["direction"]): v for t, v in counters(m, "mai_tokens")}
    assert (
        tokens[("small", "reasoning", "completion")] == 200 and tokens[("large", "transfer", "prompt")] == 520
    )
    assert sum(tokens.values()) == sum(s.prompt_tokens + s.completion_tokens for s in stages)
    assert counters(m, "mai_verifications") == [
        ({"stage": "short", "agreed": "false"}, 1),
        ({"stage": "reasoned", "agreed": "false"}, 1),
    ]
    assert counters(m, "mai_degraded_answers") == []


@pytest.mark.parametrize(
    ("plan", "small_short", "verifications"),
    [
        (Plan.SEQUENTIAL, "[[yes]]", [("short", "true")]),
        (Plan.SEQUENTIAL, "[[no]]", [("short", "false"), ("reasoned", "true")]),
        (Plan.REASON_FIRST, "[[no]]", [("reasoned", "true")]),  # no stage 1: no short verification
        (Plan.FULL_TRANSFER, "[[no]]", []),
    ],
)
async def test_verifications_counted_are_those_the_plan_ran(plan, small_short, verifications):
    small = ScriptedVLM({PromptKind.SIMPLE: small_short, PromptKind.REASONING: "A dog. [[yes]]"})
    large = ScriptedVLM({PromptKind.SIMPLE: "[[yes]]", PromptKind.TRANSFER: "[[yes]]"})
    question = Question("Is there a dog?", images=("data:,",), kind="yes_no")
    answered = await Cascade(small, large).run(question, CascadeOptions(plan=plan))
    m = measure("cascade", answered)
    assert [(t["stage"], t["agreed"]) for t, _ in counters(m, "mai_verifications")] == verifications


def test_degraded_answers_and_cancelled_stages():
    stages = [stage("small", "simple", 0, 0, status="error"), stage("large", "simple", 10, 1)]
    m = measure("cascade", result("degraded_large_only", stages))
    assert counters(m, "mai_degraded_answers") == [({"route": "degraded_large_only"}, 1)]
    assert (
        "mai_stage_latency_s",
        {"model": "small", "prompt_kind": "simple", "status": "error"},
        0.1,
    ) in m.histograms
    assert all(t["model"] == "large" for t, _ in counters(m, "mai_tokens"))  # no zero increments


def test_single_model_policies_have_no_verification():
    m = measure("large", result("single", [stage("large", "simple", 10, 1)], policy="large"))
    assert counters(m, "mai_verifications") == []
    assert counters(m, "mai_requests") == [({"policy": "large", "route": "single"}, 1)]


def test_every_measured_metric_is_declared_with_its_tags():
    m = measure("cascade", result("transfer", [stage("small", "simple", 1, 1)]))
    for name, tags, _ in m.counters + m.histograms:
        kind, _, keys = PROMETHEUS_METRICS[name]
        assert set(tags) == set(keys), name


def test_the_dropped_span_counter_is_listed_but_made_by_the_tracing_exporter_alone(monkeypatch):
    """The list names every metric (the dashboard and docs are checked against it); the ingress makes
    all but the exporter's, whose counter of the same name in its process would clash."""
    from ray.serve import metrics

    assert PROMETHEUS_METRICS[DROPPED_METRIC] == ("counter", DROPPED_DESCRIPTION, ("reason",))
    assert MADE_ELSEWHERE == {DROPPED_METRIC, "mai_cache_events", "mai_cache_bytes"}
    made: list[str] = []

    def recording(name, **_):
        made.append(name)

    for kind in ("Counter", "Gauge", "Histogram"):
        monkeypatch.setattr(metrics, kind, recording)
    IngressMetrics()
    assert sorted(made) == sorted(set(PROMETHEUS_METRICS) - MADE_ELSEWHERE)
    # The answer cache makes its own, once, where it counts (serve_app/cache/reuse.py).
    from serve_app.cache.reuse import CacheCounters

    made.clear()
    CacheCounters(prometheus=True)
    assert sorted(made) == ["mai_cache_bytes", "mai_cache_events"]
