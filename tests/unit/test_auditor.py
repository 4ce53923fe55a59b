"""Audits in the ingress (serve_app/edge/learning.py) over scripted models, without Ray: what is audited,
what an audit compares, how audits give way to served work, and the stats holder's merge and alert."""

import asyncio
import logging

import pytest

from serve_app.core.audit import AuditSettings, is_sampled
from serve_app.core.cascade import Cascade
from serve_app.core.contracts import CascadeOptions, EngineCall, EngineUnavailableError, Policy, Question
from serve_app.core.decision import class_of, decide
from serve_app.core.plan_choice import PlanChoice
from serve_app.core.plans import Plan
from serve_app.core.prompts import PromptKind
from serve_app.edge.jobs import Job
from serve_app.edge.learning import AUDIT_PREFIX, Auditor
from serve_app.edge.observers import InFlight
from serve_app.fleet.stats_holder import StatsHolder

from .fakes import ScriptedVLM

S, R, T = PromptKind.SIMPLE, PromptKind.REASONING, PromptKind.TRANSFER
QUESTION = Question("Is there a dog?", images=("data:,",), kind="yes_no")


class Counted:
    def __init__(self):
        self.audits: list[tuple[str, str, bool]] = []
        self.not_run: list[str] = []

    def record_audit(self, cls, route, disagreed):
        self.audits.append((cls, route, disagreed))

    def record_audit_not_run(self, reason):
        self.not_run.append(reason)


def setup(
    small_replies,
    large_replies,
    *,
    rate=1.0,
    max_large_queue=8,
    max_small_queue=8,
    large_delays=None,
    priority=0,
    **audit,
):
    small = InFlight(ScriptedVLM(small_replies))
    large = InFlight(ScriptedVLM(large_replies, large_delays or {}))
    settings = AuditSettings(
        rate=rate,
        max_large_queue=max_large_queue,
        max_small_queue=max_small_queue,
        priority=priority,
        **audit,
    )
    metrics = Counted()
    cascade = Cascade(small, large)
    auditor = Auditor(cascade, settings, lambda: (small.count, large.count), metrics, clock=lambda: 1.0)
    return cascade, auditor, small.client, large.client, metrics


def decided(job):
    """The server's decision for ``job`` (``decision.decide``): its own plan, else the paper's."""
    cls = class_of(job.question.kind, job.task)
    return decide(job.options, cls, server=CascadeOptions(), choose=lambda: PlanChoice(Plan.SEQUENTIAL, "-"))


async def serve(
    cascade, auditor, *, request_id="r1", task=None, question=QUESTION, options=None, contended=False
):
    job = Job(question, options or CascadeOptions(), "mai", request_id=request_id, task=task)
    decision = decided(job)
    result = await cascade.run(job.question, request_id=job.request_id, decision=decision)
    auditor.served(job, decision, result, contended=contended)
    return result


async def test_a_sampled_early_exit_is_answered_again_by_the_reference_and_compared():
    # Stage 1 agrees on "yes"; Full RT (the reference) says "no": a disagreement.
    cascade, auditor, small, large, metrics = setup(
        {S: "[[yes]]", R: "It is a cat. [[no]]"}, {S: "[[yes]]", T: "[[no]]"}
    )
    result = await serve(cascade, auditor, task="pope")
    assert (result.route, result.answer) == ("agree_short", "yes")  # the reply is the early exit's
    await asyncio.gather(*auditor.running)

    audit_calls = [
        call for call in small.calls + large.calls if call.engine_call.request_id.startswith("audit")
    ]
    assert {call.engine_call.request_id for call in audit_calls} == {AUDIT_PREFIX + "r1"}
    assert sorted(call.prompt_kind for call in audit_calls) == [R, T]
    assert metrics.audits == [("yes_no/pope", "agree_short", True)]
    stats = auditor.book.snapshot(auditor.settings)["classes"]["yes_no/pope"]
    assert stats["requests"] == 1 and stats["audit"]["by_route"] == {
        "agree_short": {"audited": 1, "disagreed": 1}
    }
    assert auditor.book.audit_tokens > 0 and auditor.book.served_tokens > 0
    # Per model, the served request's tokens only: the audit's are counted apart.
    served = result.trace.tokens()
    assert stats["tokens"] == {
        model: {
            "prompt_tokens": served[model]["prompt_tokens"],
            "completion_tokens": served[model]["completion_tokens"],
        }
        for model in ("small", "large")
    }
    assert stats["tokens"]["small"]["prompt_tokens"] > 0 and stats["tokens"]["large"]["completion_tokens"] > 0


