"""A request for a model id, checked once before it is forwarded: an allowlist, not a denylist.

- **Request fields**: OpenAI's chat fields and a few of vLLM's sampling fields (``CLIENT_FIELDS``).
  A field only the server sets (``priority``, the engine's ``request_id``, templates, processor and
  transfer settings, ...) is a 400 saying so; any other unknown field a 400 naming it.
- **Bounds**: ``n`` up to ``limits.max_passthrough_n``; ``max_tokens``, ``max_completion_tokens`` and
  ``min_tokens`` up to ``limits.max_passthrough_tokens``, and ``n`` times the tokens per choice up to
  ``limits.max_passthrough_decode_tokens``; a request that sets no budget gets the largest both allow
  (vLLM would otherwise fill the context).
- **Grammars**: what ``structured_outputs``, ``response_format`` and ``tools`` ask the engines' grammar
  compiler, within ``limits.grammar`` (``grammar_limits.py``).
- **Messages**: their fields allowlisted; their content a string or a list of parts, each part text
  or an image in any spelling vLLM's chat parser accepts (typed ``image_url`` with an object or a
  string, typeless ``{"image_url": ...}``, ``input_image``). Every image is checked like the
  cascade's (format, bytes, pixels, count; a remote URL only from an allowed host, downloaded here)
  and sent on in one spelling, as a data URL: the engines fetch nothing a client names. Any other
  part (audio, video, embeddings, ``uuid`` references, ...) is a 400 naming it.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

from ..config import Limits
from .body import check_structure, check_text, outside_strings
from .errors import RequestError
from .grammar_limits import check_grammar_work
from .images import ImageFetcher, check_image_under, is_remote

CLIENT_FIELDS = frozenset(
    {
        # OpenAI's chat completion request
        "model",
        "messages",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "max_tokens",
        "max_completion_tokens",
        "n",
        "response_format",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "reasoning_effort",
        # vLLM's sampling fields that change only this request's own tokens
        "top_k",
        "min_p",
        "min_tokens",
        "ignore_eos",  # decodes to max_tokens, which is bounded like min_tokens
        "repetition_penalty",
        "stop_token_ids",
        "include_stop_str_in_output",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "include_reasoning",
        "echo",
        "structured_outputs",  # vLLM's grammars, as response_format's
    }
)
# Fields vLLM takes that steer the engine or the server's own bookkeeping: the server's to set. Any
# other field outside ``CLIENT_FIELDS`` is refused as not accepted.
SERVER_FIELDS = frozenset(
    {
        "priority",
        "request_id",
        "session_id",
        "cache_salt",
        "chat_template",
        "documents",
        "add_generation_prompt",
        "continue_final_message",
        "add_special_tokens",
        "mm_processor_kwargs",
        "media_io_kwargs",
        "mm_payload",
        "kv_transfer_params",
        "ec_transfer_params",
        "vllm_xargs",
        "truncate_prompt_tokens",
        "truncation_side",
        "stream_interval",
    }
)
MESSAGE_FIELDS = frozenset(
    {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning", "reasoning_content", "refusal"}
)
# What chat_template_kwargs may switch (a thinking model's mode); the template itself is the server's.
TEMPLATE_SWITCHES = ("enable_thinking", "thinking")
# OpenAI's image details; the engines read every image at the server's budget (vLLM takes auto alone
# and ignores the rest), so the part is sent on without it.
DETAILS = ("auto", "low", "high")
TOKEN_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "min_tokens")
# Lists vLLM walks for every generated token (stop strings, stop token ids) or holds per request.
LIST_BOUNDS = {"stop": 16, "stop_token_ids": 64, "logit_bias": 300}


async def checked_body(payload: dict[str, Any], limits: Limits, fetch: ImageFetcher) -> dict[str, Any]:
    """``payload`` as it may reach a model: every field and part allowed and within bounds, every image
    checked and sent as a data URL; a 4xx naming the first thing that is not."""
    check_fields(payload)
    bounded = bounded_sampling(payload, limits)
    check_grammar_work(payload, limits)
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return bounded  # the request type's own validation names it
    check_has_text(messages)  # before any image is downloaded
    images = _ImageCount(limits.max_passthrough_images or 1)
    checked = [
        await _checked_message(message, m, limits, fetch, images) for m, message in enumerate(messages)
    ]
    return {**bounded, "messages": checked}


def check_fields(payload: dict[str, Any]) -> None:
    for key in payload:
        if key == "chat_template_kwargs" and isinstance(payload[key], dict):
            _check_keys(
                payload[key],
                TEMPLATE_SWITCHES,
                key,
                f"{key} (which takes {', '.join(TEMPLATE_SWITCHES)})",
                "unsupported_parameter",
            )
            continue
        if key in CLIENT_FIELDS:
            continue
        if key in SERVER_FIELDS:
            raise RequestError(
                f"{key} is set by the server, not by a request", param=key, code="unsupported_parameter"
            )
        raise RequestError(
            f"unknown field {key!r}, or one this server does not accept from a request (docs/api.md lists "
            "those it does)",
            param=key,
            code="unsupported_parameter",
        )


def bounded_sampling(payload: dict[str, Any], limits: Limits) -> dict[str, Any]:
    """``payload`` with its decode work bounded: ``n`` and the token counts JSON integers within the
    configured bounds, lists vLLM checks per generated token within ``LIST_BOUNDS`` (a 400 past one),
    and the reply's budget set to the bound when it sets none."""
    n = _count(payload, "n")
    if n is not None and n > limits.max_passthrough_n:
        raise RequestError(
            f"n is {n}; this server answers at most {limits.max_passthrough_n} choices per request",
            param="n",
            code="invalid_request",
        )
    for name in TOKEN_LIMIT_FIELDS:
        value = _count(payload, name)
        if value is not None and value > limits.max_passthrough_tokens:
            raise RequestError(
                f"{name} is {value}; this server generates at most {limits.max_passthrough_tokens} tokens "
                "per choice",
                param=name,
                code="invalid_max_tokens",
            )
    for name, bound in LIST_BOUNDS.items():
        value = payload.get(name)
        if isinstance(value, list | dict) and len(value) > bound:
            raise RequestError(
                f"{name} has {len(value)} entries; this server takes at most {bound}",
                param=name,
                code="invalid_request",
            )
    choices, decode = n or 1, limits.max_passthrough_decode_tokens
    asked = [_count(payload, name) for name in ("max_completion_tokens", "max_tokens")]
    per_choice = next((value for value in asked if value is not None), None)
    if per_choice is None:  # the reply's budget: the bound per choice, within the bound of all choices
        return {**payload, "max_tokens": max(1, min(limits.max_passthrough_tokens, decode // choices))}
    if choices * per_choice > decode:
        name = "max_completion_tokens" if asked[0] is not None else "max_tokens"
        raise RequestError(
            f"n × {name} is {choices} × {per_choice} = {choices * per_choice} tokens; this server decodes "
            f"at most {decode} tokens per request",
            param=name,
            code="invalid_max_tokens",
        )
    return payload


def _count(payload: dict[str, Any], name: str) -> int | None:
    """``payload[name]`` when it is a JSON integer; a 400 for any other value but null (vLLM's request
    type would turn "64" or 64.0 into 64, past a check of integers only)."""
    value = payload.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(
            f"{name} must be an integer, got {value!r:.40}", param=name, code="invalid_request"
        )
    return value


def check_has_text(messages: list[Any]) -> None:
    """A request whose messages carry no text at all is refused: the models' request router
    (ray.serve.llm's PrefixCacheAffinityRouter) matches a request by its text and cannot route one
    without any (it fails on it and the request would never be answered)."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and content:
            return
        if isinstance(content, list) and any(
            (isinstance(part, str) and part)
            or (isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"])
            for part in content
        ):
            return
    raise RequestError(
        "the messages carry no text; send at least one text part with the request",
        param="messages",
        code="missing_text",
    )


class _ImageCount:
    def __init__(self, allowed: int):
        self.allowed, self.seen = allowed, 0

    def add(self) -> None:
        self.seen += 1
        if self.seen > self.allowed:
            plural = "s" if self.allowed > 1 else ""
            raise RequestError(
                f"the request has more than {self.allowed} image{plural}",
                param="messages",
                code="too_many_images",
            )


async def _checked_message(
    message: Any, m: int, limits: Limits, fetch: ImageFetcher, images: _ImageCount
) -> Any:
    if not isinstance(message, dict):
        return message  # the request type's own validation names it
    where = f"a message (whose fields are {', '.join(sorted(MESSAGE_FIELDS))})"
    _check_keys(message, MESSAGE_FIELDS, f"messages.{m}", where, "unsupported_parameter")
    calls = message.get("tool_calls")
    for c, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") if isinstance(call, dict) else None
        arguments = function.get("arguments") if isinstance(function, dict) else None
        if isinstance(arguments, str):  # JSON the engine parses again: the body's bounds apply to it
            check_structure(outside_strings(arguments.encode("utf-8", "surrogatepass")), limits)
            if "\\u" in arguments:  # an escape the engine's parse may make a lone surrogate of
                _check_arguments_text(arguments, f"messages.{m}.tool_calls.{c}.function.arguments")
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts = [
        await _checked_part(part, f"messages.{m}.content.{p}", limits, fetch, images)
        for p, part in enumerate(content)
    ]
    return {**message, "content": parts}


def _check_arguments_text(arguments: str, at: str) -> None:
    """A 400 naming ``at`` when the JSON ``arguments`` hold a lone surrogate once parsed (vLLM parses
    a tool call's arguments and a chat template renders them into the prompt, which the tokenizer
    cannot read); arguments that are no JSON the engine keeps as the string they are."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return
    check_text(parsed, at=at)


async def _checked_part(
    part: Any, param: str, limits: Limits, fetch: ImageFetcher, images: _ImageCount
) -> str | dict[str, Any]:
    """A content part as it is forwarded: text as sent (a plain string is text to vLLM too), an image
    in one spelling with a checked data URL; a 400 naming anything else."""
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise RequestError("a content part must be an object", param=param, code="invalid_content_part")
    kind = part.get("type")
    if kind == "text":
        _check_keys(part, {"type", "text"}, param, "a text part", "invalid_content_part")
        if not isinstance(part.get("text"), str):
            raise RequestError(
                "a text part needs text, a string", param=f"{param}.text", code="invalid_content_part"
            )
        return part
    url = _image_url(part, kind, param)
    if url is None:
        shown = (
            f"of type {kind!r}"
            if isinstance(kind, str)
            else f"with fields {', '.join(map(repr, sorted(part)))}"
        )
        raise RequestError(
            f"content parts {shown} are not accepted; send text parts and image_url parts",
            param=param,
            code="invalid_content_part",
        )
    images.add()
    param = f"{param}.image_url"
    if is_remote(url.strip()) and limits.allow_remote_images:
        data_url = await fetch(url.strip(), param)
    else:
        data_url = check_image_under(limits, url, param=param)
    return {"type": "image_url", "image_url": {"url": data_url}}


def _image_url(part: dict[str, Any], kind: Any, param: str) -> str | None:
    """The URL of an image part in any spelling vLLM accepts, or None when ``part`` is no image part."""
    if kind == "image_url" or (kind is None and set(part) == {"image_url"}):
        allowed = {"type", "image_url"}
    elif kind == "input_image":
        allowed = {"type", "image_url", "detail"}
    else:
        return None
    _check_keys(part, allowed, param, "an image part", "invalid_content_part")
    image = part.get("image_url")
    detail = part.get("detail", "auto")
    if isinstance(image, dict):
        _check_keys(image, {"url", "detail"}, f"{param}.image_url", "image_url", "invalid_content_part")
        detail = image.get("detail", detail)
        image = image.get("url")
    if not isinstance(image, str):
        raise RequestError("image_url needs a url string", param=f"{param}.image_url", code="invalid_image")
    if detail not in DETAILS:
        raise RequestError(
            f"image detail {detail!r} is not one of {', '.join(DETAILS)}",
            param=f"{param}.image_url.detail",
            code="invalid_content_part",
        )
    return image


def _check_keys(value: dict[str, Any], allowed: Collection[str], param: str, where: str, code: str) -> None:
    """A 400 naming the first key of ``value`` that ``allowed`` does not hold."""
    extra = sorted(key for key in value if key not in allowed)
    if extra:
        raise RequestError(f"unknown field {extra[0]!r} in {where}", param=f"{param}.{extra[0]}", code=code)
