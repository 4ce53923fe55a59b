"""The spans the request path makes, end to end in process (no Ray): an ingress replica built by the
product's own factory over scripted models, with Ray Serve's tracing switched on as ``setup_tracing``
leaves it and every span kept in memory (tests/unit/tracing_fixtures.py).

A ``mai`` request is a ``mai.request`` span (the root here: no Serve replica span exists in process)
with one ``mai.stage <name>`` child per stage call; its audit is a ``mai.audit`` trace of its own,
linked to it; a passthrough is a ``mai.passthrough`` span; a ``mai-batch`` row is a ``mai.batch_row``
trace with its request inside; a log record made inside a sampled span names its trace. With tracing
off (the default) none of it is made and the reply names no trace."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from batch.answerer import RowAnswerer, RowJob
from batch.inputs import CHAT_URL, InputFormat
from deployments.trace_context import TraceIdFilter, log_trace_ids
from serve_app.config import AppConfig
from serve_app.core.roles import ROLES
from serve_app.edge.keys import BATCH_CALLER, Caller
from serve_app.edge.responses import Answered, Forwarded, chat_reply, http_reply
from serve_app.telemetry import spans
from serve_app.telemetry.settings import TelemetrySettings

from ..images import chat_body
from . import tracing_fixtures
from .fakes import R, S, ScriptedVLM, T
from .fakes import StreamingHandle as Engine
from .ingress_replica import Replica, replica

pytestmark = pytest.mark.unit

# The fixtures (tracing on or off, the spans in memory), shared with test_telemetry_spans.py.
exported, tracing_off, tracing_on = (
    tracing_fixtures.exported,
    tracing_fixtures.tracing_off,
    tracing_fixtures.tracing_on,
)

QUESTION = "Is there a fan in the image?"
MODELS = {"small": {"model_id": "s", "source": "org/s"}, "large": {"model_id": "l", "source": "org/l"}}
KEY = "key-0"  # the name ``ingress_replica.replica`` gives the first of its ``api_keys``
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens")
TRANSFER_STAGES = ["short_small", "short_large", "reason_small", "transfer_large"]


def config(**sections: Any) -> AppConfig:
    return AppConfig.model_validate(MODELS | sections)


def transferring() -> tuple[ScriptedVLM, ScriptedVLM]:
    """Models whose short answers disagree and whose reasoning disagrees with the large model's short
    answer: the cascade's route ``transfer``."""
    small = ScriptedVLM({S: "[[yes]]", R: "The blades sit under the ceiling.\n[[yes]]"})
    large = ScriptedVLM({S: "[[no]]", T: "[[no]]"})
    return small, large


def agreeing() -> tuple[ScriptedVLM, ScriptedVLM]:
    """Models whose short answers agree (route ``agree_short``, an early exit an audit checks); they
    answer the audit's reference run too (policy ``transfer``)."""
    small = ScriptedVLM({S: "[[yes]]", R: "A fan hangs there.\n[[yes]]"})
    large = ScriptedVLM({S: "[[yes]]", T: "[[yes]]"})
    return small, large


def keyed(small: ScriptedVLM, large: ScriptedVLM, app: AppConfig) -> tuple[Replica, Caller]:
    """A replica requiring a key, and the caller of its one key (``KEY``)."""
    ingress = replica(small, large, app, api_keys=(b"\x01" * 32,))
    return ingress, ingress.access.ring.caller_named(KEY)


async def ask(ingress: Replica, caller: Caller, body: dict, request_id: str) -> dict:
    """``body`` down the replica's request path for ``caller``, and its reply's JSON as the HTTP API
    renders it."""
    outcome = await ingress.chat(body, request_id, caller)
    assert isinstance(outcome, Answered), outcome
    return json.loads(http_reply(outcome, chat_reply).body)


def finished(memory: InMemorySpanExporter) -> list[ReadableSpan]:
    return list(memory.get_finished_spans())