async def test_an_agreeing_reference_counts_an_audit_without_disagreement():
    cascade, auditor, *_, metrics = setup({S: "[[yes]]", R: "A dog. [[yes]]"}, {S: "[[Yes.]]", T: "[[yes]]"})
    await serve(cascade, auditor)
    await asyncio.gather(*auditor.running)
    assert metrics.audits == [("yes_no", "agree_short", False)]


async def test_the_last_stage_and_unsampled_requests_are_counted_never_audited():
    cascade, auditor, small, large, metrics = setup(
        {S: "[[yes]]", R: "[[no]]"}, {S: "[[no]]", T: "[[no]]"}, rate=1.0
    )
    result = await serve(cascade, auditor)
    assert result.route == "agree_reasoned" and len(auditor.running) == 1  # an early exit: audited
    await auditor.close()
    cascade, auditor, small, large, metrics = setup({S: "[[yes]]", R: "[[yes]]"}, {S: "[[no]]", T: "[[no]]"})
    result = await serve(cascade, auditor)
    assert result.route == "transfer" and not auditor.running  # the reference path itself: no audit
    cascade, auditor, small, large, metrics = setup({S: "[[yes]]"}, {S: "[[yes]]"}, rate=0.0)
    await serve(cascade, auditor)
    assert (
        not auditor.running and auditor.book.snapshot(auditor.settings)["classes"]["yes_no"]["requests"] == 1
    )


async def test_repairs_are_counted_per_class_answered_in_kind_or_not():
    # No valid answer anywhere: the transfer's is repaired; scripted replies ignore the form, so the
    # first repair answers out of it (counted failed), the second in it (a reply that is yes/no).
    cascade, auditor, small, large, metrics = setup(
        {S: "[[blue]]", R: "[[circle]]"}, {S: "[[red]]", T: "[[triangle]]"}, rate=0.0
    )
    await serve(cascade, auditor, request_id="r1")
    large.constrained[T] = "[[no]]"
    await serve(cascade, auditor, request_id="r2")
    counts = auditor.book.snapshot(auditor.settings)["classes"]["yes_no"]
    assert counts["requests"] == 2 and counts["repairs"] == {"failed": 1, "answered": 1}


async def test_other_policies_are_not_counted():
    cascade, auditor, *_ = setup({S: "[[yes]]"}, {S: "[[yes]]"})
    job = Job(QUESTION, CascadeOptions(policy=Policy.LARGE), "mai-large", request_id="r")
    auditor.served(job, decided(job), await cascade.run(job.question, job.options))
    assert auditor.book.classes == {} and not auditor.running


@pytest.mark.parametrize(
    ("busy", "bounds"), [((0, 1), {"max_large_queue": 0}), ((1, 0), {"max_small_queue": 0})]
)
async def test_no_audit_starts_while_either_model_is_past_its_bound(busy, bounds):
    cascade, auditor, small, large, metrics = setup({S: "[[yes]]"}, {S: "[[yes]]"}, **bounds)
    auditor.in_flight = lambda: busy
    await serve(cascade, auditor)
    assert not auditor.running and metrics.not_run == ["shed"]
    assert auditor.book.snapshot(auditor.settings)["audit"]["not_run"] == {"shed": 1}


async def test_no_audit_starts_while_api_keys_contend_for_the_replica():
    cascade, auditor, small, large, metrics = setup({S: "[[yes]]"}, {S: "[[yes]]"})
    await serve(cascade, auditor, contended=True)
    assert not auditor.running and metrics.not_run == ["shed"]
    await serve(cascade, auditor, request_id="r2")  # sampled (rate 1), no contention: audited
    assert len(auditor.running) == 1


