"""MAIIngress: the FastAPI ingress deployment that runs the cascade over the two model deployments."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve
from starlette.exceptions import HTTPException as StarletteHTTPException

from .api import (
    AnswerRequest,
    ChatRequest,
    Job,
    openapi_body,
    remote_image_policy,
    answer_response,
    chat_completion,
    chat_completion_chunks,
    job_from_answer,
    job_from_chat,
    models_list,
    parse_json,
)
from .cascade import Cascade, CascadeResult, ModelUnavailableError
from .client import LLMServerClient, bind_request_id
from .config import AppConfig
from .errors import RequestError
from .images import check_image_bytes
from .metrics import IngressMetrics
from .remote_images import fetch_image
from .security import check_api_key, load_api_keys, read_body
from .selectors import attention_selector, budget_selector

logger = logging.getLogger("ray.serve")

RETRY_AFTER_S = "5"

app = FastAPI(title="MAI Serve", description="Multi-agent inference for vision-language models", version="0.1.0")


@app.exception_handler(StarletteHTTPException)
async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    error = RequestError(str(exc.detail), code="not_found" if exc.status_code == 404 else "http_error", status=exc.status_code)
    return JSONResponse(error.body(), status_code=exc.status_code)


def _sse(chunks: list[dict[str, Any]]) -> Iterator[str]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def _request_id(request: Request) -> str | None:
    """Serve's id of this request: the client's ``x-request-id`` when it sent one, else one Serve made.
    Serve's proxy returns it in the ``x-request-id`` response header."""
    from ray.serve.context import _get_serve_request_context

    return request.headers.get("x-request-id") or _get_serve_request_context().request_id or None


def _reply_headers(job: Job, result: CascadeResult) -> dict[str, str]:
    return {"x-mai-route": result.route}


@serve.deployment(name="MAIIngress")
@serve.ingress(app)
class MAIIngress:
    def __init__(self, small: Any, large: Any, config: dict[str, Any], scorer: Any = None):
        self.config = AppConfig.model_validate(config)
        selection = self.config.transfer_selection
        selectors = {"budget": budget_selector(selection.budget_head_words, selection.budget_tail_words)}
        if scorer is not None:
            selectors["attention"] = attention_selector(
                lambda *args: scorer.select.remote(*args), selection.delta, selection.layer)
        self.cascade = Cascade(
            LLMServerClient(small, self.config.small.model_id),
            LLMServerClient(large, self.config.large.model_id),
            selectors=selectors,
        )
        self.metrics = IngressMetrics()
        self.api_keys = load_api_keys(self.config.security)
        logger.info("MAI ingress: API keys %s", f"required ({len(self.api_keys)} configured)" if self.api_keys else "off")
        if self.config.security.cors_allow_origins:
            from fastapi.middleware.cors import CORSMiddleware

            app.add_middleware(CORSMiddleware, allow_origins=self.config.security.cors_allow_origins,
                               allow_methods=["GET", "POST"], allow_headers=["authorization", "content-type", "x-api-key",
                                                                          "x-request-id"])

    @app.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(self, request: Request):
        try:
            check_api_key(request.headers, self.api_keys)
        except RequestError as error:
            return self._error(error)
        return models_list()

    @app.post("/v1/chat/completions", openapi_extra=openapi_body(ChatRequest))
    async def chat_completions(self, request: Request):
        return await self._serve(request, job_from_chat, self._chat_reply)

    @app.post("/v1/mai/answer", openapi_extra=openapi_body(AnswerRequest))
    async def answer(self, request: Request):
        return await self._serve(request, job_from_answer, answer_response)

    # -------------------------------------------------------------------------------------------

    async def _serve(self, request: Request, parse: Callable[..., Job],
                     reply: Callable[[Job, CascadeResult], Any]):
        try:
            check_api_key(request.headers, self.api_keys)
            body = await read_body(request.headers, request.stream(), self.config.limits.max_body_bytes)
            job = parse(self.config, parse_json(body), _request_id(request))
            if job.image_to_download is not None:
                job = await self._download_image(job)
            result = await self._run(job)
        except RequestError as error:
            return self._error(error)
        self.metrics.record(job.options.policy.value, result)
        body = reply(job, result)
        if isinstance(body, StreamingResponse):
            return body
        return JSONResponse(body, headers=_reply_headers(job, result))

    def _error(self, error: RequestError) -> JSONResponse:
        self.metrics.record_error(error.status, error.code)
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    async def _download_image(self, job: Job) -> Job:
        """Fetch the allowed remote image, then check its bytes like an inline one."""
        limits = self.config.limits
        data = await fetch_image(job.image_to_download, remote_image_policy(self.config), param="image")
        image = check_image_bytes(data, max_bytes=limits.max_image_bytes, max_pixels=limits.max_image_pixels, param="image")
        return dataclasses.replace(job, question=dataclasses.replace(job.question, image_url=image.data_url))

    def _chat_reply(self, job: Job, result: CascadeResult):
        if job.stream:
            return StreamingResponse(_sse(chat_completion_chunks(job, result)), media_type="text/event-stream",
                                     headers=_reply_headers(job, result))
        return chat_completion(job, result)

    async def _run(self, job: Job) -> CascadeResult:
        selector = job.options.transfer_selector
        if selector not in self.cascade.selectors:
            raise RequestError(f"unknown transfer_selector {selector!r}; known: {', '.join(sorted(self.cascade.selectors))}",
                               param="options.transfer_selector", code="invalid_options")
        timeout_s = self.config.request_timeout_s
        bind_request_id(job.request_id)
        try:
            return await asyncio.wait_for(self.cascade.run(job.question, job.options), timeout_s)
        except ModelUnavailableError as exc:
            logger.warning("MAI request failed: %s", exc)
            raise RequestError(f"{exc}; retry later", code="model_unavailable", status=503,
                               headers={"Retry-After": RETRY_AFTER_S}) from None
        except TimeoutError:
            raise RequestError(f"no answer within the request timeout of {timeout_s:g} s", code="timeout",
                               status=504) from None
