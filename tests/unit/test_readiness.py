"""Readiness: the pure reply of a check (``edge.readiness``), the gate that checks the deployments and
holds early requests (``edge.readiness``, over scripted probes), and both behind the ingress's
routes in process."""

import asyncio
import hashlib
import re
import time

import pytest
from pydantic import ValidationError

from serve_app.config import AppConfig
from serve_app.core.prompts import PromptKind
from serve_app.edge import readiness as readiness_module
from serve_app.edge.readiness import (
    Check,
    NotReadyError,
    ReadinessGate,
    handle_probe,
    is_fresh,
    not_ready_reason,
    readiness_reply,
    retry_after_s,
)

from ..images import chat_body
from .fakes import ScriptedVLM
from .ingress_replica import CONFIG, client_of, replica

LOADING = Check(10.0, ("small model s", "large model l"), {"large model l": "loading: no answer within 2 s"})


# ---------------------------------------------------------------- the pure part


def test_how_a_check_ended_says_why_a_deployment_is_not_ready():
    assert not_ready_reason(None, 2.0) is None
    assert not_ready_reason(TimeoutError(), 2.0) == "loading: no answer within 2 s"
    reason = not_ready_reason(RuntimeError("engine dead at 10.0.0.7\ntraceback..."), 2.0, "abc")
    assert reason == "failing (error id abc; the detail is in the server log)"


@pytest.mark.parametrize(
    ("now", "fresh"), [(10.0, True), (14.9, True), (15.0, False), (30.0, False), (9.0, False)]
)
def test_a_check_answers_for_max_age_seconds(now, fresh):
    assert is_fresh(LOADING, now, max_age_s=5.0) is fresh


def test_no_check_is_never_fresh():
    assert not is_fresh(None, 0.0)


@pytest.mark.parametrize(("now", "seconds"), [(10.0, 5), (13.2, 2), (14.99, 1), (40.0, 1)])
def test_retry_after_is_when_the_check_expires_at_least_a_second(now, seconds):
    assert retry_after_s(LOADING, now, max_age_s=5.0) == seconds


def test_ready_is_200_naming_the_deployments():
    status, body, headers = readiness_reply(Check(1.0, ("small model s", "large model l")), 1.0)
    assert (status, body, headers) == (
        200,
        {"status": "ready", "deployments": ["small model s", "large model l"]},
        {},
    )


def test_not_ready_is_a_503_in_the_error_shape_naming_what_is_loading():
    status, body, headers = readiness_reply(LOADING, 11.0)
    assert status == 503 and headers == {"Retry-After": "4"}
    error = body["error"]
    assert (error["type"], error["code"], error["param"]) == ("service_unavailable", "not_ready", None)
    assert error["loading"] == ["large model l"]
    assert "large model l (loading: no answer within 2 s)" in error["message"]
    assert "small model s" not in error["message"]


def test_a_request_that_waited_is_told_how_long():
    error = NotReadyError(LOADING, 10.0, waited_s=30)
    assert error.status == 503 and "after a wait of 30 s" in error.message
    assert error.body()["error"]["loading"] == ["large model l"]


def test_the_wait_is_a_validated_setting_with_a_default():
    assert AppConfig.model_validate(CONFIG.model_dump()).readiness.wait_s == 30
    with pytest.raises(ValidationError, match="readiness.wait_s"):
        AppConfig.model_validate(CONFIG.model_dump() | {"readiness": {"wait_s": -1}})
    with pytest.raises(ValidationError, match="readiness.waits"):
        AppConfig.model_validate(CONFIG.model_dump() | {"readiness": {"waits": 1}})


# ---------------------------------------------------------------- the gate over scripted probes


class Deployment:
    """A deployment's check: hangs (loading) until ``up()``, or raises ``error``; counts its calls."""

    def __init__(self, *, up: bool = False, error: Exception | None = None):
        self.is_up, self.error, self.calls = up, error, 0

    def up(self) -> None:
        self.is_up = True

    async def __call__(self) -> None:
        self.calls += 1
        if self.error is not None:
            raise self.error
        while not self.is_up:
            await asyncio.sleep(0.01)