async def test_an_answer_under_the_requests_own_thresholds_is_audited_apart_from_the_configured_exits():
    """The plan controller allows a plan by the audits of the configured exits: a client's own
    thresholds (here a confident_large the server does not set) must not move those bounds."""
    cascade, auditor, *_, metrics = setup(
        {S: "[[yes]]", R: "It is a cat. [[no]]"}, {S: "[[yes]]", T: "[[no]]"}
    )
    result = await serve(cascade, auditor, options=CascadeOptions(confident_large=0.9))
    await asyncio.gather(*auditor.running)
    assert result.route == "agree_short" and metrics.audits == [("yes_no", "own:agree_short", True)]
    assert "agree_short" not in auditor.book.exit_bounds("yes_no")  # the bound plans are allowed by
    await serve(cascade, auditor, request_id="r2")
    await asyncio.gather(*auditor.running)
    assert auditor.book.exit_bounds("yes_no").keys() == {"agree_short", "own:agree_short"}


async def test_audits_in_flight_are_bounded_and_one_past_the_bound_is_counted_full():
    cascade, auditor, small, large, metrics = setup(
        {S: "[[yes]]", R: "[[no]]"}, {S: "[[yes]]", T: "[[no]]"}, large_delays={T: 0.2}, max_in_flight=2
    )
    for request_id in ("a", "b", "c", "d"):
        result = await serve(cascade, auditor, request_id=request_id)
        assert result.route == "agree_short"  # every reply is served; only its audit is not run
    assert len(auditor.running) == 2 and metrics.not_run == ["full", "full"]
    await asyncio.gather(*auditor.running)
    assert len(metrics.audits) == 2
    assert auditor.book.snapshot(auditor.settings)["audit"]["not_run"] == {"full": 2}
    await serve(cascade, auditor, request_id="e")  # the bound has room again
    assert len(auditor.running) == 1
    await auditor.close()


async def test_the_same_request_id_is_drawn_afresh_each_time_under_the_default_settings():
    """A client that reuses an id (one it saw audited) must not get every request of its own audited:
    each answer draws under the replica's secret; only a configured seed ties the draw to the id."""
    cascade, auditor, *_ = setup({S: "[[yes]]"}, {S: "[[yes]]"}, rate=0.5)
    assert auditor.settings.seed is None and len(auditor.draws.secret) == 32
    drawn = [auditor.sampled("same") for _ in range(64)]
    assert True in drawn and False in drawn
    other = setup({S: "[[yes]]"}, {S: "[[yes]]"}, rate=0.5)[1]
    assert other.draws.secret != auditor.draws.secret  # each replica makes its own
    seeded = setup({S: "[[yes]]"}, {S: "[[yes]]"}, rate=0.5, seed=3)[1]
    assert len({seeded.sampled("same") for _ in range(64)}) == 1  # reproducible, as configured
    assert [seeded.sampled(f"r{i}") for i in range(64)] == [
        is_sampled(f"r{i}", seeded.settings) for i in range(64)
    ]


async def test_an_audit_runs_to_its_end_while_served_requests_arrive_and_never_sheds_itself():
    # A bound of 0 served large-model calls: the first request's audit holds the large model with its
    # own transfer call when the second request is answered; only served calls count, so the second's
    # audit starts too, and neither is cancelled by the served request arriving.
    cascade, auditor, small, large, metrics = setup(
        {S: "[[yes]]", R: "[[no]]"},
        {S: "[[yes]]", T: "[[no]]"},
        max_large_queue=0,
        large_delays={T: 0.2},
        priority=3,
    )
    await serve(cascade, auditor, request_id="first")
    while not any(call.prompt_kind is T for call in large.calls):  # the audit reaches the large model
        await asyncio.sleep(0.01)
    result = await serve(cascade, auditor, request_id="second")
    assert result.route == "agree_short" and len(auditor.running) == 2
    await asyncio.gather(*auditor.running)
    assert metrics.not_run == [] and len(metrics.audits) == 2
    priorities = {
        call.engine_call.request_id.startswith(AUDIT_PREFIX): call.engine_call.priority
        for call in small.calls + large.calls
    }
    assert priorities == {True: 3, False: 0}  # audits' calls at their priority, served ones at 0


