"""Escalation that bends under load (serve_app/core/decision.py): the levels and their hysteresis, the
relaxed options, the config's refusals, and an in-process ingress replica whose traces, metrics and
audits say when an answer was given overloaded."""

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.config import load_app_config
from serve_app.core.contracts import CascadeOptions, Policy
from serve_app.core.decision import (
    Level,
    OverloadReading,
    OverloadSettings,
    OverloadState,
    RelaxTo,
    decide,
    relaxed_options,
)
from serve_app.core.plan_choice import PlanChoice
from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind
from serve_app.core.trace import OverloadRecord
from serve_app.fleet.stats_holder import StatsHolder

from ..images import chat_body
from .fakes import ScriptedVLM
from .ingress_replica import client_of, holder_handle, replica

S, R, T = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER
SETTINGS = OverloadSettings(max_large_queue=10, relax_after_s=2, restore_below=4, restore_after_s=5)


def test_past_the_bound_audits_go_first_then_thresholds_relax():
    state = OverloadState(SETTINGS)
    assert state.update(10, 0.0) is Level.NORMAL  # at the bound, not past it
    assert state.update(11, 1.0) is Level.SHED
    assert state.update(30, 2.9) is Level.SHED
    assert state.update(12, 3.0) is Level.RELAX  # past the bound for relax_after_s


def test_it_restores_only_after_the_queue_stays_drained():
    state = OverloadState(SETTINGS)
    for t, queue in ((0, 20), (3, 20)):
        state.update(queue, t)
    assert state.level is Level.RELAX
    assert state.update(7, 4.0) is Level.RELAX  # under the bound, above restore_below: hysteresis
    assert state.update(3, 5.0) is Level.RELAX  # drained, not for long enough
    assert state.update(4, 9.0) is Level.RELAX
    assert state.update(2, 10.0) is Level.NORMAL  # 5 s at or under restore_below


def test_a_spike_while_draining_restarts_the_calm_clock():
    state = OverloadState(SETTINGS)
    for t, queue in ((0, 20), (3, 20), (4, 1), (7, 6), (8, 1)):
        state.update(queue, t)
    assert state.update(1, 12.0) is Level.RELAX  # calm since 8 s only
    assert state.update(1, 13.0) is Level.NORMAL


def test_a_short_spike_only_sheds_audits():
    state = OverloadState(SETTINGS)
    state.update(11, 0.0)
    state.update(9, 1.0)
    assert state.update(11, 2.5) is Level.SHED  # past the bound again, its clock restarted at 2.5 s
    assert state.update(11, 4.4) is Level.SHED


@given(st.lists(st.tuples(st.integers(0, 30), st.floats(0, 3)), max_size=60))
def test_levels_move_one_way_at_a_time_and_off_means_normal(readings):
    state, off = OverloadState(SETTINGS), OverloadState(OverloadSettings())
    now, previous = 0.0, Level.NORMAL
    for queue, step in readings:
        now += step
        level = state.update(queue, now)
        assert off.update(queue, now) is Level.NORMAL
        if level > previous:
            assert queue > 10  # it only climbs past the bound
        if level < previous:
            assert level is Level.NORMAL and queue <= 4  # it restores all at once, drained
        previous = level


def test_relaxed_options_lower_thresholds_to_their_floors_never_raise_them():
    options = CascadeOptions(min_confidence=0.6, confident_large=0.9, plan=Plan.EAGER)
    relaxed, changed = relaxed_options(options, RelaxTo(min_confidence=0.3, confident_large=0.7, eager=False))
    assert (relaxed.min_confidence, relaxed.confident_large) == (0.3, 0.7)
    assert relaxed.plan is Plan.EAGER  # the plan is decided once, by decision.decide
    assert changed == {"min_confidence": (0.6, 0.3), "confident_large": (0.9, 0.7)}
    already_lower = CascadeOptions(min_confidence=0.2)  # a request's own, lower than the floor
    kept, changed = relaxed_options(already_lower, RelaxTo(min_confidence=0.3, confident_large=0.5))
    assert kept.min_confidence == 0.2 and kept.confident_large is None and changed == {}


