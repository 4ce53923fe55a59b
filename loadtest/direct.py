"""The baseline of the overhead benchmark: one direct call to an LLMServer-compatible deployment.

Proxy -> a thin FastAPI ingress -> the engine deployment: the same hops as ray.serve.llm's own OpenAI
ingress in front of one LLMServer, with the emulated engine answering at once."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from ray import serve

from deployments.emulated_vlm import EmulatedVLM

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
        {"profile": "8b", "dataset": "pope", "time_scale": 0.0}, "large", "direct"
    )
    return DirectIngress.bind(engine)
