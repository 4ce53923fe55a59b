"""Readiness over HTTP: a real local Ray (2 CPUs) and Serve proxy, the real MAIIngress, scripted models,
the large one still starting (its replica's constructor waits for a file). Before it is up, /readyz is
a 503 naming it and a chat request waits ``readiness.wait_s`` and gets a 503 (never a 504 after the
request timeout); once it is up, /readyz is 200 and the request is answered."""

import asyncio
import time
from pathlib import Path

import httpx
import pytest
import ray
from ray import serve

from harness.local_server import free_port
from serve_app.app import build_ingress, model_tier
from serve_app.config import AppConfig

from ..images import chat_body
from .scripted_llm import ScriptedLLMServer

WAIT_S = 2.0
CONFIG = {
    "small": {"model_id": "fake-small", "source": "scripted"},
    "large": {"model_id": "fake-large", "source": "scripted"},
    "ingress": {"autoscaling": {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 8}},
    "readiness": {"wait_s": WAIT_S},
    "request_timeout_s": 60,
}


@serve.deployment(ray_actor_options={"num_cpus": 0})
class StartingLLMServer(ScriptedLLMServer.func_or_class):
    """A scripted model whose replica is constructed only once ``flag`` exists: an engine loading."""

    async def __init__(self, role: str, flag: str):
        while not Path(flag).exists():
            await asyncio.sleep(0.1)
        super().__init__(role)


def until(condition, timeout_s: float, what: str):
    """Poll ``condition`` until it returns something true; that value."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except httpx.HTTPError:
            value = None
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"{what} not within {timeout_s:g} s")


@pytest.fixture(scope="module")
def starting(tmp_path_factory):
    """The app with its large model still starting; the flag file that lets it start."""
    flag = tmp_path_factory.mktemp("readiness") / "large-may-start"
    port = free_port()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    config = AppConfig.model_validate(CONFIG)
    small = ScriptedLLMServer.options(name="small:fake").bind("small")
    large = StartingLLMServer.options(name="large:fake").bind("large", str(flag))
    serve._run(
        build_ingress(config, model_tier(config, small, large)), name="mai", route_prefix="/", _blocking=False
    )
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        until(lambda: client.get("/healthz").status_code == 200, 120, "the ingress answering /healthz")
        yield client, flag
    serve.shutdown()
    ray.shutdown()


def test_not_ready_until_the_large_model_is_up_then_ready_and_answering(starting):
    client, flag = starting
    assert serve.status().applications["mai"].status != "RUNNING"  # the large model is starting

    # The small model's replica may still be starting when the ingress first answers: it is ready
    # within the minute, the large one is not.
    ready = until(
        lambda: (answer := client.get("/readyz")).json()["error"]["loading"] == ["large model"] and answer,
        60,
        "the small model ready",
    )
    assert ready.status_code == 503, ready.text
    assert int(ready.headers["retry-after"]) >= 1
    error = ready.json()["error"]
    assert (error["type"], error["code"], error["loading"]) == (
        "service_unavailable",
        "not_ready",
        ["large model"],
    )
    assert "large model (loading" in error["message"]

    for body in (chat_body("Is the shape red? [agree]"), chat_body("Hello", model="fake-large")):
        started = time.monotonic()
        early = client.post("/v1/chat/completions", json=body)
        waited = time.monotonic() - started
        assert early.status_code == 503, early.text  # never a 504 after request_timeout_s
        assert WAIT_S <= waited < WAIT_S + 5, waited
        assert early.json()["error"]["code"] == "not_ready" and "retry-after" in early.headers
        assert early.json()["error"]["loading"] == ["large model"]

    flag.touch()
    body = until(
        lambda: (response := client.get("/readyz")).status_code == 200 and response.json(),
        120,
        "/readyz answering 200",
    )
    assert body == {"status": "ready", "deployments": ["small model", "large model"]}
    answered = client.post("/v1/chat/completions", json=chat_body("Is the shape red? [agree]"))
    assert answered.status_code == 200, answered.text
    assert answered.json()["choices"][0]["message"]["content"] == "Yes"
