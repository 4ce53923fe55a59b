"""A cascade call in plain values: ``complete(body) -> reply``, which every model deployment serves.

The ingress (and each mai-batch actor, which builds one) sends a cascade call as a JSON-ready dict and
reads a dict back, so it never loads vLLM's request and reply types: ray.serve.llm's
``openai_api_models`` imports vLLM's protocol, seconds of a replica's start. The model's replica has
vLLM loaded anyway: it validates the body into ray.serve.llm's ``ChatCompletionRequest``, runs its own
``chat``, and returns one of

- ``{"response": {...}}``: the ``ChatCompletionResponse``, as JSON;
- ``{"error": {"code": int, "message": str, "type": str}}``: the engine refused or failed the request
  (its ``ErrorResponse``, or ``VLLMServerError``, a generation the engine failed, as a 500);
- ``{"invalid": str}``: a body ``ChatCompletionRequest`` (or vLLM's checks across its fields) refuses.
  Cascade bodies are the ingress's own, built from parts it checked: a refusal is the ingress's bug
  (a 500), which the ingress's own checks must have caught.

The body is a ``ChatBody``: a dict that also shows its ``messages`` as an attribute, where ray.serve.llm's
prefix-cache router reads a request's text (``prefix_cache_routing``).

A passthrough keeps ray.serve.llm's ``chat`` and its types (``serve_app/edge/passthrough.py``): it
forwards what a client sent, and streams. The cascade never needs those types; the ingress loads them
for passthroughs off its event loop (a server's as it starts, a batch actor's with its first one).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


class ChatBody(dict):
    """A cascade call's body: plain values, and ``messages`` readable as an attribute too."""

    @property
    def messages(self) -> Any:
        return self["messages"]


def reply_of(item: Any) -> dict[str, Any]:
    """The plain reply of what a chat call yielded first: a response, or an ``ErrorResponse``."""
    error = getattr(item, "error", None)
    if error is not None and not hasattr(item, "choices"):
        return {"error": _error_fields(error)}
    if isinstance(item, list | str):  # a stream's chunks: never for a non-streaming request
        return {"error": {"code": 500, "message": "the engine streamed a non-streaming request", "type": ""}}
    return {"response": item.model_dump(mode="json")}


def _error_fields(error: Any) -> dict[str, Any]:
    return {
        "code": int(getattr(error, "code", 500) or 500),
        "message": str(getattr(error, "message", None) or error),
        "type": str(getattr(error, "type", "") or ""),
    }


async def complete_plainly(chat: Callable[[Any], Any], body: dict[str, Any]) -> dict[str, Any]:
    """Run ``chat`` (an LLMServer's, or the emulated engine's) on ``body`` and return its plain reply."""
    from pydantic import ValidationError
    from ray.serve.llm.openai_api_models import ChatCompletionRequest
    from vllm.exceptions import VLLMClientError, VLLMServerError

    try:
        request = ChatCompletionRequest.model_validate(dict(body))
    except (ValidationError, VLLMClientError) as exc:  # vLLM's checks across fields raise its own
        return {"invalid": str(exc)}
    stream = None
    try:
        stream = chat(request)
        if inspect.isawaitable(stream):  # LLMServer.chat is a coroutine that returns the generator
            stream = await stream
        async for item in stream:
            return reply_of(item)
    except VLLMServerError as exc:
        return {"error": {"code": 500, "message": str(exc), "type": type(exc).__name__}}
    finally:
        if stream is not None and hasattr(stream, "aclose"):
            await stream.aclose()
    return {"error": {"code": 500, "message": "the engine returned no response", "type": ""}}


class PlainChat:
    """``complete``, the plain-value call, on any deployment with an LLMServer's ``chat``."""

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One cascade call: a chat body in, its plain reply out."""
        return await complete_plainly(self.chat, body)  # type: ignore[attr-defined]