def test_overloaded_an_eager_plan_runs_sequential_and_the_decision_says_so():
    learnt = PlanChoice(Plan.EAGER, "yes_no: eager 0.3s expected")
    server = CascadeOptions(min_confidence=0.6)
    no_eager = RelaxTo(min_confidence=0.3, eager=False)

    def decided(options, level, relax_to=no_eager):
        reading = None if level is None else OverloadReading(level, 12)
        return decide(
            options,
            "yes_no",
            server=server,
            choose=lambda: learnt,
            read_overload=lambda: reading,
            relax_to=relax_to,
        )

    relaxed = decided(server, Level.RELAX)
    assert (relaxed.plan.plan, relaxed.options.plan, relaxed.options.min_confidence) == (
        Plan.SEQUENTIAL,
        Plan.SEQUENTIAL,
        0.3,
    )
    assert relaxed.plan.reason.startswith("yes_no: eager") and "eager runs sequential" in relaxed.plan.reason
    assert relaxed.overload == OverloadRecord(
        "relax", 12, {"min_confidence": (0.6, 0.3), "plan": ("eager", "sequential")}
    )
    assert not relaxed.measures_plan  # relaxed thresholds measure another plan
    calm = decided(server, None)
    assert calm.plan == learnt and calm.options.plan is Plan.EAGER and calm.overload is None
    assert calm.measures_plan
    shed = decided(server, Level.SHED)
    assert shed.plan == learnt and shed.overload == OverloadRecord("shed", 12, {}) and shed.measures_plan
    eager_allowed = decided(server, Level.RELAX, RelaxTo(min_confidence=0.3))
    assert eager_allowed.plan.plan is Plan.EAGER and "plan" not in eager_allowed.overload.relaxed
    forced = decided(server.model_copy(update={"plan": Plan.EAGER}), Level.RELAX)
    assert forced.plan.plan is Plan.SEQUENTIAL and forced.plan.reason.startswith("forced by the request")
    own = decided(server.model_copy(update={"min_confidence": 0.9}), None)
    assert not own.measures_plan  # a request's own thresholds settle other shares at stage 1
    baseline = decided(server.model_copy(update={"policy": Policy.SMALL}), Level.RELAX)
    assert baseline.plan is None and baseline.overload is None and baseline.options.min_confidence == 0.6


BASE = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}


@pytest.mark.parametrize(
    ("cascade", "key"),
    [
        ({"overload": {"max_large_queue": 0}}, "max_large_queue"),
        ({"overload": {"max_large_queue": -3}}, "max_large_queue"),
        ({"overload": {"max_large_queue": 8, "restore_below": 8}}, "restore_below"),
        (
            {"min_confidence": 0.4, "overload": {"max_large_queue": 8, "relax_to": {"min_confidence": 0.5}}},
            "relax_to.min_confidence",
        ),
        (
            {
                "confident_large": 0.8,
                "overload": {"max_large_queue": 8, "relax_to": {"confident_large": 0.9}},
            },
            "relax_to.confident_large",
        ),
        (
            {"overload": {"max_large_queue": 8, "relax_to": {"confident_large": 0.5}}},
            "relax_to.confident_large",
        ),
        ({"overload": {"max_large_queue": 8, "relax_to": {"eager": True}}}, "relax_to.eager"),
        ({"overload": {"max_large_queue": 8, "relax_to": {"eager_reasoning": True}}}, "relax_to.eager"),
        ({"overload": {"max_large_queue": 8, "shed": True}}, "shed"),
    ],
)
def test_bad_overload_settings_are_refused_at_start_naming_the_key(cascade, key):
    with pytest.raises(ValueError, match=key):
        load_app_config(BASE | {"cascade": cascade})


# ---------------------------------------------------------------------------------------------------
# In an ingress replica.


def overloaded_replica(queue, clock, relax_to=None, *, stats=None, name="replica-a", **audit):
    config = load_app_config(
        BASE
        | {
            "cascade": {
                "min_confidence": 0.5,
                "confident_large": 0.95,
                "overload": {
                    "max_large_queue": 4,
                    "relax_after_s": 1,
                    "restore_after_s": 2,
                    "relax_to": relax_to or {"confident_large": 0.7},
                },
                "audit": {"rate": 1.0, **audit} if audit else {"rate": 0.0},
            }
        }
    )
    # Stage 1 disagrees; the large model's short answer is 0.8 confident: under the configured 0.95,
    # above the relaxed 0.7, and more confident than the small one's 0.6.
    small = ScriptedVLM({S: "[[no]]", R: "[[yes]]"}, confidences={S: 0.6, R: 0.9})
    large = ScriptedVLM({S: "[[yes]]", T: "[[yes]]"}, confidences={S: 0.8, T: 0.9})
    ingress = replica(
        small, large, config, large_queue=lambda: queue[0], clock=lambda: clock[0], stats=stats, name=name
    )
    return ingress, large


def ask(client):
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 200, reply.text
    return reply.json()["mai"]["trace"]


def test_relaxed_answers_say_so_in_their_trace_and_metrics_and_restore_after_the_drain():
    queue, clock = [0], [0.0]
    ingress, large = overloaded_replica(queue, clock)
    client = client_of(ingress)
    normal = ask(client)
    assert normal["overload"] is None and normal["route"] == "agree_reasoned"
    queue[0] = 9
    shed = ask(client)
    assert shed["overload"] == {"level": "shed", "large_queue": 9, "relaxed": {}}
    assert shed["route"] == "agree_reasoned"  # shedding audits changes no answer
    clock[0] = 1.5
    relaxed = ask(client)
    assert relaxed["overload"] == {
        "level": "relax",
        "large_queue": 9,
        "relaxed": {"confident_large": [0.95, 0.7]},
    }
    assert relaxed["route"] == "confident_large"  # settled without the small model's reasoning
    assert ingress.metrics.overload == [("shed", "agree_reasoned"), ("relax", "confident_large")]
    queue[0] = 1
    clock[0] = 2.0
    assert ask(client)["overload"]["level"] == "relax"  # drained, not yet for restore_after_s
    clock[0] = 4.5
    assert ask(client)["overload"] is None
    assert ingress.metrics.overload_levels[-1] == 0 and max(ingress.metrics.overload_levels) == 2


