"""The models themselves, through the ingress: an OpenAI chat request for a configured model id goes to
that model's LLMServer unchanged (ray.serve.llm's request type and validation, its token stream, usage,
logprobs, n, tools, response_format, vLLM's extra sampling fields), behind the ingress's API keys, body
limit, image checks and metrics. An engine's failures are sorted as the cascade's are
(``clients.failures``): its 4xx reaches the client as that 4xx, anything else as the model unavailable.
What a request may carry is checked first (``passthrough_body``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from deployments.model_server import reply_of
from deployments.trace_context import trace_headers

from ..clients.failures import engine_call, error_response_failure
from ..core.routes import Route
from .errors import RequestError, describe_validation_error
from .responses import Forwarded

logger = logging.getLogger("ray.serve")
_LOADED = threading.Event()


def load_types() -> None:
    """vLLM's request and reply types, which a passthrough is read and answered in: seconds, once per
    process. The cascade never needs them (``deployments/model_server.py``), so a replica loads them
    off its event loop: in a thread as it starts (``load_types_in_background``), else in one before
    its first passthrough."""
    import ray.serve.llm.openai_api_models  # noqa: F401
    import vllm.exceptions  # noqa: F401

    _LOADED.set()


async def types_ready() -> None:
    """``load_types`` off the event loop, unless it has run to its end in this process (a module is in
    ``sys.modules`` from the start of its import, so that says nothing; the start's thread may be at
    it)."""
    if not _LOADED.is_set():
        await asyncio.to_thread(load_types)


def load_types_in_background() -> None:
    """Start ``load_types`` in a thread of its own: a server's first passthrough then finds them. A
    failure is logged here; the first passthrough tries again, and its error is a 500."""

    def load() -> None:
        try:
            load_types()
        except Exception:
            logger.exception("MAI ingress: vLLM's request types did not load; passthroughs will fail")

    threading.Thread(target=load, name="passthrough-types", daemon=True).start()


def chat_request(payload: dict[str, Any], model_id: str, priority: int = 0) -> Any:
    """ray.serve.llm's ``ChatCompletionRequest`` for ``model_id`` from a body ``passthrough_body`` has
    checked, at engine ``priority`` (lower first; the key's, as the cascade's calls run), a stream
    asking the engine for its usage with every chunk (``StreamMeter``: the bill, whether or not the
    client asked); a value it (or vLLM's own checks across fields) refuses is a 400 naming it."""
    from ray.serve.llm.openai_api_models import ChatCompletionRequest
    from vllm.exceptions import VLLMClientError

    server: dict[str, Any] = {"model": model_id, **({"priority": priority} if priority else {})}
    if payload.get("stream") is True:
        options = payload.get("stream_options")
        server["stream_options"] = {
            **(options if isinstance(options, dict) else {}),
            "include_usage": True,
            "continuous_usage_stats": True,
        }
    try:
        request = ChatCompletionRequest.model_validate({**payload, **server})
        # vLLM types some messages' content as an Iterable, which pydantic validates lazily: a
        # ValidatorIterator, unpicklable on the way to the replica. Validated here, as a list.
        messages: list[Any] = request.messages  # TypedDicts of vLLM's: plain dicts here
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if content is not None and not isinstance(content, str | list):
                message["content"] = list(content)
        return request
    except ValidationError as exc:
        message, param = describe_validation_error(exc)
        raise RequestError(message, param=param, code="invalid_request") from None
    except VLLMClientError as exc:  # vLLM's own checks across fields (stream_options without stream, ...)
        message = str(exc.args[0] if exc.args else exc)
        param = getattr(exc, "parameter", None)
        raise RequestError(message, param=param, code="invalid_request") from None


@dataclass(frozen=True)
class StreamUsage:
    """The usage a stream's client asked for: a last chunk with the totals, and totals in every chunk."""

    include: bool
    continuous: bool


class StreamMeter:
    """A stream's events as the client asked for them, and the engine's usage noted as they pass:
    ``chat_request`` asks the engine for its totals in every chunk, so that a stream is billed what it
    used whether it ends, fails or is left. Only events that carry usage are read (one JSON parse each,
    of the engine's own output); the last usage seen is told to ``used`` once, at the stream's end."""

    def __init__(self, asked: StreamUsage, used: Callable[[Mapping[str, Any] | None], None]):
        self.asked, self._used = asked, used
        self.usage: Mapping[str, Any] | None = None
        self._told = False

    def packet(self, packet: str) -> str:
        """``packet`` (one or more ``data: ...`` events) with the usage the client did not ask for
        taken out; empty when nothing is left of it."""
        if '"usage"' not in packet:
            return packet
        kept = []
        for event in packet.split("\n\n"):
            if not event:
                continue
            chunk = json.loads(event.removeprefix("data: ")) if event.startswith("data: {") else None
            if not isinstance(chunk, dict) or not isinstance(chunk.get("usage"), dict):
                kept.append(event)
                continue
            self.usage = chunk["usage"]
            if self.asked.continuous:
                kept.append(event)
            elif chunk.get("choices"):  # a token's chunk: without the running totals
                del chunk["usage"]
                kept.append(f"data: {json.dumps(chunk, separators=(',', ':'))}")
            elif self.asked.include:  # the totals' own chunk, at the end
                kept.append(event)
        return "".join(f"{event}\n\n" for event in kept)

    def end(self) -> None:
        if not self._told:
            self._told = True
            self._used(self.usage)


def usage_asked(payload: dict[str, Any]) -> StreamUsage:
    """What usage the client's stream asked for (``stream_options``), before ``chat_request`` asks the
    engine for all of it."""
    options = payload.get("stream_options")
    options = options if isinstance(options, dict) else {}
    return StreamUsage(options.get("include_usage") is True, options.get("continuous_usage_stats") is True)


async def forward(
    handle: Any,
    request: Any,
    model_id: str,
    *,
    reason: str | None = None,
    timeout_s: float | None = None,
    used: Callable[[Mapping[str, Any] | None], None] = lambda usage: None,
    asked: StreamUsage = StreamUsage(include=True, continuous=True),
) -> Forwarded:
    """Send ``request`` to the LLMServer behind ``handle``; its JSON reply (with a ``mai`` object naming
    ``reason`` when ``mai`` sent it there), or the engine's token stream as server-sent events. Raises
    the ``EngineError`` family for an engine error that arrives before any token, and a 504 when nothing
    arrives within ``timeout_s``; a stream that has not ended ``timeout_s`` after the request was sent
    ends with a timeout error event. ``used`` is told the engine's usage once (a reply's, or a stream's
    last when it ends, however it ends; None when the engine gave none); a stream's events carry only
    the usage ``asked`` for (``usage_asked``; default: all the engine sends)."""
    from ray.llm._internal.serve.core.ingress.utils import _peek_at_generator
    from ray.llm._internal.serve.core.protocol import RawRequestInfo
    from ray.serve.llm.openai_api_models import ErrorResponse

    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    headers = trace_headers()  # the engine's request spans join the passthrough's trace
    info = (RawRequestInfo(headers=headers),) if headers else ()
    with engine_call(model_id):
        response = handle.options(stream=True).chat.remote(request, *info)
        try:
            first, stream = await asyncio.wait_for(_peek_at_generator(response), timeout_s)
        except TimeoutError:
            response.cancel()
            raise RequestError(
                f"{model_id} sent nothing within the request timeout of {timeout_s:g} s",
                code="timeout",
                status=504,
            ) from None
    head = first[0] if isinstance(first, list) else first
    if isinstance(head, ErrorResponse):
        raise error_response_failure(reply_of(head)["error"], model_id)
    if not request.stream:
        extra = (
            {}
            if reason is None
            else {"mai": {"route": Route.PASSTHROUGH.value, "reason": reason, "model": model_id}}
        )
        body = head.model_dump(mode="json", exclude_none=True)
        used(body.get("usage"))
        return Forwarded(model_id, reason, body=body | extra)

    meter = StreamMeter(asked, used)
    events = EngineEvents(response, stream, model_id, timeout_s, deadline, meter)
    return Forwarded(model_id, reason, events=events)


class EngineEvents:
    """An engine's token stream as server-sent events, within the request's deadline (a stream that
    has not ended by then ends with a timeout error event). Closing it, whether at its end, when the
    client leaves or before it was ever read, aborts the engine's request: a class, not a generator,
    because a generator that never started runs no ``finally``."""

    def __init__(
        self,
        response: Any,
        stream: Any,
        model_id: str,
        timeout_s: float | None,
        deadline: float | None,
        meter: StreamMeter | None = None,
    ):
        from ray.llm._internal.serve.core.ingress.utils import _openai_json_wrapper

        self._response, self._packets = response, _openai_json_wrapper(stream)
        self._meter = meter or StreamMeter(StreamUsage(True, True), lambda usage: None)
        self._model_id, self._timeout_s, self._deadline = model_id, timeout_s, deadline
        self._tail: list[str] = []  # what is left to send once the stream has ended
        self._ended = False

    def __aiter__(self) -> EngineEvents:
        return self

    async def __anext__(self) -> str:
        if self._tail:
            return self._tail.pop(0)
        if self._ended:
            raise StopAsyncIteration
        try:
            packet = ""
            while not packet:  # a packet of nothing but usage the client did not ask for: the next
                left = None if self._deadline is None else self._deadline - asyncio.get_running_loop().time()
                packet = self._meter.packet(await asyncio.wait_for(anext(self._packets), left))
            return packet
        except TimeoutError:  # the whole stream has the request's deadline, not only its start
            error = RequestError(
                f"{self._model_id} did not finish within the request timeout of {self._timeout_s:g} s",
                code="timeout",
                status=504,
            )
            await self.aclose()
            self._tail = ["data: [DONE]\n\n"]
            return f"data: {json.dumps(error.body())}\n\n"
        except BaseException:  # its end, a client that left (cancelled), or a failure
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Abort the engine's request (nothing once it has ended); no more events but those left. The
        usage it reached is told (once)."""
        self._ended = True
        self._response.cancel()
        self._meter.end()
