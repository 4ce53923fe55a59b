"""The models themselves, through the ingress: an OpenAI chat request for a configured model id goes to
that model's LLMServer unchanged (ray.serve.llm's request type and validation, its token stream, usage,
logprobs, n, tools, response_format, vLLM's extra sampling fields), behind the ingress's API keys, body
limit, image checks and metrics. An engine's failures are sorted as the cascade's are
(``clients.failures``): its 4xx reaches the client as that 4xx, anything else as the model unavailable.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from ..clients.failures import engine_call, error_response_failure
from ..config import Limits
from .errors import RequestError, describe_validation_error
from .images import check_image_under, is_remote

ImageFetcher = Callable[[str, str], Awaitable[str]]  # (remote URL, param) -> checked data URL


async def checked_images(payload: dict[str, Any], limits: Limits, fetch: ImageFetcher) -> dict[str, Any]:
    """``payload`` with every image URL of every message checked like the cascade's image (the format,
    byte and pixel limits; remote URLs only from allowed hosts, downloaded and checked): the same 4xx
    for the same bad image. A checked remote image is sent on as a data URL."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return payload
    count = 0
    checked_messages = []
    for m, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            checked_messages.append(message)
            continue
        parts = []
        for p, part in enumerate(content):
            image = (
                part.get("image_url") if isinstance(part, dict) and part.get("type") == "image_url" else None
            )
            url = image.get("url") if isinstance(image, dict) else image if isinstance(image, str) else None
            if url is None:
                parts.append(part)
                continue
            count += 1
            param = f"messages.{m}.content.{p}.image_url"
            allowed = limits.max_passthrough_images or 1  # AppConfig sets it from the engines' limit
            if count > allowed:
                raise RequestError(
                    f"the request has more than {allowed} image{'s' if allowed > 1 else ''}",
                    param="messages",
                    code="too_many_images",
                )
            if is_remote(url.strip()) and limits.allow_remote_images:
                data_url = await fetch(url.strip(), param)
            else:
                data_url = check_image_under(limits, url, param=param)
            parts.append(
                {**part, "image_url": {**(image if isinstance(image, dict) else {}), "url": data_url}}
            )
        checked_messages.append({**message, "content": parts})
    return {**payload, "messages": checked_messages}


def check_has_text(payload: dict[str, Any]) -> None:
    """A request whose messages carry no text at all is refused: the models' request router
    (ray.serve.llm's PrefixCacheAffinityRouter) matches a request by its text and cannot route one
    without any (it fails on it and the request would never be answered)."""
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and content:
            return
        if isinstance(content, list) and any(
            isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"] for part in content
        ):
            return
    raise RequestError(
        "the messages carry no text; send at least one text part with the request",
        param="messages",
        code="missing_text",
    )


def chat_request(payload: dict[str, Any], model_id: str) -> Any:
    """ray.serve.llm's ``ChatCompletionRequest`` for ``model_id``; a field it does not know, or one it (or
    vLLM's own checks across fields) refuses, is a 400 naming it."""
    from ray.serve.llm.openai_api_models import ChatCompletionRequest
    from vllm.exceptions import VLLMClientError

    # vLLM's request type logs a field it does not know and ignores it: refuse it instead.
    known = {
        alias for name, field in ChatCompletionRequest.model_fields.items() for alias in (name, field.alias)
    }
    unknown = sorted(key for key in payload if key not in known)
    if unknown:
        raise RequestError(
            f"unknown field {unknown[0]!r}: {model_id} does not take it",
            param=unknown[0],
            code="unsupported_parameter",
        )
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
    headers: dict[str, str],
    *,
    extra: dict[str, Any] | None = None,
    timeout_s: float | None = None,
) -> JSONResponse | StreamingResponse:
    """Send ``request`` to the LLMServer behind ``handle``; a JSON reply (with ``extra`` added), or the
    engine's token stream as server-sent events. Raises the ``EngineError`` family for an engine error
    that arrives before any token, and a 504 when nothing arrives within ``timeout_s``."""
    from ray.llm._internal.serve.core.ingress.utils import _openai_json_wrapper, _peek_at_generator
    from ray.serve.llm.openai_api_models import ErrorResponse

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
        raise error_response_failure(head, model_id)
    if not request.stream:
        return JSONResponse(head.model_dump(mode="json", exclude_none=True) | (extra or {}), headers=headers)

    async def events() -> AsyncIterator[str]:
        try:
            async for packet in _openai_json_wrapper(stream):
                yield packet
        finally:  # a client that leaves mid-stream: abort the engine's request, not just our iteration
            response.cancel()

    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)
