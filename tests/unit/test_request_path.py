"""How many of the project's modules one ``mai`` chat request runs through: a profiler hook notes every
Python function entered while an ingress replica (built in process by the product's own factory, over
scripted models) answers one request down the paper's cascade (plan ``sequential``: the short answers
disagree, the small model's reasoning agrees with the large model, route ``agree_reasoned``), after a
warm-up request that fills first-use caches. Ray, the proxy and the engines add only their own code.

A module added to the request path must take the place of one (the budget below), and the layout in
CONTRIBUTING.md names every module the path runs through."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from pathlib import Path

from serve_app.core.prompts import PromptKind
from serve_app.edge.api import chat_completions

from .fakes import ScriptedVLM
from .ingress_replica import replica
from .test_api import chat_body

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("serve_app", "deployments")
# Modules one cascade request may run through: 39 before the request path was consolidated, 29
# after; 30 since its spans (serve_app/telemetry/spans.py, which makes nothing with tracing off); 32
# since the answer cache (serve_app/cache/keys.py, what makes two requests one question, and
# reuse.py, a hit, a joined run or a kept one; a Redis store adds stores.py).
BUDGET = 32


def product_module(filename: str) -> str | None:
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in PRODUCT or relative.suffix != ".py":
        return None
    return relative.as_posix()


def modules_run(body: dict) -> tuple[Counter[str], dict]:
    small = ScriptedVLM({PromptKind.SIMPLE: "[[yes]]", PromptKind.REASONING: "It has no blades.\n[[no]]"})
    large = ScriptedVLM({PromptKind.SIMPLE: "[[no]]"})
    ingress = replica(small, large, cache=True)  # the config's default: the answer cache on, a miss here
    calls: Counter[str] = Counter()

    def record(frame, event, arg):
        if event == "call":
            module = product_module(frame.f_code.co_filename)
            if module is not None:
                calls[module] += 1

    async def run() -> dict:
        warm_up = body | {
            "messages": [{**body["messages"][0], "content": body["messages"][0]["content"][:1]}]
        }
        warm_up["messages"][0]["content"].append({"type": "text", "text": "Is there a lamp in the image?"})
        await chat_completions(ingress, json_request(warm_up, "warm-up"))
        threading.setprofile(record)
        sys.setprofile(record)
        try:
            reply = await chat_completions(ingress, json_request(body, "measured"))
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        import json

        return json.loads(reply.body)

    return calls, asyncio.run(run())


def json_request(body: dict, request_id: str):
    import json

    from starlette.requests import Request

    raw = json.dumps(body).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(raw)).encode()),
        (b"x-request-id", request_id.encode()),
    ]
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/chat/completions",
        "headers": headers,
        "query_string": b"",
        "client": ("127.0.0.1", 1234),
    }
    return Request(scope, receive)


def cascade_body(plan: str = "sequential") -> dict:
    return chat_body("Is there a fan in the image?", mai={"options": {"plan": plan}})


def test_one_cascade_request_runs_through_at_most_the_budgeted_modules():
    calls, reply = modules_run(cascade_body())
    assert reply["mai"]["route"] == "agree_reasoned", reply
    modules = sorted(calls)
    assert {"serve_app/core/cascade.py", "serve_app/edge/api.py", "serve_app/edge/routing.py"} <= set(modules)
    assert len(modules) <= BUDGET, f"{len(modules)} modules on the request path: {modules}"


def test_the_layout_names_every_module_on_the_request_path():
    calls, _ = modules_run(cascade_body())
    layout = (ROOT / "CONTRIBUTING.md").read_text()
    unnamed = [path for path in sorted(calls) if Path(path).name not in layout]
    assert not unnamed, f"CONTRIBUTING.md's layout does not name {unnamed}"


def test_a_request_for_one_model_runs_through_fewer_modules_than_the_cascade():
    cascade, _ = modules_run(cascade_body())
    single, reply = modules_run(cascade_body("large-only"))
    assert reply["mai"]["route"] == "single"
    assert set(single) <= set(cascade) and sum(single.values()) < sum(cascade.values())
