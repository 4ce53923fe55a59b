"""The cascade's spans, inside the span Ray Serve's replica opened for the request (or a batch row's):
the request, each stage call (``StageSpans``, which the cascade is given), a passthrough, the scorer
and the audit (a trace of its own, linked to its request's). With Ray Serve's tracing off every
function here costs one check and makes nothing.

What a span may carry is bounded and public: strings cut to ``attribute_max_chars``; never a key (its
name only), a token, an image, a model's output, or the question's text unless the config allows it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any

from ray.serve._private import tracing_utils

from deployments.trace_context import current_trace_id, sampled_trace_id, trace_headers

from ..core.roles import ROLES
from .settings import TelemetrySettings

__all__ = ["StageSpans", "annotate", "bounded", "current_trace_id", "span", "trace_headers", "trace_id"]

if TYPE_CHECKING:
    from ..core.admission import Bill
    from ..core.contracts import Question
    from ..core.decision import Decision
    from ..core.trace import CascadeResult, StageRecord, Trace

TRACER_NAME = "mai_serve"
Attribute = str | bool | int | float


def enabled() -> bool:
    """Ray Serve's tracing is set up in this process (``setup_tracing``: a replica, a proxy, a batch
    actor); read from Ray on every call, so a request's path with tracing off runs no more of this
    package than this module."""
    return tracing_utils.is_tracing_enabled()


def records_here() -> bool:
    """Whether a span started here would be recorded, as far as is known before the sampler runs:
    tracing is on, and the span current here (if any) is sampled (a child follows its parent)."""
    if not tracing_utils.is_tracing_enabled():
        return False
    current = _loaded().trace.get_current_span().get_span_context()
    return not current.is_valid or current.trace_flags.sampled


def bounded(attributes: Mapping[str, Any], max_chars: int) -> dict[str, Attribute]:
    """``attributes`` as a span takes them: None left out, a string cut to ``max_chars``, anything that
    is not a string, bool or number made a string first."""
    out: dict[str, Attribute] = {}
    for name, value in attributes.items():
        kind = type(value)
        if value is None:
            continue
        if kind is bool or kind is int or kind is float:
            out[name] = value
        else:
            text = value if kind is str else str(value)
            out[name] = text if len(text) <= max_chars else text[: max_chars - 1] + "…"
    return out


_tracer_of: tuple[Any, Any] | None = None  # ((how tracers are got, the provider), the tracer)


class _Otel:
    """The OpenTelemetry names a span needs, imported once, when tracing is first on (an import
    statement in a function costs microseconds at every call)."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import Link, SpanKind, Status, StatusCode

        self.context, self.trace, self.Link, self.Status = context, trace, Link, Status
        self.ERROR, self.CLIENT, self.INTERNAL = StatusCode.ERROR, SpanKind.CLIENT, SpanKind.INTERNAL


_otel: _Otel | None = None


def _loaded() -> _Otel:
    global _otel
    if _otel is None:
        _otel = _Otel()
    return _otel


def _tracer() -> Any:
    """This package's tracer, made once per tracer provider (making one costs microseconds)."""
    global _tracer_of
    trace = _loaded().trace
    key = (trace.get_tracer, trace.get_tracer_provider())
    if _tracer_of is None or _tracer_of[0] != key:
        _tracer_of = (key, trace.get_tracer(TRACER_NAME))
    return _tracer_of[1]


@contextmanager
def span(
    name: str,
    attributes: Mapping[str, Any] | None = None,
    *,
    settings: TelemetrySettings,
    kind: str = "internal",
    linked: bool = False,
) -> Iterator[Any]:
    """A span named ``name``, current inside the block (calls through a Serve handle carry it to the
    replica that serves them), or None when tracing is off or the trace it would join is not sampled
    (its parent's decision stands: nothing is made). ``linked``: a trace of its own, linked to the
    span current where it starts (an audit after its request). An exception ends it as an error
    naming the exception's type, never its message; a cancellation is recorded as one."""
    if not enabled():
        yield None
        return
    otel = _loaded()
    context, trace = otel.context, otel.trace
    current = trace.get_current_span().get_span_context()
    if not linked and current.is_valid and not current.trace_flags.sampled:
        yield None
        return
    start_in: Any = None
    links: tuple[Any, ...] = ()
    if linked:
        links = (otel.Link(current),) if current.is_valid else ()
        start_in = context.Context()  # no parent: a new trace
    opened = _tracer().start_span(
        name,
        context=start_in,
        kind=otel.CLIENT if kind == "client" else otel.INTERNAL,
        links=links,
        attributes=bounded(attributes or {}, settings.attribute_max_chars),
        record_exception=False,
        set_status_on_exception=False,
    )
    token = context.attach(trace.set_span_in_context(opened))
    try:
        yield opened
    except asyncio.CancelledError:
        opened.set_attribute("mai.cancelled", True)
        raise
    except GeneratorExit:
        raise
    except BaseException as exc:
        opened.set_status(otel.Status(otel.ERROR, type(exc).__name__))
        raise
    finally:
        context.detach(token)
        opened.end()


def annotate(opened: Any, attributes: Mapping[str, Any], settings: TelemetrySettings) -> None:
    """Add ``attributes`` to an open span (None: tracing off, nothing to do)."""
    if opened is not None and opened.is_recording():
        opened.set_attributes(bounded(attributes, settings.attribute_max_chars))


