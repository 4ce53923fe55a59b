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
from typing import Any

from pydantic import ValidationError

from deployments.plain_chat import reply_of

from ..clients.failures import engine_call, error_response_failure
from ..core.routes import Route
from .errors import RequestError, describe_validation_error
from .outcomes import Forwarded

logger = logging.getLogger("ray.serve")
_LOADED = threading.Event()


def load_types() -> None:
    """vLLM's request and reply types, which a passthrough is read and answered in: seconds, once per
    process. The cascade never needs them (``deployments/plain_chat.py``), so a replica loads them
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


def chat_request(payload: dict[str, Any], model_id: str) -> Any:
    """ray.serve.llm's ``ChatCompletionRequest`` for ``model_id`` from a body ``passthrough_body`` has
    checked; a value it (or vLLM's own checks across fields) refuses is a 400 naming it."""
    from ray.serve.llm.openai_api_models import ChatCompletionRequest
    from vllm.exceptions import VLLMClientError

    try:
        request = ChatCompletionRequest.model_validate({**payload, "model": model_id})
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


async def forward(
    handle: Any,
    request: Any,
    model_id: str,
    *,
    reason: str | None = None,
    timeout_s: float | None = None,
) -> Forwarded:
    """Send ``request`` to the LLMServer behind ``handle``; its JSON reply (with a ``mai`` object naming
    ``reason`` when ``mai`` sent it there), or the engine's token stream as server-sent events. Raises
    the ``EngineError`` family for an engine error that arrives before any token, and a 504 when nothing
    arrives within ``timeout_s``; a stream that has not ended ``timeout_s`` after the request was sent
    ends with a timeout error event."""
    from ray.llm._internal.serve.core.ingress.utils import _peek_at_generator
    from ray.serve.llm.openai_api_models import ErrorResponse

    loop = asyncio.get_running_loop()
    deadline = None if timeout_s is None else loop.time() + timeout_s
    with engine_call(model_id):
        response = handle.options(stream=True).chat.remote(request)
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
        return Forwarded(model_id, reason, body=head.model_dump(mode="json", exclude_none=True) | extra)

    return Forwarded(model_id, reason, events=EngineEvents(response, stream, model_id, timeout_s, deadline))


class EngineEvents:
    """An engine's token stream as server-sent events, within the request's deadline (a stream that
    has not ended by then ends with a timeout error event). Closing it, whether at its end, when the
    client leaves or before it was ever read, aborts the engine's request: a class, not a generator,
    because a generator that never started runs no ``finally``."""

    def __init__(
        self, response: Any, stream: Any, model_id: str, timeout_s: float | None, deadline: float | None
    ):
        from ray.llm._internal.serve.core.ingress.utils import _openai_json_wrapper

        self._response, self._packets = response, _openai_json_wrapper(stream)
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
        left = None if self._deadline is None else self._deadline - asyncio.get_running_loop().time()
        try:
            return await asyncio.wait_for(anext(self._packets), left)
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
        """Abort the engine's request (nothing once it has ended); no more events but those left."""
        self._ended = True
        self._response.cancel()
