"""The cascade's VLM client over a DeploymentHandle of a ray.serve.llm LLMServer."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from deployments.affinity import ModelCall
from deployments.model_server import ChatBody

from ..core.contracts import GREEDY, Completion, Decoding, EngineCall, EngineUnavailableError, TokenLogprob
from .failures import engine_call, error_response_failure

_call_numbers = itertools.count()
# Every sampling field vLLM would otherwise take from the checkpoint's generation_config.json (its
# ChatCompletionRequest: the request's value, else the server's default), at vLLM's neutral value: a
# stage samples as its Decoding says on any checkpoint. Temperature and top_p are the Decoding's.
NEUTRAL_SAMPLING: dict[str, float | int] = {
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


def model_call(call: EngineCall) -> ModelCall:
    """``call`` as the model side takes it, numbered: unique per engine call. It crosses the handle
    beside the body (the stage-affinity router and the emulated engine read it), and its ``str`` is
    the engine request id that ties vLLM's logs to the MAI request, stage and prompt kind."""
    return ModelCall(
        call.request_id, call.stage, call.prompt_kind.value, call.answer_kind, next(_call_numbers)
    )


class LLMServerClient:
    """Sends the cascade's calls to one model deployment as plain values (``deployments/model_server``:
    an OpenAI chat body and the typed call in, its reply and the replica that served it out), decoded
    as each call's ``Decoding`` says (greedy by default), asking for the generated tokens' logprobs
    where the call's answer confidence is read (``EngineCall.confidence``) unless ``logprobs`` is off,
    and wherever the client asked for them. Nothing here loads vLLM's request or reply types.

    Cancelling ``complete`` cancels the handle's response, which aborts the request in the engine. A
    failed call raises the ``EngineError`` family (``failures.py``); a body the model's schema refuses
    is a bug of ours, raised as ``RuntimeError``."""

    def __init__(self, handle: Any, model_id: str, *, logprobs: bool = True):
        self._handle = handle
        self.model_id = model_id
        self._logprobs = logprobs

    def body(
        self,
        messages: list[dict],
        *,
        max_tokens: int,
        call: EngineCall,
        decoding: Decoding = GREEDY,
        sent: ModelCall | None = None,
    ) -> ChatBody:
        """The chat body of one call, as ray.serve.llm's ``ChatCompletionRequest`` reads it; its
        ``request_id`` is ``sent``'s (the numbered call that goes with it; a fresh one by default)."""
        return ChatBody(
            {
                "model": self.model_id,
                "messages": messages,
                "max_tokens": max_tokens,
                "stream": False,
                "request_id": str(sent or model_call(call)),
                **self._sampling(decoding, call),
                # Lower runs first (scheduling_policy: priority): audits behind served calls, a key's flood
                # behind another key's trickle.
                **({"priority": call.priority} if call.priority else {}),
                # The answer's closed form (core/answer_forms.py), as vLLM's structured outputs.
                **({"structured_outputs": {"regex": call.constraint}} if call.constraint else {}),
            }
        )

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        sent = model_call(call)
        body = self.body(messages, max_tokens=max_tokens, call=call, decoding=decoding, sent=sent)
        started = time.monotonic()
        with engine_call(self.model_id):
            response = self._handle.complete.remote(body, sent)
            try:
                reply = await response
            except asyncio.CancelledError:
                response.cancel()
                raise
        return _completion_of(
            reply, self.model_id, time.monotonic() - started, constrained=call.constraint is not None
        )

    def _sampling(self, decoding: Decoding, call: EngineCall) -> dict[str, Any]:
        fields: dict[str, Any] = {
            **NEUTRAL_SAMPLING,
            "temperature": decoding.temperature,
            "top_p": decoding.top_p,
            # The answer confidences the cascade reads (call.confidence), and every call's when the
            # client asks for the served answer's logprobs (any stage may serve it).
            "logprobs": (self._logprobs and call.confidence) or decoding.logprobs,
        }
        if decoding.seed is not None:
            fields["seed"] = decoding.seed
        if decoding.top_logprobs:
            fields["top_logprobs"] = decoding.top_logprobs
        return fields


def _completion_of(
    reply: dict[str, Any], model_id: str, latency_s: float, *, constrained: bool = False
) -> Completion:
    """The completion in a plain reply (``deployments/model_server``), or the error it carries; the
    completion names the replica that served it."""
    if "invalid" in reply:
        raise RuntimeError(f"{model_id} refused a cascade call's body: {reply['invalid']}")
    if "error" in reply:
        raise error_response_failure(reply["error"], model_id, constrained=constrained)
    response = reply.get("response") or {}
    choices = response.get("choices") or []
    if not choices:
        raise EngineUnavailableError(f"{model_id} returned a response with no choices")
    usage = response.get("usage") or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
    return Completion(
        text=(choices[0].get("message") or {}).get("content") or "",
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        latency_s=latency_s,
        token_logprobs=_token_logprobs(choices[0]),
        cached_tokens=None if cached is None else int(cached),
        replica=reply.get("replica"),
        finish_reason=choices[0].get("finish_reason"),
    )


def _token_logprobs(choice: dict[str, Any]) -> tuple[TokenLogprob, ...] | None:
    """The generated tokens with their logprobs, or None when the engine sent none."""
    content = (choice.get("logprobs") or {}).get("content")
    if not content:
        return None
    return tuple(
        TokenLogprob(
            str(item["token"]),
            float(item["logprob"]),
            tuple(
                TokenLogprob(str(top["token"]), float(top["logprob"]))
                for top in item.get("top_logprobs") or ()
            ),
        )
        for item in content
    )
