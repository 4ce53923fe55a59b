"""Where a chat request for ``mai`` goes: the cascade when MAI fits it, else the large model unchanged.

MAI fits a request that is
- one user turn (system or developer messages before it are allowed, no assistant or tool turns),
- with exactly one image,
- whose question wants a short answer: the question reader (``core/question_parsing.py``,
  ``asks_open_generation``) reads no sentence of it as asking for open generation,
- and carries only parameters the cascade honours (``HONOURED``; ``n`` only at 1), in the shapes the
  cascade reads (``ChatRequest``).
A body is judged by the schema of where it goes, once: ``ChatRequest`` for the cascade, the model's
own (ray.serve.llm's, after ``passthrough_body``) for a model. For ``mai`` the ``mai`` object is read
first (``MAIFields``, a 400 naming what is wrong in it); a body the cascade's schema does not read is
then no fit, not an error: the large model's schema judges it.
``max_tokens`` is a cap on every stage's budget, never a signal. A server setting (``mai_destination``)
and a request's ``mai.destination`` force either way (``mai.route``, its old name, is read as it for one
release, and said in the reply's ``Warning``: ``warnings``, read here once and carried with the request).
A request for a configured model id goes to that model unchanged. ``destination`` settles that, once
per chat request, before any job is built: the one gate (``misfit``) reads the request's user turn once
(``UserTurn``), and the job builder trusts what it passes. A request for another cascade policy
(``mai-small``, ...) that does not fit is a 4xx naming why, where ``mai`` would pass it through; an
instruction for open generation is no error there (the client chose the policy). Pure functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..config import AppConfig
from ..core.question_parsing import asks_open_generation
from .errors import RequestError, describe_validation_error, warned
from .protocol import POLICY_OF_MODEL, ChatRequest, ContentPart, MAIExtra, MAIFields, Warnings


@dataclass(frozen=True)
class Passthrough:
    """The request goes to the model ``model_id`` unchanged (``payload``, without the ``mai`` field)."""

    model_id: str
    payload: dict[str, Any]
    reason: str | None = None  # why ``mai`` sent it there; None when the client named the model
    warnings: Warnings = ()  # what the request sent under an old name (the reply's ``Warning``)


@dataclass(frozen=True)
class UserTurn:
    """The one user turn a cascade request asks, read once: the system and developer messages' text
    before it, its text parts and its images."""

    system: tuple[str, ...]
    texts: tuple[str, ...]
    images: tuple[ContentPart, ...]

    @property
    def text(self) -> str:
        """The turn's text parts, one a line: the question as the cascade reads it."""
        return "\n".join(self.texts)


@dataclass(frozen=True)
class ToCascade:
    """The request runs a cascade policy: build its job from the validated ``request`` and its one
    user turn."""

    request: ChatRequest
    turn: UserTurn
    warnings: Warnings = ()  # what the request sent under an old name (the reply's ``Warning``)


@dataclass(frozen=True)
class Misfit:
    """Why MAI does not fit a request: ``reason``, which ``mai`` passes it through for, and ``error``,
    what a request for another cascade policy gets (None: it runs all the same)."""

    reason: str
    error: RequestError | None


def destination(payload: Any, config: AppConfig) -> ToCascade | Passthrough:
    """Where a chat request goes: a configured model id to that model; a cascade policy to the cascade;
    ``mai`` to the cascade when MAI fits it, else (or when forced) to the large model. 4xx for a body
    that is no chat request or names no model served here."""
    if not isinstance(payload, dict):
        raise RequestError("the request body must be a JSON object", code="invalid_json")
    unchanged = {key: value for key, value in payload.items() if key != "mai"}
    model_ids = (config.small.model_id, config.large.model_id)
    if payload.get("model") in model_ids:
        return Passthrough(payload["model"], unchanged)
    if payload.get("model") == "mai":
        extra = validated(MAIFields, payload).mai or MAIExtra()
        warnings = one_destination(extra)
        forced = extra.destination or config.mai_destination
        if forced == "passthrough":
            by = "the request's mai.destination" if extra.destination else "the server's mai_destination"
            return Passthrough(config.large.model_id, unchanged, f"{by} is passthrough", warnings)
        try:
            with warned(warnings):
                request = validated(ChatRequest, payload)
        except RequestError as error:
            if forced == "cascade":
                raise
            # Not the cascade's to read, so not the cascade's to refuse: the large model's schema
            # judges the body (a 400 from it if it refuses it too).
            # Named by the field's path in the cascade's schema, never by the client's text (a header).
            reason = "a body the cascade does not read" + (f" (at {error.param})" if error.param else "")
            return Passthrough(config.large.model_id, unchanged, reason, warnings)
    else:
        request = validated(ChatRequest, payload)
        warnings = one_destination(request.mai or MAIExtra())
        forced = "cascade"
    with warned(warnings):
        return _to_cascade(request, forced, unchanged, warnings, config)