async def test_the_load_counter_counts_served_calls_and_audits_apart():
    counter = InFlight(ScriptedVLM({S: "[[yes]]"}, {S: 0.1}))
    seen = []

    async def call(audit_priority):
        engine_call = EngineCall("r", "s", S, "yes_no", audit_priority or 0, audit=audit_priority is not None)
        messages = [{"role": "user", "content": [{"type": "text", "text": "q"}]}]
        await counter.complete(messages, max_tokens=4, call=engine_call)

    tasks = [asyncio.create_task(call(None)), asyncio.create_task(call(1)), asyncio.create_task(call(0))]
    await asyncio.sleep(0.05)
    seen.append((counter.count, counter.audits))
    await asyncio.gather(*tasks)
    assert seen == [(1, 2)] and (counter.count, counter.audits) == (0, 0)


@pytest.mark.parametrize(
    ("reply", "reason"), [(EngineUnavailableError("down"), "failed"), (RuntimeError("a bug"), "error")]
)
async def test_a_failing_audit_is_counted_and_never_raised(reply, reason, caplog):
    cascade, auditor, small, large, metrics = setup({S: "[[yes]]", R: "[[no]]"}, {S: "[[yes]]", T: reply})
    log, records = logging.getLogger("ray.serve"), []
    handler = logging.Handler()
    handler.emit = records.append
    log.addHandler(handler)
    try:
        result = await serve(cascade, auditor)
        await asyncio.gather(*auditor.running)
    finally:
        log.removeHandler(handler)
    assert result.answer == "yes" and metrics.not_run == [reason]
    if reason == "error":  # a bug in an audit is logged with its traceback
        assert any(record.exc_info and record.exc_info[0] is RuntimeError for record in records)


def test_the_holder_merges_replicas_and_warns_once_when_a_class_goes_over_its_bound():
    from serve_app.core.audit import AuditBook
    from serve_app.core.plan_stats import PlanBook
    from serve_app.edge.stats_reporter import StatsReporter

    from .ingress_replica import report_to

    settings = AuditSettings(rate=1.0, window=100, max_disagreement=0.05)
    holder = StatsHolder(settings)
    log, records = logging.getLogger("ray.serve"), []
    handler = logging.Handler()
    handler.emit = records.append
    log.addHandler(handler)
    try:
        books = [AuditBook(100), AuditBook(100)]
        reporters = [StatsReporter(book, PlanBook(10)) for book in books]
        for index in range(30):
            # disagreement at 50 %: evidence from the third audit on (2 of 3: exact lower bound 9 %)
            books[index % 2].record_audit("yes_no", "agree_short", index % 2 == 0, 1, at=index)
            report_to(holder, f"replica-{index % 2}", reporters[index % 2])
    finally:
        log.removeHandler(handler)
    snapshot = holder.snapshot()
    assert snapshot["classes"]["yes_no"]["audit"]["audited"] == 30
    assert snapshot["classes"]["yes_no"]["audit"]["disagreed"] == 15
    warnings = [record.getMessage() for record in records if record.levelno == logging.WARNING]
    assert len(warnings) == 1 and "class yes_no" in warnings[0]