def one(memory: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = [made for made in finished(memory) if made.name == name]
    assert len(found) == 1, [made.name for made in finished(memory)]
    return found[0]


def attributes(made: ReadableSpan) -> dict[str, Any]:
    return dict(made.attributes or {})


def hex_trace(made: ReadableSpan) -> str:
    assert made.context is not None
    return f"{made.context.trace_id:032x}"


def is_child(made: ReadableSpan, parent: ReadableSpan) -> bool:
    return (
        made.parent is not None
        and parent.context is not None
        and made.parent.span_id == parent.context.span_id
        and made.parent.trace_id == parent.context.trace_id
    )


# --- 1. a cascade request down to route transfer ----------------------------------------------------


@pytest.mark.usefixtures("tracing_on")
async def test_a_transfer_request_is_a_request_span_with_one_child_per_stage(
    exported: InMemorySpanExporter,
) -> None:
    small, large = transferring()
    ingress, caller = keyed(small, large, config())
    reply = await ask(ingress, caller, chat_body(QUESTION), "req-transfer")
    trace = reply["mai"]["trace"]
    assert reply["mai"]["route"] == "transfer", reply["mai"]
    assert [stage["name"] for stage in trace["stages"]] == TRANSFER_STAGES

    request = one(exported, "mai.request")
    assert request.parent is None  # the root: no Serve replica span in process
    assert request.kind is SpanKind.INTERNAL
    found = attributes(request)
    assert found["mai.route"] == "transfer"
    assert found["mai.escalated"] is True and found["mai.early_exit"] is False
    assert found["mai.key"] == KEY
    assert found["mai.request_id"] == "req-transfer"
    assert found["mai.question.kind"] == "yes_no"
    assert "mai.question" not in found  # off by default

    # The reply names the request span's trace.
    assert trace["trace_id"] == hex_trace(request)

    # Tokens per role: the reply's, per model and in all.
    for role in ROLES:
        for field in TOKEN_FIELDS:
            assert found[f"mai.tokens.{role}.{field}"] == trace["tokens"][role][field], (role, field)
    usage = reply["usage"]
    assert sum(found[f"mai.tokens.{role}.prompt_tokens"] for role in ROLES) == usage["prompt_tokens"]
    assert sum(found[f"mai.tokens.{role}.completion_tokens"] for role in ROLES) == usage["completion_tokens"]
    assert usage["prompt_tokens"] > 0 and found["mai.tokens.large.prompt_tokens"] > 0

    # One child per stage, each carrying its own call's outcome.
    stages = {made.name: made for made in finished(exported) if made.name.startswith("mai.stage ")}
    assert sorted(stages) == sorted(f"mai.stage {name}" for name in TRANSFER_STAGES)
    for recorded in trace["stages"]:
        made = stages[f"mai.stage {recorded['name']}"]
        assert is_child(made, request), recorded["name"]
        assert made.kind is SpanKind.CLIENT
        stage = attributes(made)
        assert stage["mai.stage"] == recorded["name"] and stage["mai.role"] == recorded["model"]
        assert stage["gen_ai.request.model"] == {"small": "s", "large": "l"}[recorded["model"]]
        assert stage["mai.stage.status"] == "ok" and not stage.get("mai.timed_out")
        assert stage["gen_ai.usage.input_tokens"] == recorded["prompt_tokens"] > 0
        assert stage["gen_ai.usage.output_tokens"] == recorded["completion_tokens"]
    assert len(finished(exported)) == 1 + len(TRANSFER_STAGES)  # nothing else (no audit: rate 0)


@pytest.mark.usefixtures("tracing_on")
async def test_a_stage_that_times_out_says_so_on_its_span(exported: InMemorySpanExporter) -> None:
    small = ScriptedVLM({S: "[[yes]]", R: "late\n[[yes]]"}, delays={R: 30.0})
    large = ScriptedVLM({S: "[[no]]", T: "[[no]]"})
    app = config(cascade={"timeouts": {"reasoning_s": 0.05}})
    ingress, caller = keyed(small, large, app)
    reply = await asyncio.wait_for(ask(ingress, caller, chat_body(QUESTION), "req-slow"), 10)
    assert reply["mai"]["route"] == "degraded_no_reasoning", reply["mai"]
    assert small.cancelled() == [R]

    request, reasoning = one(exported, "mai.request"), one(exported, "mai.stage reason_small")
    assert is_child(reasoning, request)
    timed_out = attributes(reasoning)
    assert timed_out["mai.stage.status"] == "timeout" and timed_out["mai.timed_out"] is True
    assert "0.05" in timed_out["mai.stage.error"]
    assert timed_out["gen_ai.usage.input_tokens"] == 0  # no answer, no tokens
    short = attributes(one(exported, "mai.stage short_small"))
    assert short["mai.stage.status"] == "ok" and not short.get("mai.timed_out")
    assert attributes(request)["mai.route"] == "degraded_no_reasoning"


# --- 2. the question's text -------------------------------------------------------------------------

SECRET_QUESTION = "Is there a purple giraffe standing behind the counter?"


@pytest.mark.usefixtures("tracing_on")
async def test_the_question_text_is_on_no_span_by_default(exported: InMemorySpanExporter) -> None:
    small, large = transferring()
    ingress, caller = keyed(small, large, config())
    await ask(ingress, caller, chat_body(SECRET_QUESTION), "req-quiet")
    made = finished(exported)
    assert len(made) == 1 + len(TRANSFER_STAGES)
    for span_made in made:
        for name, value in attributes(span_made).items():
            assert not (isinstance(value, str) and "giraffe" in value), (span_made.name, name, value)
    assert "mai.question" not in attributes(one(exported, "mai.request"))


@pytest.mark.usefixtures("tracing_on")
async def test_the_question_text_is_on_the_request_span_when_allowed_cut_to_the_limit(
    exported: InMemorySpanExporter,
) -> None:
    small, large = transferring()
    app = config(telemetry={"record_question_text": True, "attribute_max_chars": 20})
    ingress, caller = keyed(small, large, app)
    await ask(ingress, caller, chat_body(SECRET_QUESTION), "req-told")
    request = attributes(one(exported, "mai.request"))
    assert request["mai.question"] == SECRET_QUESTION[:19] + "…"
    assert len(request["mai.question"]) == 20
    # Only the request span holds it: the stages never do.
    for made in finished(exported):
        if made.name != "mai.request":
            assert "mai.question" not in attributes(made), made.name


@pytest.mark.usefixtures("tracing_on")
async def test_a_short_question_text_is_recorded_whole(exported: InMemorySpanExporter) -> None:
    small, large = transferring()
    ingress, caller = keyed(small, large, config(telemetry={"record_question_text": True}))
    await ask(ingress, caller, chat_body(QUESTION), "req-whole")
    assert attributes(one(exported, "mai.request"))["mai.question"] == QUESTION


# --- 3. the audit: a trace of its own, linked to its request's --------------------------------------


@pytest.mark.usefixtures("tracing_on")
async def test_an_audit_is_a_trace_of_its_own_linked_to_its_request(exported: InMemorySpanExporter) -> None:
    small, large = agreeing()
    ingress, caller = keyed(small, large, config(cascade={"audit": {"rate": 1.0}}))
    reply = await ask(ingress, caller, chat_body(QUESTION), "req-audited")
    assert reply["mai"]["route"] == "agree_short", reply["mai"]
    running = list(ingress.auditor.running)
    assert len(running) == 1  # sampled at rate 1, started after the reply
    await asyncio.wait_for(asyncio.gather(*running), 10)

    request, audit = one(exported, "mai.request"), one(exported, "mai.audit")
    assert attributes(request)["mai.early_exit"] is True
    assert reply["mai"]["trace"]["trace_id"] == hex_trace(request)
    assert audit.parent is None
    assert audit.context is not None and request.context is not None
    assert audit.context.trace_id != request.context.trace_id
    assert [(link.context.trace_id, link.context.span_id) for link in audit.links] == [
        (request.context.trace_id, request.context.span_id)
    ]
    audited = attributes(audit)
    assert audited["mai.audit.of"] == "req-audited"
    assert audited["mai.route"] == "agree_short" and audited["mai.class"] == "yes_no"
    assert audited["mai.audit.disagreed"] is False  # the reference answered yes too
    assert audit.end_time is not None and request.end_time is not None
    assert audit.end_time >= request.end_time  # it ran after its reply

    # The request's two stages are in its trace; the audit's reference stages in the audit's.
    in_request = [made.name for made in finished(exported) if is_child(made, request)]
    in_audit = [made.name for made in finished(exported) if is_child(made, audit)]
    assert sorted(in_request) == ["mai.stage short_large", "mai.stage short_small"]
    assert sorted(in_audit) == ["mai.stage reason_small", "mai.stage transfer_large"]  # stage 1 reused


# --- 4. tracing off ---------------------------------------------------------------------------------


@pytest.mark.usefixtures("tracing_off")
async def test_tracing_off_makes_no_span_and_the_reply_names_no_trace(
    exported: InMemorySpanExporter,
) -> None:
    small, large = transferring()
    ingress, caller = keyed(small, large, config(cascade={"audit": {"rate": 1.0}}))
    reply = await ask(ingress, caller, chat_body(QUESTION), "req-untraced")
    assert reply["mai"]["route"] == "transfer"
    assert reply["mai"]["trace"]["trace_id"] is None
    assert finished(exported) == []


def test_tracing_is_off_by_default() -> None:
    assert spans.enabled() is False  # nothing here calls setup_tracing; the fixtures undo themselves


# --- 5. a passthrough -------------------------------------------------------------------------------


TOKEN = {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "a"}}]}
TOKEN_EVENT = f"data: {json.dumps(TOKEN)}\n\n"