def one_destination(extra: MAIExtra) -> Warnings:
    """The ``mai`` object's warnings, once it names one destination: ``mai.route`` (the old name) and
    ``mai.destination`` differing are a 400 naming both."""
    if extra.route is not None and extra.destination != extra.route:
        raise RequestError(
            f"mai.route ({extra.route!r}) and mai.destination ({extra.destination!r}) differ: send "
            "mai.destination alone (mai.route is its old name)",
            param="mai.route",
            code="invalid_request",
        )
    return extra.warnings


def _to_cascade(
    request: ChatRequest, forced: str, unchanged: dict[str, Any], warnings: Warnings, config: AppConfig
) -> ToCascade | Passthrough:
    """A request the cascade's schema read: to the cascade, or for ``mai`` (``forced`` auto) to the
    large model when MAI does not fit it."""
    model_ids = (config.small.model_id, config.large.model_id)
    if request.model not in POLICY_OF_MODEL:
        raise RequestError(
            f"unknown model {request.model!r}; choose one of {', '.join((*POLICY_OF_MODEL, *model_ids))}",
            param="model",
            code="model_not_found",
            status=404,
        )
    turn = user_turn(request)
    fit = misfit(request, turn, config)
    if fit is not None and forced == "auto":
        return Passthrough(config.large.model_id, unchanged, fit.reason, warnings)
    if fit is not None and fit.error is not None:
        raise fit.error
    assert turn is not None, "misfit answers an error for a request without a user turn"
    return ToCascade(request, turn, warnings)


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


def unhonoured_parameters(request: ChatRequest) -> list[str]:
    """The request's parameters a cascade policy would not honour, by name."""
    names = []
    for name, value in request.model_dump(exclude_unset=True, exclude_none=True).items():
        if name not in HONOURED or (name in HONOURED_VALUES and value != HONOURED_VALUES[name]):
            names.append(name)
    return sorted(names)


def user_turn(request: ChatRequest) -> UserTurn | None:
    """The request's user turn, read once (the last user message; None when there is none)."""
    users = [message for message in request.messages if message.role == "user"]
    if not users:
        return None
    system = tuple(_text_of(m.content) for m in request.messages if m.role in ("system", "developer"))
    content = users[-1].content
    parts = [ContentPart(type="text", text=content)] if isinstance(content, str) else list(content or [])
    texts = tuple(part.text for part in parts if part.type == "text" and part.text)
    images = tuple(part for part in parts if part.type == "image_url")
    return UserTurn(system, texts, images)


def _text_of(content: str | list[ContentPart] | None) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content or [] if part.type == "text" and part.text)


def misfit(request: ChatRequest, turn: UserTurn | None, config: AppConfig) -> Misfit | None:
    """Why MAI does not fit ``request`` (``turn``: its user turn), or None when it fits: the one check,
    for ``mai`` (which then passes the request to the large model) and every other cascade policy
    (which answers the error)."""
    large = config.large.model_id
    unhonoured = unhonoured_parameters(request)
    if unhonoured:
        return Misfit(
            f"parameters the cascade does not honour: {', '.join(unhonoured)}",
            RequestError(
                f"{unhonoured[0]} is not honoured by the cascade policy {request.model!r}; send the request "
                f"to a model itself (model {large!r}) or drop it",
                param=unhonoured[0],
                code="unsupported_parameter",
            ),
        )
    if turn is None:
        return Misfit(
            "no single user turn",
            RequestError(
                "the messages contain no user message", param="messages", code="missing_user_message"
            ),
        )
    turns = [message.role for message in request.messages if message.role not in ("system", "developer")]
    if len(turns) > 1:
        return Misfit(
            "a conversation of several turns",
            RequestError(
                f"the cascade policy {request.model!r} answers one user turn, not a conversation of "
                f"{len(turns)} turns; send it to a model itself (model {large!r})",
                param="messages",
                code="unsupported_conversation",
            ),
        )
    images, reads = len(turn.images), config.limits.max_images
    if images > reads:  # every cascade policy asks about one image; `mai` passes more through
        too_many = RequestError(
            f"the message has {images} images; the cascade policy {request.model!r} reads {reads} image"
            f"{'s' if reads > 1 else ''} (limits.max_images): send it to a model itself (model {large!r})",
            param="messages",
            code="too_many_images",
        )
        return Misfit(f"{images} images", too_many)
    if images == 0 or turn.images[0].image_url is None:
        return Misfit(
            "no image",
            RequestError(
                "the user message has no image; add an image_url content part with a data URL",
                param="messages",
                code="missing_image",
            ),
        )
    if asks_open_generation(turn.text):
        return Misfit("an instruction for open generation", None)
    return None
