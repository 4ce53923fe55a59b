"""Where a chat request for ``mai`` goes: the cascade when MAI fits it, else the large model unchanged.

MAI fits a request that is
- a conversation whose last turn is the user's question: system or developer messages (text only),
  then user and assistant turns alternating, from a user turn to the question's; no tool turns, no
  image in an assistant turn, at most ``limits.max_context_turns`` turns before the question and,
  with them, at most ``limits.max_prompt_bytes`` of text (every stage reads the earlier turns as
  context: ``core/prompts.py``),
- with one to ``limits.max_images`` images in all, in the user turns (a follow-up question may have
  none of its own),
- whose question wants a short answer: the question reader (``core/question_parsing.py``,
  ``asks_open_generation``) reads no sentence of it as asking for open generation,
- and carries only parameters the cascade honours (``HONOURED``; ``n`` only at 1), in the shapes the
  cascade reads (``ChatRequest``).
A body is judged by the schema of where it goes, once (``ChatRequest`` for the cascade, the model's
own for a model); for ``mai`` a body the cascade's schema does not read is no fit, not an error.
``max_tokens`` caps every stage's budget. ``mai_destination`` and a request's ``mai.destination`` force
either way (``mai.route``, its old name, is read for one release, with a ``Warning``). A configured
model id goes to that model unchanged. ``destination`` settles it once per chat request, before any
job is built: ``misfit`` reads the user turn once (``UserTurn``) and the job builder trusts it. Another
cascade policy (``mai-small``, ...) answers a 4xx naming why where ``mai`` would pass the request
through; open generation is no error there (the client chose the policy). Pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ValidationError

from ..config import AppConfig
from ..core.prompts import Turn
from ..core.question_parsing import asks_open_generation
from .errors import RequestError, describe_validation_error, warned
from .protocol import (
    POLICY_OF_MODEL,
    ChatRequest,
    ContentPart,
    MAIExtra,
    MAIFields,
    Warnings,
    unhonoured_causes,
    unhonoured_parameters,
)


@dataclass(frozen=True)
class Passthrough:
    """The request goes to the model ``model_id`` unchanged (``payload``, without the ``mai`` field)."""

    model_id: str
    payload: dict[str, Any]
    reason: str | None = None  # why ``mai`` sent it there; None when the client named the model
    warnings: Warnings = ()  # what the request sent under an old name (the reply's ``Warning``)
    # ``reason`` as the counts name it (``Misfit.causes``); () when the client named the model.
    causes: tuple[str, ...] = ()


@dataclass(frozen=True)
class UserTurn:
    """The user turn a cascade request asks, read once: the system and developer messages' text, the
    conversation before the turn (``context``: its images as the client sent them, unchecked), the
    turn's text parts and its images."""

    system: tuple[str, ...]
    texts: tuple[str, ...]
    images: tuple[ContentPart, ...]
    context: tuple[Turn, ...] = ()

    @property
    def text(self) -> str:
        """The turn's text parts, one a line: the question as the cascade reads it."""
        return "\n".join(self.texts)

    @property
    def image_count(self) -> int:
        return len(self.images) + sum(len(turn.images) for turn in self.context)

    @cached_property
    def prompt_bytes(self) -> int:
        """The bytes of text every stage's prompt carries from the client: system messages, earlier
        turns (each with TURN_MARKUP_BYTES of chat markup) and the question, counted once."""
        texts = (*self.system, *(turn.text for turn in self.context), self.text.strip())
        return sum(len(text.encode()) for text in texts) + TURN_MARKUP_BYTES * len(self.context)

    @property
    def shape(self) -> str:
        """What the cascade serves, as the counts name it: a follow-up, several images, or one image."""
        return "follow_up" if self.context else "images" if self.image_count > 1 else "one_image"


@dataclass(frozen=True)
class ToCascade:
    """The request runs a cascade policy: its job is built from the validated ``request`` and ``turn``."""

    request: ChatRequest
    turn: UserTurn
    warnings: Warnings = ()  # what the request sent under an old name (the reply's ``Warning``)


@dataclass(frozen=True)
class Misfit:
    """Why MAI does not fit a request: ``reason``, which ``mai`` passes it through for, and ``error``,
    what a request for another cascade policy gets (None: it runs all the same). ``causes``: the
    reason as ``/v1/mai/stats`` and Prometheus count it, from a fixed set of names
    (``unhonoured:<parameter>`` once per parameter)."""

    reason: str
    error: RequestError | None
    causes: tuple[str, ...] = ()


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
            return Passthrough(
                config.large.model_id, unchanged, f"{by} is passthrough", warnings, ("forced",)
            )
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
            return Passthrough(config.large.model_id, unchanged, reason, warnings, ("unread_body",))
    else:
        request = validated(ChatRequest, payload)
        warnings = one_destination(request.mai or MAIExtra())
        forced = "cascade"
    with warned(warnings):
        return _to_cascade(request, forced, unchanged, warnings, config)


