"""A Serve deployment with LLMServer's ``chat`` interface that answers from a script.

The scenario is a keyword in the question text; the reply depends on the deployment's role (small or
large) and the prompt kind its ``ModelCall`` names (``complete(body, call)``). It records every call, so
tests can count model calls. A request that carries no call (``chat``'s, a passthrough) is answered as
an engine would: streamed in chunks when it asks for a stream, and "[engine400]" in its text makes the
engine refuse it with a 400.
A call with structured outputs gets its scripted reply when it matches the regex, else the first of a
few short answers that does (``CONSTRAINED_REPLIES``), else the 400 an engine gives a grammar it refuses.
"""

from __future__ import annotations

import asyncio
import json
import re
import time

from ray import serve

from deployments.affinity import ModelCall
from deployments.model_server import PlainChat

# scenario -> {(role, prompt kind): reply}; a reply "!raise" raises, "!error" yields an ErrorResponse
# (500), "!refuse" the 400 an engine gives an image its processor cannot take.
SCRIPTS: dict[str, dict[tuple[str, str], str]] = {
    "agree": {("small", "simple"): "[[Yes]]", ("large", "simple"): "[[Yes.]]"},
    "reasoned": {
        ("small", "simple"): "[[No]]",
        ("large", "simple"): "[[Yes]]",
        ("small", "reasoning"): "The shape is red, so yes.\n[[Yes]]",
    },
    "transfer": {
        ("small", "simple"): "[[No]]",
        ("large", "simple"): "[[Yes]]",
        ("small", "reasoning"): "It looks blue to me.\n[[No]]",
        ("large", "transfer"): "No",
    },
    "choicetransfer": {
        ("small", "simple"): "[[A]]",
        ("large", "simple"): "[[C]]",
        ("small", "reasoning"): "It has four corners.\n[[B]]",
        ("large", "transfer"): "[[B]]",
    },
    "smallfails": {("small", "simple"): "!raise", ("large", "simple"): "[[Yes]]"},
    "largefails": {("small", "simple"): "[[Yes]]", ("large", "simple"): "!error"},
    "largerefuses": {("small", "simple"): "!sleep 3 [[Yes]]", ("large", "simple"): "!refuse"},
    "reasonrefuses": {
        ("small", "simple"): "[[No]]",
        ("large", "simple"): "[[Yes]]",
        ("small", "reasoning"): "!refuse",
    },
    "slow": {("small", "simple"): "[[Yes]]", ("large", "simple"): "[[Yes]]"},
    # "!sleep <s> <reply>": answer after <s> seconds (past a stage timeout in the timeout tests)
    "smallslow": {("small", "simple"): "!sleep 3 [[No]]", ("large", "simple"): "[[Yes]]"},
    "largeslow": {("small", "simple"): "[[Yes]]", ("large", "simple"): "!sleep 3 [[Yes]]"},
    "reasonslow": {
        ("small", "simple"): "[[No]]",
        ("large", "simple"): "[[Yes]]",
        ("small", "reasoning"): "!sleep 3 [[No]]",
    },
    "transferslow": {
        ("small", "simple"): "[[No]]",
        ("large", "simple"): "[[Yes]]",
        ("small", "reasoning"): "It is blue.\n[[No]]",
        ("large", "transfer"): "!sleep 3 [[No]]",
    },
    "allslow": {
        ("small", "simple"): "!sleep 0.8 [[No]]",
        ("large", "simple"): "!sleep 0.8 [[Yes]]",
        ("small", "reasoning"): "!sleep 0.8 It is blue.\n[[No]]",
        ("large", "transfer"): "!sleep 0.8 [[No]]",
    },
}
DEFAULT_REPLIES = {
    "simple": "[[Yes]]",
    "explain": "Red.\n[[Yes]]",
    "reasoning": "Thinking.\n[[Yes]]",
    "stage2": "Yes",
    "transfer": "[[Yes]]",
}
SLOW_S = 0.6

# What a constrained call may get instead of its scripted reply, the first that its regex admits.
CONSTRAINED_REPLIES = ("[[A]]", "[[B]]", "[[yes]]", "[[no]]", "[[1]]", "[[red]]")


def _constrained(reply: str, regex: str | None) -> str | None:
    """The reply a constrained call gets (``reply`` when its regex admits it); None when none fits."""
    if regex is None or re.fullmatch(regex, reply):
        return reply
    return next((r for r in CONSTRAINED_REPLIES if re.fullmatch(regex, r)), None)


def _question_text(messages: list) -> str:
    parts = messages[-1]["content"]
    return " ".join(part.get("text", "") for part in parts if isinstance(part, dict))