def trace_id(opened: Any) -> str | None:
    """An opened span's trace id when it is sampled, else None (None: no span was made)."""
    return None if opened is None else sampled_trace_id(opened)


class StageSpans:
    """The cascade's stage calls as spans (``core/contracts.StageSpans``): one per call, open while the
    call runs, so the model replica's span is its child; its outcome read from the stage's record
    when the call ends (status, tokens, cached prefix, the replica, why it finished)."""

    def __init__(self, model_ids: Mapping[str, str], settings: TelemetrySettings):
        self.model_ids, self.settings = dict(model_ids), settings

    @contextmanager
    def __call__(self, record: StageRecord) -> Iterator[None]:
        if not records_here():
            yield
            return
        started = {
            "mai.stage": record.name,
            "mai.role": record.model,
            "mai.prompt_kind": record.prompt_kind,
            "gen_ai.request.model": self.model_ids.get(record.model, record.model),
            "mai.constrained": _flag(record.constraint is not None),
        }
        with span(f"mai.stage {record.name}", started, settings=self.settings, kind="client") as opened:
            try:
                yield
            finally:
                if opened is not None:
                    annotate(opened, stage_outcome(record), self.settings)


def stage_outcome(record: StageRecord) -> dict[str, Any]:
    """What a finished (or cancelled) stage's span says of it."""
    return {
        # Still running: an exception the stage does not record (a bug) ended it.
        "mai.stage.status": record.status if record.status != "running" else "error",
        "mai.stage.error": record.error,
        "gen_ai.usage.input_tokens": record.prompt_tokens,
        "gen_ai.usage.output_tokens": record.completion_tokens,
        "mai.cached_tokens": record.cached_tokens,
        "gen_ai.response.finish_reasons": record.finish_reason,
        "mai.replica": record.replica,
        "mai.timed_out": _flag(record.status == "timeout"),
        "mai.constraint_refused": _flag(record.constraint_refused is not None),
    }


def _flag(value: bool) -> bool | None:
    """A flag that is rarely set, as an attribute only when it is (each attribute costs a span
    microseconds to set and to send)."""
    return True if value else None


def request_attributes(
    question: Question, request_id: str, key_name: str, settings: TelemetrySettings
) -> dict[str, Any]:
    """What a cascade request's span says as it starts: its id, its key's name (never the key), its
    question's kind and, when the config allows, its text (nothing when tracing is off)."""
    if not enabled():
        return {}
    return {
        "mai.request_id": request_id,
        "mai.key": key_name,
        "mai.question.kind": question.kind,
        "mai.question.kind_basis": question.kind_basis,
        "mai.question.choices": len(question.choices) or None,
        "mai.question": question.question if settings.record_question_text else None,
    }


def describe_request(
    opened: Any, decision: Decision, result: CascadeResult, bill: Bill, settings: TelemetrySettings
) -> None:
    """A cascade request's outcome on its span (its class, plan, route, exit or escalation, answer
    validity, tokens per model), and its trace id in its trace (the reply's ``mai.trace``)."""
    if opened is None or not opened.is_recording():
        return
    trace = result.trace
    trace.trace_id = trace_id(opened)
    tokens = trace.tokens()
    outcome: dict[str, Any] = {
        "mai.policy": trace.policy,
        "mai.class": decision.cls,
        "mai.plan": trace.plan,
        "mai.plan.reason": trace.plan_reason,
        "mai.route": trace.route,
        "mai.early_exit": bill.early_exit,
        "mai.escalated": bill.escalated,
        "mai.answer.valid": trace.answer_valid,
        "mai.repaired": _flag(trace.repair is not None),
        "mai.overloaded": _flag(decision.overload is not None),
    }
    for role in ROLES:  # what each model was asked and answered (its cached prefix: on the stages)
        for field in ("prompt_tokens", "completion_tokens"):
            outcome[f"mai.tokens.{role}.{field}"] = tokens[role].get(field, 0)
    annotate(opened, outcome, settings)


def describe_cache(opened: Any, trace: Trace, settings: TelemetrySettings) -> None:
    """What the answer cache did on the request's span (``mai.cache``: hit, coalesced, miss, bypass;
    a hit's age, the request whose run a coalesced one shared), and the request's own trace id in its
    trace: a reused answer's trace is the run's that made it."""
    if opened is None or not opened.is_recording():
        return
    trace.trace_id = trace_id(opened)
    cache = trace.cache
    if cache is not None:
        attributes = {
            "mai.cache": cache.status,
            "mai.cache.age_s": cache.age_s,
            "mai.coalesced_with": cache.coalesced_with,
        }
        annotate(opened, attributes, settings)


def passthrough_span(
    model_id: str, reason: str | None, key_name: str, payload: Mapping[str, Any], settings: TelemetrySettings
) -> AbstractContextManager[Any]:
    """A passthrough's span: the model it went to, why ``mai`` sent it there (None: the client named
    the model), its key's name, whether it streams (the span ends when the reply or the stream's first
    event is back)."""
    attributes = {
        "gen_ai.request.model": model_id,
        "mai.passthrough.reason": reason,
        "mai.key": key_name,
        "mai.stream": bool(payload.get("stream")),
    }
    return span("mai.passthrough", attributes, settings=settings, kind="client")
