"""The ingress's HTTP API (its real route handlers and error handling, ``edge.api.build_api``) in
process, without Ray: the replica's attributes are set by hand and the cascade's clients are
scripted. What reaches the client for a bug, a failed model and a refused input."""

import hashlib
import logging

import pytest
from fastapi.testclient import TestClient

from serve_app.config import Security
from serve_app.core.contracts import Completion, EngineCall, EngineUnavailableError, InputRejectedError
from serve_app.core.prompts import PromptKind

from ..images import chat_body
from .fakes import ScriptedVLM
from .ingress_replica import CONFIG, RecordedMetrics, client_of, replica

S = PromptKind.SIMPLE


class ClientWithoutDecoding:
    """The client a user writes from an outdated example: ``complete`` without ``decoding``."""

    async def complete(self, messages, *, max_tokens, call: EngineCall) -> Completion:
        return Completion("[[yes]]", 1, 1, 0.0)


def api_with(small, large) -> tuple[TestClient, RecordedMetrics]:
    ingress = replica(small, large)
    return client_of(ingress), ingress.metrics


class Kept(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_a_bug_is_a_500_with_an_error_id_and_a_logged_traceback_never_a_503():
    client, metrics = api_with(ClientWithoutDecoding(), ClientWithoutDecoding())
    log, kept = logging.getLogger("ray.serve"), Kept()
    log.addHandler(kept)
    try:
        reply = client.post("/v1/chat/completions", json=chat_body())
    finally:
        log.removeHandler(kept)
    assert reply.status_code == 500 and "retry-after" not in reply.headers
    error = reply.json()["error"]
    assert error["code"] == "internal_error" and error["error_id"] in error["message"]
    [record] = [r for r in kept.records if error["error_id"] in r.getMessage()]
    assert record.exc_info and record.exc_info[0] is TypeError  # the traceback is in the log
    assert metrics.errors == [(500, "internal_error")]
    # The replica keeps serving: the next request is answered (here, by the same bug, as a 500 again).
    assert (
        client.post(
            "/v1/mai/answer",
            json={
                "image": chat_body()["messages"][0]["content"][0]["image_url"]["url"],
                "question": "Is it red?",
            },
        ).status_code
        == 500
    )


def test_a_failed_model_is_a_503_with_retry_after():
    failing = ScriptedVLM({S: EngineUnavailableError("l is unavailable (ActorDiedError)")})
    client, metrics = api_with(ScriptedVLM({S: "[[Yes]]"}), failing)
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 503 and reply.headers["retry-after"] == "5"
    assert reply.json()["error"]["code"] == "model_unavailable" and metrics.errors == [
        (503, "model_unavailable")
    ]


def test_a_refused_input_is_the_engines_4xx_naming_the_model_and_stage():
    refusing = ScriptedVLM({S: InputRejectedError("l: Failed to apply processor", "invalid_image")})
    client, _ = api_with(ScriptedVLM({S: "[[Yes]]"}), refusing)
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (
        error["code"] == "invalid_image"
        and "large model" in error["message"]
        and "short_large" in error["message"]
    )


@pytest.mark.parametrize(
    "body", [b"{", b"[]", b'{"model": "nope", "messages": [{"role": "user", "content": "x"}]}']
)
def test_bad_input_is_a_4xx_through_the_same_handlers(body):
    client, metrics = api_with(ScriptedVLM({}), ScriptedVLM({}))
    reply = client.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert 400 <= reply.status_code < 500 and reply.json()["error"]["message"]
    assert metrics.errors and 400 <= metrics.errors[0][0] < 500


def test_an_engine_failure_reaches_the_client_as_an_error_id_and_no_internals():
    from serve_app.clients.failures import engine_call

    def dead_engine():
        from ray.exceptions import RayError

        with engine_call("l"):
            raise RayError(
                "ray::ServeReplica:large (pid=4242, ip=10.0.0.7) Traceback (most recent call last)"
            )

    try:
        dead_engine()
    except EngineUnavailableError as exc:
        failure = exc
    client, _ = api_with(ScriptedVLM({S: "[[Yes]]"}), ScriptedVLM({S: failure}))
    reply = client.post("/v1/chat/completions", json=chat_body())
    message = reply.json()["error"]["message"]
    assert reply.status_code == 503 and "error id " in message
    assert not any(leak in message for leak in ("pid", "10.0.0.7", "Traceback", "RayError"))


def test_the_schema_and_docs_are_not_served_unless_configured():
    client, _ = api_with(ScriptedVLM({}), ScriptedVLM({}))
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert client.get(path).status_code == 404
    config = CONFIG.model_copy(update={"security": Security(openapi=True)})
    keyed = client_of(
        replica(
            ScriptedVLM({}),
            ScriptedVLM({}),
            config,
            api_keys=(hashlib.sha256(b"k").digest(),),
        )
    )
    assert keyed.get("/openapi.json").status_code == 401
    schema = keyed.get("/openapi.json", headers={"authorization": "Bearer k"}).json()
    assert "/v1/chat/completions" in schema["paths"] and keyed.get("/docs").status_code == 404