@pytest.mark.usefixtures("tracing_on")
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"model": "l", "messages": [{"role": "user", "content": "hi"}], "stream": True}, None),
        (
            chat_body(QUESTION, mai={"destination": "passthrough"}, stream=True),
            "the request's mai.destination",
        ),
    ],
    ids=["named-model", "mai-sent-it"],
)
async def test_a_passthrough_is_a_span_naming_its_model(
    exported: InMemorySpanExporter, body: dict, reason: str | None
) -> None:
    engine = Engine([TOKEN_EVENT, "data: [DONE]\n\n"])
    ingress, caller = keyed(ScriptedVLM({}), ScriptedVLM({}), config())
    ingress.model_handles = {"l": engine}
    outcome = await asyncio.wait_for(ingress.chat(body, "req-passed", caller), 30)
    assert isinstance(outcome, Forwarded) and outcome.events is not None, outcome
    events = [packet async for packet in outcome.events]
    assert events[-1] == "data: [DONE]\n\n"

    made = one(exported, "mai.passthrough")
    assert made.parent is None and made.kind is SpanKind.CLIENT
    found = attributes(made)
    assert found["gen_ai.request.model"] == "l"
    assert found["mai.key"] == KEY and found["mai.stream"] is True
    if reason is None:
        assert "mai.passthrough.reason" not in found
    else:
        assert found["mai.passthrough.reason"].startswith(reason)
    assert [made.name for made in finished(exported)] == ["mai.passthrough"]  # no cascade, no stages
    # The engine's call carries the passthrough span's context: its spans join that trace.
    [info] = engine.infos
    assert made.context is not None
    _, trace_hex, span_hex, _ = info.headers["traceparent"].split("-")
    assert (trace_hex, span_hex) == (f"{made.context.trace_id:032x}", f"{made.context.span_id:016x}")