def test_relaxed_an_eager_plan_runs_sequential_and_the_trace_says_so():
    queue, clock = [9], [0.0]
    ingress, _ = overloaded_replica(queue, clock, relax_to={"eager": False})
    client = client_of(ingress)

    def ask_eager():
        reply = client.post("/v1/chat/completions", json=chat_body(mai={"options": {"plan": "eager"}}))
        assert reply.status_code == 200, reply.text
        return reply.json()["mai"]["trace"]

    shed = ask_eager()
    assert shed["plan"] == "eager" and shed["overload"]["relaxed"] == {}
    clock[0] = 1.5
    relaxed = ask_eager()
    assert relaxed["plan"] == "sequential" and relaxed["overload"]["relaxed"] == {
        "plan": ["eager", "sequential"]
    }
    assert (
        relaxed["plan_reason"].startswith("forced by the request")
        and "eager runs sequential" in relaxed["plan_reason"]
    )


def test_overloaded_only_relaxed_answers_are_audited_and_they_count_apart():
    queue, clock = [9], [0.0]
    ingress, _ = overloaded_replica(queue, clock, max_large_queue=64, max_small_queue=64)
    client = client_of(ingress)
    ask(client)  # shed: its audit is not started
    assert ingress.auditor.book.not_run.get("overload") == 1
    clock[0] = 2.0
    ask(client)  # relaxed: audited, under relaxed:confident_large
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not ingress.auditor.book.state()["classes"]:
        time.sleep(0.05)
    stats = client.get("/v1/mai/stats").json()
    audited = stats["classes"]["yes_no"]["audit"]["by_route"]
    assert audited == {"relaxed:confident_large": {"audited": 1, "disagreed": 0}}
    assert stats["classes"]["yes_no"]["routes"] == {"agree_reasoned": 1, "confident_large": 1}


def overload_in_stats(client):
    return client.get("/v1/mai/stats").json()["overload"]


def test_the_stats_say_a_lone_replicas_own_overload_level():
    queue, clock = [0], [0.0]
    ingress, _ = overloaded_replica(queue, clock)
    client = client_of(ingress)
    lone = {"normal": 0, "shed": 0, "relax": 0}
    assert overload_in_stats(client) == {
        "enabled": True,
        "level": "normal",
        "replicas": {**lone, "normal": 1},
    }
    queue[0] = 9
    ask(client)
    assert overload_in_stats(client) == {"enabled": True, "level": "shed", "replicas": {**lone, "shed": 1}}
    clock[0] = 1.5
    ask(client)
    assert overload_in_stats(client)["level"] == "relax"


def test_the_stats_say_the_highest_level_of_the_replicas_the_holder_heard_from_lately():
    now = [0.0]
    holder = StatsHolder(load_app_config(BASE).cascade.audit, overload_enabled=True, clock=lambda: now[0])
    handle = holder_handle(holder.report, holder.snapshot)
    busy, _ = overloaded_replica([9], [0.0], stats=handle, name="busy")
    calm, _ = overloaded_replica([0], [0.0], stats=handle, name="calm")
    busy_client, calm_client = client_of(busy), client_of(calm)
    for each in (busy, calm):  # every read fresh: the levels are under test, not the snapshot's age
        each.fleet_stats.max_age_s = 0
    ask(busy_client)  # past the bound: shed
    ask(calm_client)
    assert overload_in_stats(busy_client)["level"] == "shed"  # it reports before it answers
    assert overload_in_stats(calm_client) == {
        "enabled": True,
        "level": "shed",
        "replicas": {"normal": 1, "shed": 1, "relax": 0},
    }
    now[0] = 3 * holder.settings.report_interval_s + 1  # the busy replica has not reported since
    assert overload_in_stats(calm_client) == {
        "enabled": True,
        "level": "normal",
        "replicas": {"normal": 1, "shed": 0, "relax": 0},
    }


def test_only_a_cascade_request_reads_the_queue_and_the_decision_says_which_runs_the_cascade():
    from serve_app.core.contracts import Policy
    from serve_app.core.decision import plan_to_run

    reads = []

    def reading():
        reads.append(1)
        return OverloadReading(Level.RELAX, 12)

    chosen = PlanChoice(Plan.REASON_FIRST, "-")
    single = decide(
        CascadeOptions(policy=Policy.LARGE),
        "yes_no",
        server=CascadeOptions(),
        choose=lambda: chosen,
        read_overload=reading,
    )
    assert reads == [] and not single.cascade and plan_to_run(single.options, single) is None
    cascade = decide(
        CascadeOptions(), "yes_no", server=CascadeOptions(), choose=lambda: chosen, read_overload=reading
    )
    assert reads == [1] and cascade.cascade and plan_to_run(cascade.options, cascade) is Plan.REASON_FIRST
    # Without a decision (an audit, a replay): the options say it.
    assert plan_to_run(CascadeOptions(), None) is Plan.SEQUENTIAL
    assert plan_to_run(CascadeOptions(policy=Policy.TRANSFER), None) is None
