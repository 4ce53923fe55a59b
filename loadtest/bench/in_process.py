"""An ingress replica in this process, without Ray: the product's own parts (``edge.parts.build_parts``)
over scripted model clients, assembled by ``MAIIngress.assemble`` on an instance made without its
``__init__`` (which builds the clients from deployment handles), and the Starlette request its route
handlers take. For measuring what one request runs, where a Serve cluster would only add its own code."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from serve_app.config import AppConfig
from serve_app.core.contracts import Completion, EngineCall, EngineUnavailableError
from serve_app.core.prompts import PromptKind
from serve_app.edge.keys import KeyRing
from serve_app.edge.parts import build_parts

# Where a checkout before the request path's consolidation keeps what it has under other names.
try:
    from serve_app.core.contracts import GREEDY, Decoding
    from serve_app.edge.observers import IngressMetrics, Metrics
except ImportError:
    from serve_app.core.options import GREEDY, Decoding  # type: ignore[import-not-found,no-redef]
    from serve_app.edge.metrics import IngressMetrics, Metrics  # type: ignore[import-not-found,no-redef]

# The server's defaults, over two models named as the emulated configs name them.
DEFAULT_CONFIG = {
    "small": {"model_id": "small", "source": "org/small"},
    "large": {"model_id": "large", "source": "org/large"},
}


@dataclass(frozen=True)
class ScriptedModel:
    """A ``VLMClient`` (serve_app/core/contracts.py) answering each prompt kind with a fixed text at once;
    a kind it has no text for fails as an engine that is down does (``EngineUnavailableError``)."""

    replies: Mapping[PromptKind, str]

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        reply = self.replies.get(call.prompt_kind)
        if reply is None:
            raise EngineUnavailableError(f"no reply scripted for the {call.prompt_kind} prompt")
        prompt_words = sum(len(str(part.get("text", "")).split()) + 1 for part in messages[-1]["content"])
        return Completion(
            reply, prompt_tokens=prompt_words, completion_tokens=len(reply.split()), latency_s=0.0
        )


try:  # the deployment's home since the HTTP API was set apart; a checkout from before has it here
    from serve_app.edge.api import MAIIngress
except ImportError:
    from serve_app.edge.ingress import MAIIngress  # type: ignore[attr-defined,no-redef]


class InProcessReplica(MAIIngress.func_or_class):  # type: ignore[name-defined]
    """The ingress class as Serve wraps it, less the wrapper's ``__del__`` (a coroutine that shuts down
    an ASGI app this replica never started)."""

    def __del__(self) -> None:
        pass


def in_process_ingress(
    small: Any, large: Any, config: AppConfig | None = None, *, metrics: Metrics | None = None
) -> InProcessReplica:
    """A replica over the ``small`` and ``large`` clients, built as ``MAIIngress.__init__`` builds it once
    it has its clients: no model handles (nothing to pass through to), no statistics holder, no API keys,
    nothing to wait for before serving. ``metrics``: the product's ``IngressMetrics`` unless given."""
    config = config or AppConfig.model_validate(DEFAULT_CONFIG)
    parts = build_parts(config, small, large, metrics or IngressMetrics())
    ingress = object.__new__(InProcessReplica)
    ingress.assemble(config, parts, {}, None, KeyRing.of(()), "in-process")
    return ingress


def json_request(
    body: Any,
    path: str = "/v1/chat/completions",
    request_id: str | None = None,
    cache_control: str | None = None,
) -> Request:
    """A POST of ``body`` as JSON to ``path``, as the ingress's handlers receive it from Serve's proxy;
    ``cache_control``: its ``Cache-Control`` header (what it lets the answer cache do; a checkout from
    before the cache reads no such header)."""
    raw = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    if request_id is not None:
        headers.append((b"x-request-id", request_id.encode()))
    if cache_control is not None:
        headers.append((b"cache-control", cache_control.encode()))
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    scope = {"type": "http", "method": "POST", "path": path, "headers": headers, "query_string": b""}
    return Request(scope, receive)