# --- 6. mai-batch rows ------------------------------------------------------------------------------


def batch_answerer(ingress: Replica, job_id: str) -> RowAnswerer:
    """An actor's answerer without Ray (as test_batch_limits.py builds one) over ``ingress``."""
    answerer = RowAnswerer.__new__(RowAnswerer)
    answerer.job = RowJob(fmt=InputFormat.OPENAI, base=".", job_id=job_id)
    answerer.config, answerer.ingress, answerer.caller = ingress.config, ingress, BATCH_CALLER
    answerer.node, answerer._slots = "node-a", asyncio.Semaphore(4)
    return answerer


def openai_line(custom_id: str) -> str:
    body = chat_body(QUESTION)
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": body})


@pytest.mark.usefixtures("tracing_on")
async def test_each_batch_row_is_a_trace_of_its_own_named_by_the_job(exported: InMemorySpanExporter) -> None:
    small, large = transferring()
    ingress = replica(small, large, config())
    answerer = batch_answerer(ingress, "job-7f3a")
    answered = await asyncio.wait_for(
        asyncio.gather(answerer.answer(1, openai_line("q1")), answerer.answer(2, openai_line("q2"))), 10
    )
    assert [outcome["status"] for _, outcome in answered] == [200, 200]

    rows = sorted(
        (made for made in finished(exported) if made.name == "mai.batch_row"),
        key=lambda made: attributes(made)["mai.batch.line"],
    )
    assert [attributes(row)["mai.batch.line"] for row in rows] == [1, 2]
    assert all(row.parent is None for row in rows)
    assert len({hex_trace(row) for row in rows}) == 2  # a trace each
    assert all(attributes(row)["mai.batch.job_id"] == "job-7f3a" for row in rows)

    requests = [made for made in finished(exported) if made.name == "mai.request"]
    assert len(requests) == 2
    for row, (line, _) in zip(rows, answered, strict=True):
        [request] = [made for made in requests if is_child(made, row)]
        assert attributes(request)["mai.request_id"] == attributes(row)["mai.request_id"]
        assert attributes(request)["mai.key"] == "mai-batch"
        # The row's output names the trace its request ran in: the row's.
        assert line["response"]["body"]["mai"]["trace"]["trace_id"] == hex_trace(row)