@pytest.fixture
def quick(monkeypatch):
    """Checks that give up after 0.1 s and ask again after 0.02 s."""
    monkeypatch.setattr(readiness_module, "PROBE_TIMEOUT_S", 0.1)
    monkeypatch.setattr(readiness_module, "MIN_PROBE_S", 0.05)
    monkeypatch.setattr(readiness_module, "RECHECK_S", 0.02)


async def test_a_request_waits_the_bound_then_is_told_what_is_loading(quick):
    small, large = Deployment(up=True), Deployment()
    gate = ReadinessGate({"small model s": small, "large model l": large})
    started = time.monotonic()
    with pytest.raises(NotReadyError) as raised:
        await gate.wait(0.4)
    waited = time.monotonic() - started
    assert 0.4 <= waited < 0.4 + 0.3
    assert raised.value.loading == ("large model l",) and not gate.open
    assert large.calls >= 2  # it kept asking while it waited


async def test_a_waiting_request_goes_on_once_the_last_deployment_answers(quick):
    small, large = Deployment(up=True), Deployment()
    gate = ReadinessGate({"small model s": small, "large model l": large})
    asyncio.get_running_loop().call_later(0.25, large.up)
    started = time.monotonic()
    await gate.wait(5.0)
    assert time.monotonic() - started < 1.0 and gate.open


async def test_once_open_requests_pass_without_a_check_while_readyz_keeps_checking(quick):
    now = [0.0]
    small, large = Deployment(up=True), Deployment(up=True)
    gate = ReadinessGate({"small model s": small, "large model l": large}, clock=lambda: now[0])
    await gate.wait(1.0)
    asked = (small.calls, large.calls)
    for _ in range(5):
        await gate.wait(1.0)
    assert (small.calls, large.calls) == asked  # not on the request path
    large.error = RuntimeError("engine dead")
    assert (await gate.current()).ready  # the cached check
    now[0] = 6.0  # past MAX_AGE_S
    check = await gate.current()
    assert re.fullmatch(r"failing \(error id [0-9a-f]{16}; .*\)", check.not_ready["large model l"])
    await gate.wait(1.0)  # the gate stays open: a failed model is the cascade's to handle
    assert gate.open


async def test_concurrent_callers_share_one_check(quick):
    small, large = Deployment(), Deployment()
    gate = ReadinessGate({"small model s": small, "large model l": large})
    asyncio.get_running_loop().call_later(0.05, small.up)
    asyncio.get_running_loop().call_later(0.05, large.up)
    checks = await asyncio.gather(*(gate.current() for _ in range(10)))
    assert all(check.ready for check in checks)
    assert (small.calls, large.calls) == (1, 1)


async def test_a_failing_deployment_is_named_with_its_error(quick):
    gate = ReadinessGate(
        {"small model s": Deployment(up=True), "attention scorer": Deployment(error=ValueError("no weights"))}
    )
    with pytest.raises(NotReadyError) as raised:
        await gate.wait(0.1)
    assert raised.value.loading == ("attention scorer",)
    assert "attention scorer (failing (error id " in raised.value.message
    assert "no weights" not in raised.value.message


async def test_nothing_to_check_is_ready():
    gate = ReadinessGate({})
    assert gate.open and (await gate.current()).ready
    await gate.wait(0.0)


class Pending:
    """A handle call that never gets a replica: awaiting it waits; ``cancel`` is recorded."""

    def __init__(self):
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def __await__(self):
        return asyncio.sleep(3600).__await__()


async def test_a_handle_check_that_times_out_is_cancelled():
    pending = Pending()
    handle = type("Handle", (), {"check_health": type("M", (), {"remote": staticmethod(lambda: pending)})})
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(handle_probe(handle)(), 0.05)
    assert pending.cancelled


# ---------------------------------------------------------------- behind the routes


