"""The cascade's plans over scripted models (serve_app/core/cascade.py), and the plan controller in an
in-process ingress replica (serve_app/edge/learning.py): it learns a class's plan from the
requests it answers, says why in every trace, and never fails a request for its statistics."""

import asyncio

import pytest

from serve_app.config import load_app_config
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions, Question
from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind
from serve_app.fleet.stats_holder import StatsHolder

from ..images import chat_body
from .fakes import ScriptedVLM
from .ingress_replica import client_of, holder_handle, replica

S, R, T = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER
QUESTION = Question("Is there a dog?", images=("data:,",), kind="yes_no")


async def run(plan, small_replies, large_replies, **delays):
    small = ScriptedVLM(small_replies, delays.get("small", {}))
    large = ScriptedVLM(large_replies, delays.get("large", {}))
    result = await Cascade(small, large).run(QUESTION, CascadeOptions(plan=plan))
    return result, small, large


async def test_reason_first_skips_the_small_short_answer_and_settles_on_the_reasoned_agreement():
    result, small, large = await run(
        Plan.REASON_FIRST, {S: "[[no]]", R: "A dog. [[yes]]"}, {S: "[[yes]]", T: "[[no]]"}
    )
    assert (result.route, result.answer, result.trace.plan) == ("agree_reasoned", "yes", "reason-first")
    assert small.kinds() == [R] and large.kinds() == [S]  # the small short answer never asked
    result, small, large = await run(Plan.REASON_FIRST, {R: "A cat. [[no]]"}, {S: "[[yes]]", T: "[[no]]"})
    assert (result.route, result.answer) == ("transfer", "no") and large.kinds() == [S, T]


async def test_reason_first_starts_both_calls_together():
    _, small, large = await run(
        Plan.REASON_FIRST,
        {R: "[[yes]]"},
        {S: "[[yes]]"},
        small={R: 0.05},
        large={S: 0.05},
    )
    assert abs(small.calls[0].started_at - large.calls[0].started_at) < 0.02


@pytest.mark.parametrize(
    ("small_short", "reasoned", "route"),
    [
        ("[[yes]]", "[[yes]]", "agree_short"),
        ("[[no]]", "[[yes]]", "agree_reasoned"),
        ("[[no]]", "[[no]]", "transfer"),
    ],
)
async def test_eager_gives_sequential_answers_and_the_transfer_plan_is_full_rt(small_short, reasoned, route):
    small, large = {S: small_short, R: reasoned}, {S: "[[yes]]", T: "[[no]]"}
    sequential, _, _ = await run(Plan.SEQUENTIAL, small, large)
    eager, eager_small, _ = await run(Plan.EAGER, small, large)
    assert (sequential.route, sequential.answer) == (eager.route, eager.answer) and sequential.route == route
    assert R in eager_small.kinds()  # started with stage 1 whatever stage 1 says
    full, full_small, full_large = await run(Plan.FULL_TRANSFER, small, large)
    assert (full.route, full_small.kinds(), full_large.kinds()) == ("transfer", [R], [T])


def config(**adaptive):
    return load_app_config(
        {
            "small": {"model_id": "s", "source": "org/s"},
            "large": {"model_id": "l", "source": "org/l"},
            "cascade": {"adaptive": adaptive},
        }
    )


def ask(client, **extra):
    reply = client.post("/v1/chat/completions", json=chat_body(**extra))
    assert reply.status_code == 200, reply.text
    return reply.json()["mai"]["trace"]


def test_a_class_where_stage_1_never_settles_leaves_sequential_once_measured():
    # Stage 1 always disagrees and the reasoning takes long: eager saves stage 1's time.
    small = ScriptedVLM({S: "[[no]]", R: "A dog. [[yes]]"}, {S: 0.01, R: 0.03})
    large = ScriptedVLM({S: "[[yes]]", T: "[[yes]]"}, {S: 0.01, T: 0.01})
    ingress = replica(small, large, config(mode="learn", min_samples=5, explore=0.0))
    client = client_of(ingress)
    traces = [ask(client) for _ in range(8)]
    assert [t["plan"] for t in traces[:5]] == ["sequential"] * 5
    assert all("of 5 observations; the default plan" in t["plan_reason"] for t in traces[:5])
    learnt = traces[-1]
    assert learnt["plan"] == "eager" and learnt["plan_reason"].startswith("yes_no: stage-1 accept 0.00 over")
    assert ingress.metrics.plans[-1] == ("yes_no", "eager")
    stats = client.get("/v1/mai/stats").json()["classes"]["yes_no"]
    assert stats["plan"]["plan"] == "eager" and stats["plans"] == {"sequential": 5, "eager": 3}
    assert stats["plan"]["estimates"]["p1"] == 0.0


def test_a_request_may_force_a_plan_and_an_unknown_one_is_a_400_naming_it():
    ingress = replica(
        ScriptedVLM({R: "[[yes]]"}), ScriptedVLM({S: "[[yes]]", T: "[[yes]]"}), config(mode="learn")
    )
    client = client_of(ingress)
    trace = ask(client, mai={"options": {"plan": "full-transfer"}})
    assert (
        trace["plan"] == "full-transfer" and trace["route"] == "transfer" and "forced" in trace["plan_reason"]
    )
    reply = client.post("/v1/chat/completions", json=chat_body(mai={"options": {"plan": "speculative"}}))
    error = reply.json()["error"]
    assert (
        reply.status_code == 400
        and error["param"] == "mai.options.plan"
        and "'reason-first'" in error["message"]
    )
    reply = client.post(
        "/v1/chat/completions", json=chat_body(model="mai-large", mai={"options": {"plan": "eager"}})
    )
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "unsupported_parameter"


@pytest.mark.parametrize(("old", "new"), [("transfer", "full-transfer"), ("small", "small-only")])
def test_a_policys_name_is_no_plan_a_400_naming_the_plans(old, new):
    ingress = replica(ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}), config(mode="learn"))
    reply = client_of(ingress).post("/v1/chat/completions", json=chat_body(mai={"options": {"plan": old}}))
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["param"] == "mai.options.plan"
    assert new in error["message"] and "sequential" in error["message"]


def test_the_replicas_learn_together_and_a_holder_that_is_down_falls_back_to_the_default():
    from ray.exceptions import ActorDiedError

    settings = config(mode="learn", min_samples=4, explore=0.0)
    holder = StatsHolder(settings.cascade.audit, settings.cascade.adaptive)
    handle = holder_handle(holder.report, holder.snapshot)
    models = ({S: "[[no]]", R: "A dog. [[yes]]"}, {S: "[[yes]]", T: "[[yes]]"})
    delays = {S: 0.01, R: 0.03}
    a = replica(ScriptedVLM(models[0], delays), ScriptedVLM(models[1]), settings, stats=handle, name="a")
    b = replica(ScriptedVLM(models[0], delays), ScriptedVLM(models[1]), settings, stats=handle, name="b")
    for _ in range(4):
        ask(client_of(a))
    asyncio.run(a._report())  # a's four observations reach the holder
    asyncio.run(b._report())  # and b reads them in the holder's reply
    trace = ask(client_of(b))
    assert trace["plan"] != "sequential" and "over 4 requests" in trace["plan_reason"]

    def down(*args):
        raise ActorDiedError()

    b.stats_holder = holder_handle(down, down)
    assert client_of(b).get("/v1/mai/stats").status_code == 503
    trace = ask(client_of(b))
    assert trace["plan"] == "sequential" and "statistics holder is unavailable" in trace["plan_reason"]