def test_the_stats_endpoint_answers_the_schema_behind_the_api_key():
    import hashlib

    from ..images import chat_body
    from .ingress_replica import client_of, replica

    def api(keys):
        return client_of(replica(ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}), api_keys=keys))

    client = api(())
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 200
    body = client.get("/v1/mai/stats").json()
    assert body["classes"]["yes_no"]["requests"] == 1
    assert body["classes"]["yes_no"]["routes"] == {"agree_short": 1}
    served = reply.json()["mai"]["trace"]["tokens"]
    assert body["classes"]["yes_no"]["tokens"] == {
        model: {kind: served[model][kind] for kind in ("prompt_tokens", "completion_tokens")}
        for model in ("small", "large")
    }
    assert body["audit"]["report_interval_s"] == 5.0
    assert body["overload"] == {
        "enabled": False,
        "level": "normal",
        "replicas": {"normal": 1, "shed": 0, "relax": 0},
    }
    assert set(body["classes"]["yes_no"]["audit"]) >= {"audited", "disagreed", "rate", "upper_95", "alert"}
    assert body["audit"]["reference"] == "transfer" and body["audit"]["rate"] == 0.0
    assert "not error against the truth" in body["audit"]["measures"]

    keyed = api((hashlib.sha256(b"k1").digest(),))
    assert keyed.get("/v1/mai/stats").status_code == 401
    assert keyed.get("/v1/mai/stats", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert keyed.get("/v1/mai/stats", headers={"Authorization": "Bearer k1"}).status_code == 200


def test_the_stats_endpoint_answers_from_the_holder_or_a_503_while_it_restarts():
    from ray.exceptions import ActorDiedError

    from serve_app.core.audit import AuditBook
    from serve_app.core.plan_stats import PlanBook
    from serve_app.edge.stats_reporter import StatsReporter

    from ..images import chat_body
    from .ingress_replica import CONFIG, client_of, holder_handle, replica, report_to

    holder = StatsHolder(CONFIG.cascade.audit)
    ingress = replica(
        ScriptedVLM({S: "[[yes]]"}),
        ScriptedVLM({S: "[[yes]]"}),
        stats=holder_handle(holder.report, holder.snapshot),
    )
    gone = AuditBook(CONFIG.cascade.audit.window)  # a replica that reported, then died
    gone.served_tokens = 7
    report_to(holder, "replica-gone", StatsReporter(gone, PlanBook(1)))
    client = client_of(ingress)
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 200
    body = client.get("/v1/mai/stats").json()
    assert body["classes"]["yes_no"]["requests"] == 1 and set(holder.replicas) == {
        "replica-gone",
        "replica-a",
    }
    served = reply.json()["mai"]["trace"]["tokens"]
    assert body["classes"]["yes_no"]["tokens"]["large"] == {
        "prompt_tokens": served["large"]["prompt_tokens"],
        "completion_tokens": served["large"]["completion_tokens"],
    }
    assert body["overload"]["replicas"] == {"normal": 2, "shed": 0, "relax": 0}  # both reported lately
    assert holder.audits.served_tokens == 7 + ingress.auditor.book.served_tokens  # the dead one's stays

    def restarting(*args):
        raise ActorDiedError()

    ingress.stats_holder = holder_handle(restarting, restarting)
    ingress.fleet_stats.max_age_s = 3600  # within its age: the snapshot, however slow this machine
    assert client.get("/v1/mai/stats").json() == body
    ingress.fleet_stats.max_age_s = 0  # past its age: read again
    reply = client.get("/v1/mai/stats")
    assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
    assert reply.json()["error"]["code"] == "stats_unavailable"
    assert (
        "the statistics holder is restarting (ActorDiedError); retry later"
        in reply.json()["error"]["message"]
    )


async def test_a_single_model_plan_is_audited_and_its_alert_says_the_reference_may_be_weaker():
    from serve_app.core.audit_alerts import alerts
    from serve_app.core.plans import Plan

    cascade, auditor, *_, metrics = setup({S: "[[yes]]", R: "It is a cat. [[no]]"}, {T: "[[no]]"})
    job = Job(QUESTION, CascadeOptions(plan=Plan.SMALL_ONLY), "mai", request_id="r1")
    for request_id in ("r1", "r2"):  # two disagreeing audits: evidence (one is not)
        job = Job(QUESTION, CascadeOptions(plan=Plan.SMALL_ONLY), "mai", request_id=request_id)
        result = await cascade.run(job.question, job.options, request_id=job.request_id)
        auditor.served(job, decided(job), result)
        await asyncio.gather(*auditor.running)
    assert (result.route, result.answer) == ("single", "yes")
    assert metrics.audits == [("yes_no", "single", True)] * 2
    snapshot = auditor.book.snapshot(auditor.settings)
    assert "may be the weaker answerer" in snapshot["classes"]["yes_no"]["audit"]["note"]
    [(cls, line)] = list(alerts(snapshot))
    assert cls == "yes_no" and "the plan is not switched" in line