# --- 7. log records name their trace ----------------------------------------------------------------


class Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def serve_log(monkeypatch: pytest.MonkeyPatch) -> Iterator[Kept]:
    """The ``ray.serve`` logger's records, kept; with none of its filters (restored after), so a
    ``TraceIdFilter`` on it is the test's own ``log_trace_ids()``."""
    logger = logging.getLogger("ray.serve")
    monkeypatch.setattr(logger, "filters", [])
    level, kept = logger.level, Kept()
    logger.setLevel(logging.DEBUG)
    logger.addHandler(kept)
    try:
        yield kept
    finally:
        logger.removeHandler(kept)
        logger.setLevel(level)


@pytest.mark.usefixtures("tracing_on")
def test_a_record_logged_inside_a_sampled_span_names_its_trace(
    exported: InMemorySpanExporter, serve_log: Kept
) -> None:
    logger = logging.getLogger("ray.serve")
    log_trace_ids()
    log_trace_ids()  # once per process: a second call adds no second filter
    assert sum(isinstance(found, TraceIdFilter) for found in logger.filters) == 1
    with spans.span("mai.request", settings=TelemetrySettings()) as opened:
        logger.warning("inside")
    logger.warning("outside")
    inside, outside = serve_log.records
    assert inside.getMessage() == "inside" and outside.getMessage() == "outside"
    assert inside.trace_id == spans.trace_id(opened) == hex_trace(one(exported, "mai.request"))
    assert not hasattr(outside, "trace_id")


@pytest.mark.usefixtures("tracing_on")
def test_without_log_trace_ids_a_record_names_no_trace(
    exported: InMemorySpanExporter, serve_log: Kept
) -> None:
    with spans.span("mai.request", settings=TelemetrySettings()):
        logging.getLogger("ray.serve").warning("inside")
    assert not hasattr(serve_log.records[0], "trace_id")


@pytest.mark.usefixtures("tracing_on")
async def test_a_replica_names_the_trace_of_what_it_logs_during_a_request(
    exported: InMemorySpanExporter, serve_log: Kept
) -> None:
    """The replica's parts call ``log_trace_ids`` (edge/parts.py): an audit whose reference runs past
    the request timeout is logged inside the audit's trace."""
    small, large = agreeing()
    large.delays[T] = 30.0  # only the audit's reference asks for a transfer
    app = config(cascade={"audit": {"rate": 1.0}}, request_timeout_s=0.5)
    ingress, caller = keyed(small, large, app)
    await ask(ingress, caller, chat_body(QUESTION), "req-logged")
    await asyncio.wait_for(asyncio.gather(*ingress.auditor.running), 10)
    assert ingress.auditor.book.snapshot(ingress.auditor.settings)["audit"]["not_run"] == {"failed": 1}
    audit = one(exported, "mai.audit")
    logged = [record for record in serve_log.records if "req-logged" in record.getMessage()]
    assert logged, [record.getMessage() for record in serve_log.records]
    assert all(getattr(record, "trace_id", None) == hex_trace(audit) for record in logged)