def destination_reasons(routed: ToCascade | Passthrough) -> tuple[str, tuple[str, ...]]:
    """Where a routed request went and why, as ``/v1/mai/stats`` and Prometheus count it: the cascade
    by what it serves (``UserTurn.shape``), a passthrough by its causes (``named_model`` when the
    client named the model)."""
    if isinstance(routed, ToCascade):
        return "cascade", (routed.turn.shape,)
    return "passthrough", routed.causes or ("named_model",)


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
        return Passthrough(config.large.model_id, unchanged, fit.reason, warnings, fit.causes)
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


SYSTEM_ROLES = ("system", "developer")
# Bytes of chat markup counted for each earlier turn (its role header and end marker), beside its text.
TURN_MARKUP_BYTES = 16


def user_turn(request: ChatRequest) -> UserTurn | None:
    """The request's last user turn, read once, with the conversation before it (None when there is
    no user turn). Images are the parts the client sent, unchecked (``jobs`` checks each)."""
    last = max((i for i, message in enumerate(request.messages) if message.role == "user"), default=None)
    if last is None:
        return None
    system = tuple(_text_of(m.content) for m in request.messages if m.role in SYSTEM_ROLES)
    context = tuple(
        Turn(message.role, _text_of(message.content), tuple(_urls(_parts_of(message.content))))
        for message in request.messages[:last]
        if message.role in ("user", "assistant")
    )
    parts = _parts_of(request.messages[last].content)
    texts = tuple(part.text for part in parts if part.type == "text" and part.text)
    images = tuple(part for part in parts if part.type == "image_url")
    return UserTurn(system, texts, images, context)


def _parts_of(content: str | list[ContentPart] | None) -> list[ContentPart]:
    return [ContentPart(type="text", text=content)] if isinstance(content, str) else list(content or [])


def _urls(parts: list[ContentPart]) -> list[str]:
    return [p.image_url.url if p.image_url is not None else "" for p in parts if p.type == "image_url"]


def _text_of(content: str | list[ContentPart] | None) -> str:
    return "\n".join(part.text for part in _parts_of(content) if part.type == "text" and part.text)


def _refusal(reason: str, cause: str, message: str, code: str, param: str = "messages") -> Misfit:
    return Misfit(reason, RequestError(message, param=param, code=code), (cause,))


def conversation_misfit(request: ChatRequest, turn: UserTurn, config: AppConfig) -> Misfit | None:
    """Why the conversation around ``turn`` does not fit the cascade: its shape (alternating user and
    assistant turns, from a user turn to the question's, no tool turns), an image where the rule
    allows none (a system or assistant message), or more context than the limits allow."""
    model, large, limits = request.model, config.large.model_id, config.limits
    elsewhere = f"send it to a model itself (model {large!r})"
    turns = [message for message in request.messages if message.role not in SYSTEM_ROLES]
    if any(message.role == "tool" or _calls_tools(message) for message in turns):
        return _refusal(
            "a conversation with tool calls", "tool_calls",
            f"the cascade policy {model!r} reads user and assistant turns, not tool calls: {elsewhere}",
            "unsupported_conversation",
        )  # fmt: skip
    expected = ["user" if i % 2 == 0 else "assistant" for i in range(len(turns))]
    if [message.role for message in turns] != expected or expected[-1] != "user":
        return _refusal(
            "a conversation whose turns do not alternate", "turn_order",
            "the messages after the system messages must alternate user and assistant turns, from a "
            f"user turn to the question's (got {_roles(turns)})",
            "invalid_conversation",
        )  # fmt: skip
    for role, rule in (("system", SYSTEM_ROLES), ("assistant", ("assistant",))):
        if any(
            part.type == "image_url"
            for m in request.messages
            if m.role in rule
            for part in _parts_of(m.content)
        ):
            article = "an" if role == "assistant" else "a"
            return _refusal(
                f"an image in {article} {role} message", f"image_in_{role}",
                f"an image part in {article} {role} message: images go in user turns", "misplaced_image",
            )  # fmt: skip
    if len(turn.context) > limits.max_context_turns:
        return _refusal(
            f"{len(turn.context)} turns before the question", "context_turns",
            f"the conversation has {len(turn.context)} turns before the question; the cascade policy "
            f"{model!r} reads at most {limits.max_context_turns} (limits.max_context_turns): {elsewhere}",
            "context_too_long",
        )  # fmt: skip
    longest = max((len(t.text) for t in turn.context), default=0)
    if longest > limits.max_question_chars:
        return _refusal(
            "an earlier turn over limits.max_question_chars", "context_chars",
            f"a turn before the question has {longest} characters, over the limit of "
            f"{limits.max_question_chars} (limits.max_question_chars): {elsewhere}",
            "question_too_long",
        )  # fmt: skip
    problem = prompt_size_problem(turn.prompt_bytes, limits.max_prompt_bytes, "messages")
    if turn.context and problem is not None:
        return Misfit("a conversation over limits.max_prompt_bytes", problem, ("context_bytes",))
    return None


