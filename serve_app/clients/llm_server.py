"""The cascade's VLM client over a DeploymentHandle of a ray.serve.llm LLMServer."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from typing import Any

from deployments import routed_replicas
from deployments.engine_ids import EngineRequestId

from ..core.contracts import Completion, EngineCall, EngineUnavailableError, TokenLogprob
from ..core.options import GREEDY, Decoding
from .failures import engine_call, error_response_failure

_call_numbers = itertools.count()


def engine_request_id(call: EngineCall) -> str:
    """The engine's request id of ``call``: unique per engine call, and it ties vLLM's logs (and the
    emulated engine's script) to the MAI request, stage and prompt kind."""
    return str(
        EngineRequestId(
            call.request_id, call.stage, call.prompt_kind.value, call.answer_kind, next(_call_numbers)
        )
    )


class LLMServerClient:
    """Sends OpenAI ChatCompletionRequests to one LLMServer deployment, decoded as each call's
    ``Decoding`` says (greedy by default), asking for the generated tokens' logprobs (the answers'
    confidences) unless ``logprobs`` is off and the call does not ask for them.

    Cancelling ``complete`` cancels the handle's response, which aborts the request in vLLM:
    cancelling only the task that iterates a streaming handle does not reach the engine. A failed call
    raises the ``EngineError`` family (``failures.py``), nothing else."""

    def __init__(self, handle: Any, model_id: str, *, logprobs: bool = True):
        # Imports vLLM's protocol: pay for it when the replica starts, not inside a stage's timeout.
        from ray.serve.llm.openai_api_models import ChatCompletionRequest

        self._request_type = ChatCompletionRequest
        self._handle = handle.options(stream=True)
        self.model_id = model_id
        self._logprobs = logprobs

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        request = self._request_type(
            model=self.model_id,
            messages=messages,
            max_tokens=max_tokens,
            stream=False,
            request_id=engine_request_id(call),
            **self._sampling(decoding),
            # Lower runs first (scheduling_policy: priority): audits behind served calls, a key's flood
            # behind another key's trickle.
            **({"priority": call.priority} if call.priority else {}),
            # The answer's closed form (core/answer_forms.py), as vLLM's structured outputs.
            **({"structured_outputs": {"regex": call.constraint}} if call.constraint else {}),
        )
        started = time.monotonic()
        with engine_call(self.model_id):
            response = self._handle.chat.remote(request)
            try:
                item = await response.__anext__()  # a non-streaming request yields exactly one item
            except asyncio.CancelledError:
                response.cancel()
                raise
            except StopAsyncIteration:
                raise EngineUnavailableError(f"{self.model_id} returned no response") from None
        completion = _completion_of(
            item, self.model_id, time.monotonic() - started, constrained=call.constraint is not None
        )
        return dataclasses.replace(completion, replica=routed_replicas.take(request.request_id))

    def _sampling(self, decoding: Decoding) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "temperature": decoding.temperature,
            "top_p": decoding.top_p,
            "logprobs": self._logprobs or decoding.logprobs,
        }
        if decoding.seed is not None:
            fields["seed"] = decoding.seed
        if decoding.top_logprobs:
            fields["top_logprobs"] = decoding.top_logprobs
        return fields


def _completion_of(item: Any, model_id: str, latency_s: float, *, constrained: bool = False) -> Completion:
    error = getattr(item, "error", None)
    if error is not None and not hasattr(item, "choices"):
        raise error_response_failure(error, model_id, constrained=constrained)
    if isinstance(item, list | str):
        raise EngineUnavailableError(f"{model_id} streamed a response to a non-streaming request")
    choices = getattr(item, "choices", None) or []
    if not choices:
        raise EngineUnavailableError(f"{model_id} returned a response with no choices")
    text = choices[0].message.content or ""
    usage = getattr(item, "usage", None)
    return Completion(
        text=text,
        prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
        latency_s=latency_s,
        token_logprobs=_token_logprobs(choices[0]),
        cached_tokens=_cached_tokens(usage),
    )


def _cached_tokens(usage: Any) -> int | None:
    """usage.prompt_tokens_details.cached_tokens, or None when the engine did not report it."""
    cached = getattr(getattr(usage, "prompt_tokens_details", None), "cached_tokens", None)
    return None if cached is None else int(cached)


def _token_logprobs(choice: Any) -> tuple[TokenLogprob, ...] | None:
    """The generated tokens with their logprobs, or None when the engine sent none."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not content:
        return None
    return tuple(
        TokenLogprob(
            str(item.token),
            float(item.logprob),
            tuple(
                TokenLogprob(str(top.token), float(top.logprob))
                for top in getattr(item, "top_logprobs", None) or ()
            ),
        )
        for item in content
    )
