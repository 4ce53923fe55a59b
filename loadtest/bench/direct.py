"""Baselines through the same Serve proxy, without MAI's ingress: proxy -> a thin FastAPI ingress -> the
engine deployment, the same hops as ray.serve.llm's own OpenAI ingress in front of one LLMServer.

- ``build_direct_app``: one emulated engine answering at once (the overhead benchmark);
- ``build_direct_llm_app``: the LLMServers of a running MAI application, reached by their deployment
  handles: a JSON reply, or the engine's token stream as server-sent events (the passthrough benchmark).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from ray import serve

from deployments.emulated_vlm import EmulatedVLM
from deployments.settings import EmulationSettings

app = FastAPI()


@serve.deployment(name="DirectIngress", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1024)
@serve.ingress(app)
class DirectIngress:
    def __init__(self, engine):
        from ray.serve.llm.openai_api_models import ChatCompletionRequest

        self._request_type = ChatCompletionRequest
        self._engine = engine.options(stream=True)

    @app.post("/v1/chat/completions")
    async def chat(self, request: Request) -> JSONResponse:
        chat_request = self._request_type(**(await request.json()))
        async for response in self._engine.chat.remote(chat_request):
            return JSONResponse(response.model_dump(mode="json"))
        return JSONResponse({"error": {"message": "no response"}}, status_code=502)


def build_direct_app():
    engine = EmulatedVLM.options(name="direct-engine", max_ongoing_requests=1024).bind(
        EmulationSettings(profile="8b", dataset="pope", time_scale=0.0), "large", "direct"
    )
    return DirectIngress.bind(engine)


llm_app = FastAPI()


@serve.deployment(name="DirectLLMIngress", ray_actor_options={"num_cpus": 0})
@serve.ingress(llm_app)
class DirectLLMIngress:
    def __init__(self, app_name: str, deployments: dict[str, str]):
        from ray.serve.llm.openai_api_models import ChatCompletionRequest

        self._request_type = ChatCompletionRequest
        self._handles = {
            model_id: serve.get_deployment_handle(name, app_name=app_name).options(stream=True)
            for model_id, name in deployments.items()
        }

    @llm_app.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Any:
        from ray.llm._internal.serve.core.ingress.utils import _openai_json_wrapper, _peek_at_generator

        chat_request = self._request_type(**(await request.json()))
        first, stream = await _peek_at_generator(self._handles[chat_request.model].chat.remote(chat_request))
        if not chat_request.stream:
            head = first[0] if isinstance(first, list) else first
            return JSONResponse(head.model_dump(mode="json", exclude_none=True))
        return StreamingResponse(_openai_json_wrapper(stream), media_type="text/event-stream")


def build_direct_llm_app(deployments: dict[str, str], app_name: str = "mai"):
    """``deployments``: model id -> the LLMServer deployment's name in ``app_name``."""
    return DirectLLMIngress.bind(app_name, deployments)