def prompt_size_problem(size: int, limit: int | None, param: str) -> RequestError | None:
    """What is wrong with ``size`` bytes of client text under ``limit`` (``limits.max_prompt_bytes``)."""
    if limit is None or size <= limit:
        return None
    return RequestError(
        f"the question, system messages and earlier turns are {size} bytes; with the stages' token "
        f"budgets and the images, at most {limit} fit the models' context length "
        "(limits.max_prompt_bytes): send it to a model itself, or shorten it",
        param=param,
        code="context_length_exceeded",
    )


def _calls_tools(message: Any) -> bool:
    """Whether a message calls or answers tools (OpenAI's ``tool_calls``, ``tool_call_id`` or the older
    ``function_call``): anything there but null or an empty list."""
    extra = message.model_extra or {}
    return any(extra.get(key) not in (None, []) for key in ("tool_calls", "function_call", "tool_call_id"))


def _roles(turns: list[Any], shown: int = 10) -> str:
    """The turns' roles for an error message, the first ``shown`` of them (a body may hold thousands)."""
    roles = ", ".join(message.role for message in turns[:shown])
    return roles + (f", ... ({len(turns)} in all)" if len(turns) > shown else "")


def question_misfit(turn: UserTurn, config: AppConfig) -> Misfit | None:
    """Why a follow-up's or several images' question is not one the cascade reads (``mai`` passes it
    through, as before the cascade read them; a single image's question keeps its 400 from the job)."""
    problem = question_problem(turn.text, config.limits.max_question_chars, "messages")
    if turn.shape == "one_image" or problem is None:
        return None
    if problem.code == "missing_question":
        return Misfit("a turn with no question", problem, ("no_question",))
    return Misfit("a question over limits.max_question_chars", problem, ("question_chars",))


def question_problem(text: str, limit: int, param: str) -> RequestError | None:
    """What is wrong with a question's ``text``, stripped: none, or over ``limit`` characters."""
    text, empty = text.strip(), "the question is empty; send the question as text"
    if not text:
        return RequestError(empty, param=param, code="missing_question")
    if len(text) > limit:
        over = f"the question has {len(text)} characters, over the limit of {limit}"
        return RequestError(over, param=param, code="question_too_long")
    return None


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
            unhonoured_causes(unhonoured),
        )
    if turn is None:
        return _refusal(
            "no user turn", "no_user_turn", "the messages contain no user message", "missing_user_message"
        )
    conversation = conversation_misfit(request, turn, config)
    if conversation is not None:
        return conversation
    images, reads = turn.image_count, config.limits.max_images
    if images > reads:  # `mai` passes more through, as the large model alone takes them
        return _refusal(
            f"{images} images", "images",
            f"the request has {images} images; the cascade policy {request.model!r} reads at most {reads} "
            f"(limits.max_images): send it to a model itself (model {large!r})",
            "too_many_images",
        )  # fmt: skip
    if images == 0:
        return _refusal(
            "no image", "no_image",
            "the user message has no image; add an image_url content part with a data URL",
            "missing_image",
        )  # fmt: skip
    if not all(url for t in turn.context for url in t.images) or any(
        p.image_url is None for p in turn.images
    ):
        return _refusal(
            "an image part with no url", "no_image",
            "an image_url content part has no url; give each image a data URL", "missing_image",
        )  # fmt: skip
    question = question_misfit(turn, config)
    if question is not None:
        return question
    if asks_open_generation(turn.text):
        return Misfit("an instruction for open generation", None, ("open_generation",))
    return None
