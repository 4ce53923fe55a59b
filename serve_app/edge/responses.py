"""What the request path returns, and its HTTP reply.

The outcomes are values, never HTTP: a request was answered by the cascade (``Answered``), forwarded
to a model (``Forwarded``), or refused (``Refused``); ``mai-batch`` reads them as they are
(batch/answerer.py). An exception the server expects becomes a refusal in one place (``settled``,
through ``errors.request_error_of``); anything else is a bug, left to rise: a 500 with a logged
traceback at either end. ``http_reply`` is the only place an outcome becomes a response: a job and its
cascade result as an OpenAI chat completion (or its stream of chunks) or the native answer, a model's
forwarded reply, a refusal's error body."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..core.contracts import TokenLogprob
from ..core.decision import Decision
from ..core.routes import Route
from ..core.trace import CacheRecord, CascadeResult
from .errors import EXPECTED, RequestError, error_response, request_error_of, warning_headers
from .jobs import Job
from .protocol import POLICY_OF_MODEL, Warnings


def usage_of(result: CascadeResult) -> dict[str, Any]:
    return result.trace.tokens().usage()


def mai_object(job: Job, result: CascadeResult) -> dict[str, Any]:
    return {
        "request_id": job.request_id,
        "answer": result.answer,
        "route": result.route,
        "trace": result.trace.to_dict(),
    }


def _token(token: TokenLogprob) -> dict[str, Any]:
    return {"token": token.token, "logprob": token.logprob, "bytes": list(token.token.encode())}


def choice_logprobs(job: Job, result: CascadeResult) -> dict[str, Any] | None:
    """OpenAI's ``logprobs`` of the choice, when the request asked for them: the tokens of the
    completion the answer was read from (``CascadeResult.logprobs``)."""
    if not job.options.decoding.logprobs:
        return None
    top = job.options.decoding.top_logprobs
    return {
        "content": [
            _token(token) | {"top_logprobs": [_token(other) for other in token.top[:top]]}
            for token in result.logprobs or ()
        ]
    }


def chat_completion(job: Job, result: CascadeResult) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{job.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": job.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": result.answer},
                "logprobs": choice_logprobs(job, result),
                "finish_reason": "stop",
            }
        ],
        "usage": usage_of(result),
        "mai": mai_object(job, result),
    }


def chat_completion_chunks(job: Job, result: CascadeResult) -> list[dict[str, Any]]:
    """The answer as OpenAI stream chunks: the role, the content, the finish (with the trace)."""
    base = {
        "id": f"chatcmpl-{job.request_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": job.model,
    }
    chunks = [
        base
        | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
        base
        | {
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": result.answer},
                    "logprobs": choice_logprobs(job, result),
                    "finish_reason": None,
                }
            ]
        },
        base
        | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "mai": mai_object(job, result)},
    ]
    if job.include_usage_in_stream:
        chunks.append(base | {"choices": [], "usage": usage_of(result)})
    return chunks


def answer_response(job: Job, result: CascadeResult) -> dict[str, Any]:
    return {
        "id": f"mai-{job.request_id}",
        "request_id": job.request_id,
        "answer": result.answer,
        "route": result.route,
        "policy": job.options.policy.value,
        "kind": job.question.kind,
        "usage": usage_of(result),
        "trace": result.trace.to_dict(),
    }


def models_list(
    model_ids: tuple[str, ...] = (), access: str = "keys", may_use: Callable[[str], bool] = lambda _: True
) -> dict[str, Any]:
    """The policies, then the models themselves (requests for those are passed to them unchanged), that
    the caller may use; ``mai.access``: ``keys``, or ``anonymous`` when the API asks for none."""
    policies = [
        {"id": name, "object": "model", "created": 0, "owned_by": "mai-serve", "policy": policy.value}
        for name, policy in POLICY_OF_MODEL.items()
    ]
    models = [
        {"id": model_id, "object": "model", "created": 0, "owned_by": "mai-serve"} for model_id in model_ids
    ]
    return {
        "object": "list",
        "data": [entry for entry in policies + models if may_use(str(entry["id"]))],
        "mai": {"access": access},
    }


# -- HTTP replies --------------------------------------------------------------------------------


def _headers(job: Job, result: CascadeResult) -> dict[str, str]:
    """An answer's headers: its route, what the answer cache did (``x-mai-cache``; a hit's ``Age`` in
    whole seconds, RFC 9111) and the request's warnings (``errors.warning_headers``)."""
    return {"x-mai-route": result.route} | cache_headers(result.trace.cache) | warning_headers(job.warnings)


