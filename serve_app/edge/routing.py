"""Where a chat request for ``mai`` goes: the cascade when MAI fits it, else the large model unchanged.

MAI fits a request that is
- one user turn (system or developer messages before it are allowed, no assistant or tool turns),
- with exactly one image,
- whose question wants a short answer: its text does not open with, or ask for, open generation
  (describe, explain, write, list, summarize, tell, generate, compose, create, caption, translate,
  compare, why ...),
- and carries only parameters the cascade honours (``HONOURED``; ``n`` only at 1).
``max_tokens`` is a cap on every stage's budget, never a signal. A server setting (``mai_route``) and a
request's ``mai.route`` force either way. A request for a configured model id goes to that model
unchanged. ``route`` makes that decision, once per chat request, before any job is built. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..config import AppConfig
from .errors import RequestError, describe_validation_error
from .protocol import MODELS, ChatRequest, MAIExtra


@dataclass(frozen=True)
class Passthrough:
    """The request goes to the model ``model_id`` unchanged (``payload``, without the ``mai`` field)."""

    model_id: str
    payload: dict[str, Any]
    reason: str | None = None  # why ``mai`` sent it there; None when the client named the model


@dataclass(frozen=True)
class ToCascade:
    """The request runs a cascade policy: build its job from the validated ``request``."""

    request: ChatRequest


def route(payload: Any, config: AppConfig) -> ToCascade | Passthrough:
    """Where a chat request goes: a configured model id to that model; a cascade policy to the cascade;
    ``mai`` to the cascade when MAI fits it, else (or when forced) to the large model. 4xx for a body
    that is no chat request or names no model served here."""
    if not isinstance(payload, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    unchanged = {key: value for key, value in payload.items() if key != "mai"}
    model_ids = (config.small.model_id, config.large.model_id)
    if payload.get("model") in model_ids:
        return Passthrough(payload["model"], unchanged)
    request = validated(ChatRequest, payload)
    if request.model not in MODELS:
        raise RequestError(
            f"unknown model {request.model!r}; choose one of {', '.join((*MODELS, *model_ids))}",
            param="model",
            code="model_not_found",
            status=404,
        )
    if request.model != "mai":
        return ToCascade(request)
    extra = request.mai or MAIExtra()
    forced = extra.route or config.mai_route
    if forced == "passthrough":
        by = "the request's mai.route" if extra.route else "the server's mai_route"
        return Passthrough(config.large.model_id, unchanged, f"{by} is passthrough")
    reason = passthrough_reason(request) if forced == "auto" else None
    if reason is not None:
        return Passthrough(config.large.model_id, unchanged, reason)
    return ToCascade(request)


def validated(model: type[BaseModel], payload: Any) -> Any:
    """``payload`` as ``model``, or a 400 naming the first problem."""
    if not isinstance(payload, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        message, param = describe_validation_error(exc)
        raise RequestError(message, param=param, code="invalid_request") from None


# The chat request fields a cascade policy honours (docs/api.md, "Parameters").
HONOURED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "mai",
        "user",
        "n",
        "temperature",
        "top_p",
        "seed",
        "logprobs",
        "top_logprobs",
    }
)
# Honoured only at these values (the cascade answers with one choice).
HONOURED_VALUES: Mapping[str, Any] = {"n": 1}
_OPEN_GENERATION = re.compile(
    r"^\s*(?:please\s+|can you\s+|could you\s+)?(?:describe|explain|write|list|summari[sz]e|tell\b|generate"
    r"|compose|create|caption|translate|compare|elaborate|discuss|narrate|draft|why\b|what\s+happens)",
    re.IGNORECASE,
)


def unhonoured_parameters(request: ChatRequest) -> list[str]:
    """The request's parameters a cascade policy would not honour, by name."""
    names = []
    for name, value in request.model_dump(exclude_unset=True, exclude_none=True).items():
        if name not in HONOURED or (name in HONOURED_VALUES and value != HONOURED_VALUES[name]):
            names.append(name)
    return sorted(names)


def wants_open_answer(text: str) -> bool:
    """An instruction for open generation (describe, explain, write, list ...), not a short answer."""
    return any(
        _OPEN_GENERATION.match(sentence) for sentence in re.split(r"(?<=[.!?])\s+|\n+", text) if sentence
    )


def passthrough_reason(request: ChatRequest) -> str | None:
    """Why MAI does not fit ``request`` (it then goes to the large model unchanged), or None when it fits."""
    turns = [message.role for message in request.messages if message.role not in ("system", "developer")]
    if turns != ["user"]:
        return "a conversation of several turns" if len(turns) > 1 else "no single user turn"
    [user] = [message for message in request.messages if message.role == "user"]
    parts = [] if isinstance(user.content, str) or user.content is None else user.content
    images = sum(part.type == "image_url" for part in parts)
    if images != 1:
        return "no image" if images == 0 else f"{images} images"
    text = (
        user.content
        if isinstance(user.content, str)
        else " ".join(p.text or "" for p in parts if p.type == "text")
    )
    if wants_open_answer(text):
        return "an instruction for open generation"
    unhonoured = unhonoured_parameters(request)
    if unhonoured:
        return f"parameters the cascade does not honour: {', '.join(unhonoured)}"
    return None