def test_routes_before_and_after_the_models_are_ready(quick):
    config = AppConfig.model_validate(CONFIG.model_dump() | {"readiness": {"wait_s": 0.3}})
    small = ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"})
    large = ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"})
    ingress = replica(small, large, config)
    slow = Deployment()
    ingress.readiness = ReadinessGate({"small model s": Deployment(up=True), "large model l": slow})
    client = client_of(ingress)
    assert client.get("/healthz").status_code == 200  # liveness, whatever the models do
    ready = client.get("/readyz")
    assert ready.status_code == 503 and int(ready.headers["retry-after"]) >= 1
    assert ready.json()["error"]["loading"] == ["large model l"]
    started = time.monotonic()
    early = client.post("/v1/chat/completions", json=chat_body("Is the shape red?"))
    assert early.status_code == 503 and time.monotonic() - started >= 0.3
    assert early.json()["error"]["code"] == "not_ready" and "retry-after" in early.headers
    assert "after a wait of 0.3 s" in early.json()["error"]["message"]
    assert not small.calls and not large.calls  # no model was asked
    assert (503, "not_ready") in ingress.metrics.errors
    slow.up()
    asked = client.post("/v1/chat/completions", json=chat_body("Is the shape red?"))
    assert asked.status_code == 200, asked.text
    assert client.get("/readyz").json() == {
        "status": "ready",
        "deployments": ["small model s", "large model l"],
    }


def test_readyz_needs_no_key_and_a_request_without_one_is_refused_without_waiting(quick):
    config = AppConfig.model_validate(CONFIG.model_dump() | {"readiness": {"wait_s": 5}})
    ingress = replica(ScriptedVLM({}), ScriptedVLM({}), config, api_keys=(hashlib.sha256(b"k1").digest(),))
    ingress.readiness = ReadinessGate({"large model l": Deployment()})
    client = client_of(ingress)
    assert client.get("/readyz").status_code == 503  # answered, not a 401
    started = time.monotonic()
    refused = client.post("/v1/chat/completions", json=chat_body("Is the shape red?"))
    assert refused.status_code == 401 and time.monotonic() - started < 2
    bad = client.post(
        "/v1/chat/completions", json=chat_body("Is it red?") | {"messages": []}, headers={"x-api-key": "k1"}
    )
    assert bad.status_code == 400 and time.monotonic() - started < 2  # bad input: refused first


def test_a_replica_without_the_keys_its_exposure_requires_is_closed_and_not_ready(quick):
    """The application was built with keys (its builder's environment had them); this replica's
    environment has none (a node without the variable): it answers no one, anonymously or not, and
    /readyz says why without naming a key source."""
    from serve_app.config import Security
    from serve_app.edge.keys import NO_KEYS, KeyRing

    small, large = ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"}), ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"})
    ring = KeyRing(Security(api_keys_env="MAI_TEST_KEYS"), {}, required=True)
    ingress = replica(small, large, CONFIG, api_keys=ring)
    client = client_of(ingress)
    ready = client.get("/readyz")
    assert ready.status_code == 503
    message = ready.json()["error"]["message"]
    assert f"API keys ({NO_KEYS})" in message and "MAI_TEST_KEYS" not in message
    for headers in ({}, {"x-api-key": "anything"}):
        refused = client.post("/v1/chat/completions", json=chat_body("Is the shape red?"), headers=headers)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "no_api_keys"
        assert "MAI_TEST_KEYS" not in refused.text
    assert client.get("/v1/models").status_code == 503
    assert not small.calls and not large.calls
    assert KeyRing(Security(api_keys_env="MAI_TEST_KEYS"), {}, required=False).open  # built anonymous
    keyed = KeyRing(Security(api_keys_env="MAI_TEST_KEYS"), {"MAI_TEST_KEYS": "k1"}, required=True)
    assert not keyed.closed and not keyed.open
    served = replica(small, large, CONFIG, api_keys=keyed)
    assert client_of(served).get("/readyz").json()["deployments"] == ["API keys"]