def cache_headers(cache: CacheRecord | None) -> dict[str, str]:
    """What the answer cache did (``x-mai-cache``), and a hit's ``Age`` in whole seconds (RFC 9111)."""
    if cache is None:
        return {}
    age = {"age": str(int(cache.age_s))} if cache.age_s is not None else {}
    return {"x-mai-cache": cache.status} | age


def _sse(chunks: list[dict[str, Any]]) -> Iterator[str]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def chat_reply(job: Job, result: CascadeResult) -> JSONResponse | StreamingResponse:
    """``/v1/chat/completions``: the completion, or its chunks as server-sent events when streamed."""
    if job.stream:
        return StreamingResponse(
            _sse(chat_completion_chunks(job, result)),
            media_type="text/event-stream",
            headers=_headers(job, result),
        )
    return JSONResponse(chat_completion(job, result), headers=_headers(job, result))


def answer_reply(job: Job, result: CascadeResult) -> JSONResponse:
    """``/v1/mai/answer``."""
    return JSONResponse(answer_response(job, result), headers=_headers(job, result))


def http_reply(outcome: RequestOutcome, answered: Callable[[Job, CascadeResult], Response]) -> Response:
    """``outcome`` as HTTP: ``answered`` renders an answer (``chat_reply`` or ``answer_reply``)."""
    if isinstance(outcome, Refused):
        return error_response(outcome.error)
    if isinstance(outcome, Forwarded):
        if outcome.events is not None:
            return StreamingResponse(outcome.events, media_type="text/event-stream", headers=outcome.headers)
        return JSONResponse(outcome.body, headers=outcome.headers)
    return answered(outcome.job, outcome.result)


@dataclass(frozen=True)
class Answered:
    """The cascade (or a single-model policy) answered ``job`` as ``decision`` said (None: the answer
    was reused, from the answer cache or an identical request's run: ``result.trace.cache``)."""

    job: Job
    decision: Decision | None
    result: CascadeResult


@dataclass(frozen=True)
class Forwarded:
    """A request passed to the model it named (or that ``mai`` chose, for ``reason``): the engine's
    reply, either its JSON ``body`` or its ``events`` (server-sent events, streamed)."""

    model_id: str
    reason: str | None
    body: dict[str, Any] | None = None
    events: AsyncIterator[str] | None = None
    warnings: Warnings = ()  # what the request sent under an old name
    cache: CacheRecord | None = None  # what the answer cache did, when the request asked for it

    @property
    def headers(self) -> dict[str, str]:
        headers = {"x-mai-route": Route.PASSTHROUGH.value}
        if self.reason is not None:
            headers["x-mai-route-reason"] = self.reason
        return headers | cache_headers(self.cache) | warning_headers(self.warnings)


@dataclass(frozen=True)
class Refused:
    """A request the server will not run, or could not: the client's error and its status."""

    error: RequestError

    @property
    def status(self) -> int:
        return self.error.status


RequestOutcome = Answered | Forwarded | Refused


async def settled(path: Awaitable[Answered | Forwarded]) -> RequestOutcome:
    """``path``'s outcome: what it returned, or the refusal of an exception the server expects."""
    try:
        return await path
    except EXPECTED as exc:
        return Refused(request_error_of(exc))