@serve.deployment(ray_actor_options={"num_cpus": 0})
class ScriptedLLMServer(PlainChat):
    def __init__(self, role: str):
        from ray.serve.llm.openai_api_models import ChatCompletionResponse, ErrorResponse

        self._response_types = ChatCompletionResponse, ErrorResponse
        self.role = role
        self._calls: list[dict] = []

    def engine_chat(self, call: ModelCall | None):
        return lambda request: self._answer(request, call)

    async def chat(self, request, raw_request_info=None):
        async for item in self._answer(request, None):
            yield item

    async def _answer(self, request, engine_call: ModelCall | None):
        ChatCompletionResponse, ErrorResponse = self._response_types
        messages = [dict(message) for message in request.messages]
        if engine_call is None:
            async for item in self._passthrough(request, messages):
                yield item
            return
        kind = engine_call.prompt_kind
        question = _question_text(messages)
        scenario = next((name for name in SCRIPTS if f"[{name}]" in question), None)
        call = {
            "kind": kind,
            "scenario": scenario,
            "started": time.time(),
            "finished": None,
            "request_id": request.request_id,
            "max_tokens": request.max_tokens,
            "constraint": getattr(getattr(request, "structured_outputs", None), "regex", None),
            "decoding": (request.temperature, request.top_p, request.seed, request.top_logprobs),
            "has_image": any(
                isinstance(part, dict) and part.get("type") == "image_url" for part in messages[-1]["content"]
            ),
        }
        self._calls.append(call)
        if scenario == "slow":
            await asyncio.sleep(SLOW_S)
        reply = SCRIPTS.get(scenario, {}).get((self.role, kind), DEFAULT_REPLIES.get(kind, "[[Yes]]"))
        if reply.startswith("!sleep "):
            _, seconds, reply = reply.split(" ", 2)
            try:
                await asyncio.sleep(float(seconds))
            except asyncio.CancelledError:
                call["cancelled"] = True
                raise
        call["finished"] = time.time()
        if reply == "!raise":
            raise RuntimeError(f"{self.role} engine crashed (scripted)")
        if reply == "!refuse":
            yield ErrorResponse(
                error={
                    "message": "Failed to apply Qwen3VLProcessor on data: absolute aspect ratio must be "
                    "smaller than 200, got 300.0 (scripted)",
                    "type": "BadRequestError",
                    "code": 400,
                }
            )
            return
        if reply == "!error":
            yield ErrorResponse(
                error={
                    "message": f"{self.role} engine error (scripted)",
                    "type": "InternalServerError",
                    "code": 500,
                }
            )
            return
        constrained = _constrained(reply, call["constraint"])
        if constrained is None:
            yield ErrorResponse(
                error={
                    "message": f"structured outputs: no scripted reply matches {call['constraint']!r}",
                    "type": "BadRequestError",
                    "code": 400,
                }
            )
            return
        reply = constrained
        prompt_tokens = sum(len(str(part.get("text", "")).split()) + 1 for part in messages[-1]["content"])
        # Logprobs when asked: one token per character, each with probability 1/2, the runner-up "?".
        logprobs = (
            {
                "content": [
                    {
                        "token": char,
                        "logprob": -0.693,
                        "top_logprobs": [{"token": char, "logprob": -0.693}, {"token": "?", "logprob": -1.5}][
                            : request.top_logprobs or 0
                        ],
                    }
                    for char in reply
                ]
            }
            if request.logprobs
            else None
        )
        yield ChatCompletionResponse(
            model=request.model,
            choices=[
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply},
                    "logprobs": logprobs,
                    "finish_reason": "stop",
                }
            ],
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(reply.split()),
                "total_tokens": prompt_tokens + len(reply.split()),
                # A stand-in for the prefix cache's share: half the prompt, so the ledger can be checked.
                "prompt_tokens_details": {"cached_tokens": prompt_tokens // 2},
            },
        )

    async def _passthrough(self, request, messages):
        ChatCompletionResponse, ErrorResponse = self._response_types
        texts = " ".join(
            part.get("text", "") if isinstance(part, dict) else str(part)
            for message in messages
            for part in (message["content"] if isinstance(message["content"], list) else [message["content"]])
        )
        self._calls.append(
            {
                "kind": "passthrough",
                "roles": [m["role"] for m in messages],
                "n": request.n,
                "temperature": request.temperature,
                "stream": request.stream,
                "images": sum(
                    1
                    for m in messages
                    if isinstance(m["content"], list)
                    for part in m["content"]
                    if isinstance(part, dict) and part.get("type") == "image_url"
                ),
                "started": time.time(),
                "finished": time.time(),
            }
        )
        if "[engine400]" in texts:
            yield ErrorResponse(
                error={
                    "message": "the engine refuses this (scripted)",
                    "type": "BadRequestError",
                    "code": 400,
                }
            )
            return
        words = f"{self.role} answers {len(messages)} messages".split()
        if not request.stream:
            yield ChatCompletionResponse(
                model=request.model,
                choices=[
                    {
                        "index": i,
                        "message": {"role": "assistant", "content": " ".join(words)},
                        "finish_reason": "stop",
                    }
                    for i in range(request.n or 1)
                ],
                usage={
                    "prompt_tokens": len(texts.split()),
                    "completion_tokens": len(words),
                    "total_tokens": len(texts.split()) + len(words),
                },
            )
            return
        for word in words:
            chunk = {
                "id": "chatcmpl-scripted",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": request.model,
                "choices": [{"index": 0, "delta": {"content": word + " "}, "finish_reason": None}],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
            await asyncio.sleep(0.01)
        yield "data: [DONE]\n\n"

    async def check_health(self) -> None:
        """LLMServer's health check, which the ingress's readiness check calls."""

    async def calls(self) -> list[dict]:
        return list(self._calls)

    async def reset(self) -> None:
        self._calls.clear()
