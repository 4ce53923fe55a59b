"""A request turned into one cascade job: every check a request must pass before any model runs.

Pure but for the one injected call that downloads an allowed remote image (``ImageFetcher``), made
last, once every other check has passed, so a job leaves here complete. Raises ``RequestError`` (a 4xx
naming the problem) for bad input.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..cache.keys import CacheMode, asked_mode
from ..config import AppConfig
from ..core.answer_forms import AnswerFormError, check_choices
from ..core.contracts import CascadeOptions, Policy, Question
from ..core.plans import Plan
from ..core.question_parsing import QuestionFormatError, read_question
from .errors import RequestError, describe_validation_error
from .images import ImageFetcher, check_image_under, is_remote
from .protocol import (
    POLICY_OF_MODEL,
    AnswerRequest,
    MAIExtra,
    RequestOptions,
    Warnings,
)
from .remote_images import RemoteImagePolicy, check_remote_url
from .routing import ToCascade, prompt_size_problem, question_problem, validated


@dataclass(frozen=True)
class Job:
    """A validated request: what to ask, under which policy and options."""

    question: Question
    options: CascadeOptions
    model: str  # the OpenAI model name of the policy
    request_id: str  # made once, where the request came in (``request_id_of``)
    stream: bool = False
    include_usage_in_stream: bool = False
    task: str | None = None  # the client's task tag: the question's class is its kind refined by it
    warnings: Warnings = ()  # what the request sent under an old name (the reply's ``Warning``)
    cache: CacheMode | None = None  # what the request lets the answer cache do (``mai.cache``)


def _options(
    config: AppConfig,
    policy: Policy,
    overrides: RequestOptions | None,
    max_tokens: int | None,
    param: str,
    decoding: dict[str, Any] | None = None,
) -> CascadeOptions:
    update: dict[str, Any] = {"policy": policy}
    if decoding:
        update["decoding"] = config.cascade.decoding.model_dump() | decoding
    if overrides is not None:
        update |= overrides.model_dump(exclude_none=True)
        if overrides.plan is not None and policy is not Policy.CASCADE:
            raise RequestError(
                f"options.plan orders the stages of the cascade (model mai); policy {policy.value!r} "
                "has none to order",
                param="options.plan",
                code="unsupported_parameter",
            )
        if "confident_large" in overrides.model_fields_set and overrides.confident_large is None:
            update["confident_large"] = None  # an explicit null turns the server's default off
        if overrides.plan is None and overrides.eager_reasoning is not None:
            # The request chose the stages' order itself (eager_reasoning names a plan): forced.
            update["plan"] = Plan.EAGER if overrides.eager_reasoning else Plan.SEQUENTIAL
    if max_tokens is not None:
        # A cap on the reply, never a signal: every stage whose text can be the reply keeps its own
        # budget, under the cap; the reasoning, which the client never receives, keeps its budget.
        if max_tokens < 1:
            raise RequestError(
                f"{param} must be at least 1, got {max_tokens}", param=param, code="invalid_max_tokens"
            )
        budgets = config.cascade.max_tokens
        update["max_tokens"] = budgets.model_copy(
            update={
                kind: min(getattr(budgets, kind), max_tokens)
                for kind in ("simple", "explain", "stage2", "transfer")
            }
        )
    try:
        options = config.cascade.request_options(update)
    except ValidationError as exc:
        message, field = describe_validation_error(exc)
        if field is not None and field.startswith("decoding."):  # a request's own top-level fields
            field = field.removeprefix("decoding.")
            message = message.removeprefix("decoding.")
        raise RequestError(message, param=field, code="invalid_options") from None
    return options


def _checked_image(config: AppConfig, image_url: str, param: str) -> str:
    """One image as the models get it: a checked data URL, or an allowed remote URL (downloaded by
    ``_with_images`` once every check has passed)."""
    limits = config.limits
    if is_remote(image_url.strip()) and limits.allow_remote_images:
        check_remote_url(image_url.strip(), remote_image_policy(config), param=param)
        return image_url.strip()
    return check_image_under(limits, image_url, param=param)


def _question(
    config: AppConfig,
    text: str,
    images: list[str],
    choices: list[str] | None,
    kind: str | None,
    image_param: str,
    question_param: str,
    choices_param: str,
) -> Question:
    problem = question_problem(text, config.limits.max_question_chars, question_param)
    if problem is not None:
        raise problem
    text = text.strip()
    checked = [_checked_image(config, image, image_param) for image in images]
    if choices is not None and any(not choice.strip() for choice in choices):
        raise RequestError("choices must not be empty strings", param=choices_param, code="invalid_choices")
    try:
        question = read_question(text, choices, kind, checked)
    except QuestionFormatError as exc:
        param = choices_param if exc.code == "conflicting_choices" else question_param
        raise RequestError(str(exc), param=param, code=exc.code) from None
    if question.kind == "choice" and not question.choices:
        raise RequestError(
            "answer_type 'choice' needs options: list them in the question (A. ..., B. ...) or send choices",
            param="answer_type",
            code="missing_choices",
        )
    return question


def check_answer_form(question: Question, options: CascadeOptions, param: str) -> None:
    """With structured answers on, a choice's options must be ones a grammar can tell apart (a 400
    naming the problem, before any model is called)."""
    if not options.structured_answers or question.kind != "choice":
        return
    try:
        check_choices(question.choices)
    except AnswerFormError as exc:
        raise RequestError(
            f"{exc}: with structured answers the options must differ", param=param, code="invalid_choices"
        ) from None


async def _with_images(question: Question, fetch_image: ImageFetcher, param: str) -> Question:
    """``question`` with its allowed remote images (the conversation's too) downloaded and checked, as
    data URLs, one after the other."""

    async def fetched(images: tuple[str, ...]) -> tuple[str, ...]:
        return tuple([await fetch_image(url, param) if is_remote(url) else url for url in images])

    if not any(
        is_remote(url) for url in (*question.images, *(u for t in question.context for u in t.images))
    ):
        return question
    context = [dataclasses.replace(turn, images=await fetched(turn.images)) for turn in question.context]
    return dataclasses.replace(question, images=await fetched(question.images), context=tuple(context))


def check_prompt_size(config: AppConfig, size: int, param: str) -> None:
    """``size`` bytes of client text must fit the engines' context after the largest stage's needs."""
    problem = prompt_size_problem(size, config.limits.max_prompt_bytes, param)
    if problem is not None:
        raise problem


def remote_image_policy(config: AppConfig) -> RemoteImagePolicy:
    limits = config.limits
    return RemoteImagePolicy(
        allowed_hosts=tuple(limits.remote_image_hosts),
        max_bytes=limits.max_image_bytes,
        timeout_s=limits.remote_image_timeout_s,
        allow_private_networks=limits.remote_image_allow_private_networks,
    )


_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_of(header: str | None) -> str:
    """A request's id, made once where it comes in: the client's ``x-request-id`` when it is a plain
    token (else a 400), a new id without one."""
    if header is None:
        return uuid.uuid4().hex
    if not _REQUEST_ID.match(header):
        raise RequestError(
            "x-request-id must be 1 to 128 letters, digits or . _ : -",
            param="x-request-id",
            code="invalid_request_id",
        )
    return header


async def job_from_chat(
    config: AppConfig, routed: ToCascade, request_id: str, fetch_image: ImageFetcher
) -> Job:
    """The cascade job of a chat request ``routing.destination`` sent to the cascade: the gate has read its
    user turn and found it fits (``routing.misfit``)."""
    request, turn = routed.request, routed.turn
    extra = request.mai or MAIExtra()
    max_tokens = (
        request.max_completion_tokens if request.max_completion_tokens is not None else request.max_tokens
    )
    param = "max_completion_tokens" if request.max_completion_tokens is not None else "max_tokens"
    question = _question(
        config,
        turn.text,
        [part.image_url.url for part in turn.images if part.image_url is not None],
        extra.choices,
        extra.answer_type,
        image_param="messages",
        question_param="messages",
        choices_param="mai.choices",
    )
    context = tuple(
        dataclasses.replace(t, images=tuple(_checked_image(config, url, "messages") for url in t.images))
        for t in turn.context
    )
    question = dataclasses.replace(question, system=turn.system, context=context)
    check_prompt_size(config, turn.prompt_bytes, "messages")
    options = _options(
        config, POLICY_OF_MODEL[request.model], extra.options, max_tokens, param, request.decoding()
    )
    check_answer_form(question, options, "mai.choices")
    include_usage = bool((request.stream_options or {}).get("include_usage"))
    return Job(
        await _with_images(question, fetch_image, "messages"),
        options,
        request.model,
        stream=request.stream,
        include_usage_in_stream=include_usage,
        request_id=request_id,
        task=extra.task,
        warnings=routed.warnings,
        cache=extra.cache,
    )


def passthrough_cache_mode(payload: Any) -> CacheMode | None:
    """What a request forwarded to a model asks of the answer cache: its ``mai.cache``, None when it
    asks nothing (such a request is cached only when it asks); a 400 for anything but a mode."""
    extra = payload.get("mai") if isinstance(payload, dict) else None
    try:
        return asked_mode(extra.get("cache") if isinstance(extra, dict) else None)
    except ValueError:
        modes = ", ".join(mode.value for mode in CacheMode)
        raise RequestError(
            f"mai.cache must be one of {modes}", param="mai.cache", code="invalid_options"
        ) from None


def answer_request(payload: Any) -> AnswerRequest:
    """A ``POST /v1/mai/answer`` body, validated; its ``model`` is known before any image is read."""
    return validated(AnswerRequest, payload)


async def job_from_answer(
    config: AppConfig, request: AnswerRequest, request_id: str, fetch_image: ImageFetcher
) -> Job:
    question = _question(
        config,
        request.question,
        [request.image],
        request.choices,
        request.answer_type,
        image_param="image",
        question_param="question",
        choices_param="choices",
    )
    check_prompt_size(config, len(question.question.encode()), "question")
    options = _options(config, request.policy, request.options, request.max_tokens, "max_tokens")
    check_answer_form(question, options, "choices")
    question = await _with_images(question, fetch_image, "image")
    return Job(
        question,
        options,
        request.model,
        request_id=request_id,
        task=request.task,
        warnings=request.warnings,
        cache=request.cache,
    )
