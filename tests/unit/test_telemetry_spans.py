"""The cascade's spans: nothing at all with Ray Serve's tracing off; with it on, spans nested in the
current one, bounded attributes, errors named by type only, audits in a trace of their own, and each
stage call's span carrying its outcome."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode
from ray.serve._private import tracing_utils

from serve_app.core.trace import StageRecord
from serve_app.telemetry import spans
from serve_app.telemetry.proxy import valid_traceparent
from serve_app.telemetry.settings import TelemetrySettings
from serve_app.telemetry.spans import StageSpans, bounded, span

from . import tracing_fixtures

# The fixtures (tracing on or off, the spans in memory), shared with test_tracing_wiring.py.
exported, tracing_off, tracing_on = (
    tracing_fixtures.exported,
    tracing_fixtures.tracing_off,
    tracing_fixtures.tracing_on,
)
_recording = tracing_fixtures.recording

SETTINGS = TelemetrySettings()
MODEL_IDS = {"small": "Qwen/Qwen2-VL-2B-Instruct", "large": "Qwen/Qwen2-VL-7B-Instruct"}


# --- bounded -----------------------------------------------------------------------------------------


def test_bounded_leaves_none_out_and_keeps_bools_and_numbers() -> None:
    attributes = {"gone": None, "flag": False, "count": 0, "ratio": 0.5, "big": 10**12}
    assert bounded(attributes, 16) == {"flag": False, "count": 0, "ratio": 0.5, "big": 10**12}


def test_bounded_cuts_a_long_string_to_max_chars() -> None:
    out = bounded({"text": "x" * 100, "short": "y" * 16}, 16)
    assert out["text"] == "x" * 15 + "…"
    assert out["short"] == "y" * 16


def test_bounded_makes_anything_else_a_string_cut_too() -> None:
    out = bounded({"list": [1, 2], "long": list(range(100))}, 16)
    assert out["list"] == "[1, 2]"
    assert isinstance(out["long"], str) and len(out["long"]) == 16


# --- tracing off -------------------------------------------------------------------------------------


def test_tracing_is_off_unless_serve_set_it_up() -> None:
    assert tracing_utils._tracing_enabled is False  # no test here calls setup_tracing
    assert spans.enabled() is False


@pytest.mark.usefixtures("tracing_off")
def test_off_a_span_is_none_and_nothing_is_made(exported: InMemorySpanExporter) -> None:
    with span("mai.request", {"mai.kind": "yes_no"}, settings=SETTINGS) as opened:
        assert opened is None
        assert spans.trace_headers() == {} and spans.current_trace_id() is None
    spans.annotate(opened, {"mai.route": "small"}, SETTINGS)  # nothing to do, nothing raised
    assert spans.trace_id(opened) is None
    assert exported.get_finished_spans() == ()


@pytest.mark.usefixtures("tracing_off")
def test_off_no_trace_context_is_handed_on_even_inside_someone_elses_span() -> None:
    with TracerProvider().get_tracer("elsewhere").start_as_current_span("not ours"):
        assert spans.trace_headers() == {}
        assert spans.current_trace_id() is None


@pytest.mark.usefixtures("tracing_off")
def test_off_stage_spans_make_nothing_and_the_call_still_runs(exported: InMemorySpanExporter) -> None:
    record = StageRecord(name="simple_small", model="small", prompt_kind="simple")
    with StageSpans(MODEL_IDS, SETTINGS)(record):
        record.status = "ok"
    assert record.status == "ok"
    assert exported.get_finished_spans() == ()


# --- tracing on --------------------------------------------------------------------------------------


def _one(exported: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = [made for made in exported.get_finished_spans() if made.name == name]
    assert len(found) == 1, [made.name for made in exported.get_finished_spans()]
    return found[0]


@pytest.mark.usefixtures("tracing_on")
def test_on_spans_nest_in_the_current_one(exported: InMemorySpanExporter) -> None:
    with span("mai.request", {"mai.kind": "yes_no", "absent": None}, settings=SETTINGS) as outer:
        with span("mai.scorer", settings=SETTINGS, kind="client") as inner:
            assert trace.get_current_span() is inner
        assert trace.get_current_span() is outer
    request, scorer = _one(exported, "mai.request"), _one(exported, "mai.scorer")
    assert request.parent is None
    assert scorer.parent is not None and scorer.parent.span_id == request.context.span_id
    assert scorer.context.trace_id == request.context.trace_id
    assert (request.kind, scorer.kind) == (SpanKind.INTERNAL, SpanKind.CLIENT)
    assert dict(request.attributes or {}) == {"mai.kind": "yes_no"}
    assert (
        request.instrumentation_scope is not None and request.instrumentation_scope.name == spans.TRACER_NAME
    )


@pytest.mark.usefixtures("tracing_on")
def test_on_attributes_are_bounded_by_the_settings(exported: InMemorySpanExporter) -> None:
    narrow = TelemetrySettings(attribute_max_chars=16)
    with span("mai.request", {"mai.question": "q" * 500}, settings=narrow) as opened:
        spans.annotate(opened, {"mai.error": "e" * 500, "mai.none": None}, narrow)
    attributes = dict(_one(exported, "mai.request").attributes or {})
    assert attributes == {"mai.question": "q" * 15 + "…", "mai.error": "e" * 15 + "…"}


@pytest.mark.usefixtures("tracing_on")
def test_on_an_exception_ends_the_span_as_an_error_naming_its_type_only(
    exported: InMemorySpanExporter,
) -> None:
    with pytest.raises(ValueError, match="the question's secret text"):
        with span("mai.request", settings=SETTINGS):
            raise ValueError("the question's secret text")
    made = _one(exported, "mai.request")
    assert made.status.status_code is StatusCode.ERROR
    assert made.status.description == "ValueError"
    assert made.events == ()  # no exception event: its message stays out of the trace
    assert made.end_time is not None


@pytest.mark.usefixtures("tracing_on")
def test_on_a_span_that_ends_well_is_no_error(exported: InMemorySpanExporter) -> None:
    with span("mai.request", settings=SETTINGS):
        pass
    assert _one(exported, "mai.request").status.status_code is StatusCode.UNSET


@pytest.mark.usefixtures("tracing_on")
async def test_on_a_cancelled_task_marks_its_span_cancelled(exported: InMemorySpanExporter) -> None:
    entered = asyncio.Event()

    async def call() -> None:
        with span("mai.stage simple_small", settings=SETTINGS):
            entered.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(call())
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    made = _one(exported, "mai.stage simple_small")
    assert dict(made.attributes or {}) == {"mai.cancelled": True}
    assert made.status.status_code is not StatusCode.ERROR


@pytest.mark.usefixtures("tracing_on")
def test_on_a_linked_span_starts_a_trace_of_its_own_linked_to_the_current_span(
    exported: InMemorySpanExporter,
) -> None:
    with span("mai.request", settings=SETTINGS) as request:
        with span("mai.audit", settings=SETTINGS, linked=True) as audit:
            assert trace.get_current_span() is audit
        assert trace.get_current_span() is request
    made_request, made_audit = _one(exported, "mai.request"), _one(exported, "mai.audit")
    assert made_audit.parent is None
    assert made_audit.context.trace_id != made_request.context.trace_id
    assert [link.context for link in made_audit.links] == [made_request.context]


@pytest.mark.usefixtures("tracing_on")
def test_on_a_linked_span_without_a_current_span_has_no_link(exported: InMemorySpanExporter) -> None:
    with span("mai.audit", settings=SETTINGS, linked=True):
        pass
    assert tuple(_one(exported, "mai.audit").links) == ()


@pytest.mark.usefixtures("tracing_on")
def test_on_trace_id_names_a_sampled_span_and_the_current_one(exported: InMemorySpanExporter) -> None:
    with span("mai.request", settings=SETTINGS) as opened:
        expected = f"{opened.get_span_context().trace_id:032x}"
        assert spans.trace_id(opened) == expected
        assert spans.current_trace_id() == expected
    assert len(expected) == 32 and int(expected, 16) != 0


@pytest.mark.usefixtures("tracing_on")
def test_on_trace_id_is_none_for_an_unsampled_span(monkeypatch: pytest.MonkeyPatch) -> None:
    exported = _recording(monkeypatch, TracerProvider(sampler=ALWAYS_OFF))
    with span("mai.request", settings=SETTINGS) as opened:
        assert opened.get_span_context().is_valid  # a real id, only not sampled
        assert spans.trace_id(opened) is None
        assert spans.current_trace_id() is None
    assert exported.get_finished_spans() == ()


@pytest.mark.usefixtures("tracing_on")
def test_on_trace_headers_carry_the_current_spans_traceparent(exported: InMemorySpanExporter) -> None:
    with span("mai.stage simple_small", settings=SETTINGS) as opened:
        headers = spans.trace_headers()
    found = opened.get_span_context()
    assert headers["traceparent"] == f"00-{found.trace_id:032x}-{found.span_id:016x}-{found.trace_flags:02x}"
    assert int(headers["traceparent"][-2:], 16) & 1  # sampled
    assert valid_traceparent(headers["traceparent"].encode())


@pytest.mark.usefixtures("tracing_on")
def test_on_trace_headers_are_empty_outside_any_span(exported: InMemorySpanExporter) -> None:
    assert spans.trace_headers() == {}


def _stage(model: str = "small", constraint: str | None = "yes|no") -> StageRecord:
    record = StageRecord(name=f"simple_{model}", model=model, prompt_kind="simple")
    record.constraint = constraint
    return record


@pytest.mark.usefixtures("tracing_on")
def test_on_a_stage_span_carries_its_outcome_set_inside_the_block(exported: InMemorySpanExporter) -> None:
    record = _stage()
    with StageSpans(MODEL_IDS, SETTINGS)(record):
        record.status, record.prompt_tokens, record.completion_tokens = "ok", 300, 2
        record.cached_tokens, record.replica, record.finish_reason = 128, "small#abc", "stop"
    made = _one(exported, "mai.stage simple_small")
    assert made.kind is SpanKind.CLIENT
    assert dict(made.attributes or {}) == {
        "mai.stage": "simple_small",
        "mai.role": "small",
        "mai.prompt_kind": "simple",
        "gen_ai.request.model": "Qwen/Qwen2-VL-2B-Instruct",
        "mai.constrained": True,
        "mai.stage.status": "ok",
        "gen_ai.usage.input_tokens": 300,
        "gen_ai.usage.output_tokens": 2,
        "mai.cached_tokens": 128,
        "gen_ai.response.finish_reasons": "stop",
        "mai.replica": "small#abc",
    }


@pytest.mark.usefixtures("tracing_on")
def test_on_a_stage_that_timed_out_says_so(exported: InMemorySpanExporter) -> None:
    record = _stage("large", constraint=None)
    with StageSpans(MODEL_IDS, SETTINGS)(record):
        record.status, record.error = "timeout", "no answer within 5.0 s"
        record.constraint_refused = "the grammar"
    attributes: dict[str, Any] = dict(_one(exported, "mai.stage simple_large").attributes or {})
    assert attributes["gen_ai.request.model"] == "Qwen/Qwen2-VL-7B-Instruct"
    assert "mai.constrained" not in attributes and "mai.timed_out" in attributes  # flags only when set
    assert attributes["mai.stage.status"] == "timeout" and attributes["mai.timed_out"] is True
    assert attributes["mai.stage.error"] == "no answer within 5.0 s"
    assert attributes["mai.constraint_refused"] is True
    assert "mai.cached_tokens" not in attributes  # not reported by the engine: left out


@pytest.mark.usefixtures("tracing_on")
def test_on_a_stage_that_raises_is_an_error_with_its_outcome(exported: InMemorySpanExporter) -> None:
    record = _stage()
    with pytest.raises(RuntimeError):
        with StageSpans(MODEL_IDS, SETTINGS)(record):
            record.status, record.error = "rejected", "image too large"
            raise RuntimeError("image too large")
    made = _one(exported, "mai.stage simple_small")
    assert made.status.status_code is StatusCode.ERROR and made.status.description == "RuntimeError"
    assert (made.attributes or {})["mai.stage.status"] == "rejected"


@pytest.mark.usefixtures("tracing_on")
def test_on_a_role_without_a_model_id_is_named_by_its_role(exported: InMemorySpanExporter) -> None:
    with StageSpans({}, SETTINGS)(_stage()):
        pass
    assert (_one(exported, "mai.stage simple_small").attributes or {})["gen_ai.request.model"] == "small"


@pytest.mark.usefixtures("tracing_on")
def test_on_a_stage_span_is_the_parent_of_what_its_call_opens(exported: InMemorySpanExporter) -> None:
    with StageSpans(MODEL_IDS, SETTINGS)(_stage()):
        with span("replica call", settings=SETTINGS):
            pass
    stage, call = _one(exported, "mai.stage simple_small"), _one(exported, "replica call")
    assert call.parent is not None and call.parent.span_id == stage.context.span_id
