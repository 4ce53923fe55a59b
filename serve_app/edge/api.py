"""The HTTP API of an ingress replica: its FastAPI routes, which read a request, hand it to the
replica's request path (``IngressReplica``, which returns values: ``outcomes``) and render the outcome
(``responses.http_reply``); the error bodies and the CORS policy. The only module that builds the app,
and the deployment ``serve run`` starts (``MAIIngress``): the replica with its API."""

# No ``from __future__ import annotations`` here: the replica gets ``MAIIngress``'s class by value
# (cloudpickle), and FastAPI must see the handlers' parameter types (``Request``) as objects, not as
# names to look up.
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from ray import serve

from ..config import Security
from .console import add_console_routes, console_files, console_settings
from .errors import install_error_handlers
from .ingress import IngressReplica
from .protocol import AnswerRequest, ChatRequest, openapi_body
from .readiness import readiness_reply
from .responses import answer_reply, chat_reply, http_reply, models_list


async def chat_completions(ingress: IngressReplica, request: Request) -> Response:
    """``POST /v1/chat/completions``."""
    return http_reply(await ingress.chat_over_http(request), chat_reply)


async def answer(ingress: IngressReplica, request: Request) -> Response:
    """``POST /v1/mai/answer``."""
    return http_reply(await ingress.answer_over_http(request), answer_reply)


def build_api(ingress: IngressReplica, security: Security) -> FastAPI:
    """The HTTP API of one ingress replica: its routes, error bodies and CORS policy."""
    api = FastAPI(
        title="MAI Serve",
        description="Multi-agent inference for vision-language models",
        version="0.1.0",
        openapi_url=None,  # served below, behind the key, when security.openapi is on
        docs_url=None,
        redoc_url=None,
    )
    install_error_handlers(api, ingress.metrics.record_error)
    if security.openapi:

        async def openapi(request: Request) -> JSONResponse:
            ingress.access.identify(request.headers)
            return JSONResponse(api.openapi())

        api.add_api_route("/openapi.json", openapi, methods=["GET"], include_in_schema=False)
    if security.cors_allow_origins:
        from fastapi.middleware.cors import CORSMiddleware

        api.add_middleware(
            CORSMiddleware,
            allow_origins=security.cors_allow_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["authorization", "content-type", "x-api-key", "x-request-id"],
        )

    async def healthz() -> dict[str, str]:
        """Liveness: the ingress answers, whatever the models do."""
        return {"status": "ok"}

    async def readyz() -> JSONResponse:
        """Readiness: 200 once every model deployment answers a check, else 503 naming those that do
        not (serve_app/edge/readiness.py); the check is reused for a few seconds."""
        check = await ingress.readiness.current()
        status, body, headers = readiness_reply(check, ingress.readiness.now())
        return JSONResponse(body, status_code=status, headers=headers)

    async def models(request: Request) -> dict[str, Any]:
        caller = ingress.access.identify(request.headers)
        return models_list(tuple(ingress.model_handles), ingress.exposure, caller.may_use)

    async def chat(request: Request) -> Response:
        return await chat_completions(ingress, request)

    async def mai_answer(request: Request) -> Response:
        return await answer(ingress, request)

    async def stats(request: Request) -> dict[str, Any]:
        return await ingress.stats_over_http(request)

    async def purge(request: Request) -> dict[str, Any]:
        return await ingress.purge_over_http(request)

    api.add_api_route("/healthz", healthz, methods=["GET"])
    api.add_api_route("/readyz", readyz, methods=["GET"])
    api.add_api_route("/v1/models", models, methods=["GET"])
    api.add_api_route("/v1/chat/completions", chat, methods=["POST"], openapi_extra=openapi_body(ChatRequest))
    api.add_api_route(
        "/v1/mai/answer", mai_answer, methods=["POST"], openapi_extra=openapi_body(AnswerRequest)
    )
    api.add_api_route("/v1/mai/stats", stats, methods=["GET"])
    api.add_api_route("/v1/mai/cache/purge", purge, methods=["POST"])
    settings = console_settings(
        ingress.cascade.selectors,
        ingress.config.cascade.audit.report_interval_s,
        ingress.config.telemetry.trace_url,
    )
    add_console_routes(api, console_files(), settings, ingress.access.identify)
    return api


class IngressWithAPI(IngressReplica):
    """An ingress replica with its HTTP API, built when the replica starts."""

    def __serve_build_asgi_app__(self) -> FastAPI:
        return build_api(self, self.config.security)


# The deployment ``serve run`` starts.
MAIIngress = serve.deployment(name="MAIIngress")(serve.ingress()(IngressWithAPI))
