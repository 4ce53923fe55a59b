"""EmulatedVLM: a GPU-free twin of a ray.serve.llm LLMServer, calibrated on the MAI paper's H100 profile.

For load tests, autoscaling tests and capacity planning without GPUs; never a default for real serving
(a replica logs a warning when it starts). Same interface as the model deployments' ModelServer:
``complete(body, call)``, the cascade's plain-value call (deployments/model_server.py), and
LLMServer's ``chat(ChatCompletionRequest)``, which yields one ``ChatCompletionResponse`` with usage,
or for ``stream: true`` the reply's chunks as server-sent events while it "decodes". ``complete``
answers by its ``ModelCall`` (the script below); a call without one, ``chat``'s, is a passthrough (a
request for the model itself): an open answer as long as Table 5's Explain answers, under
``max_tokens``, with ``n`` choices.

Latency of one call = TTFT(model, context tokens) from Table 3, then the completion tokens at Table 4's
decode speed, slowed by the batch: per-token time x (1 + batch_slowdown x (running sequences - 1)). At
most ``max_num_seqs`` sequences decode at once; the rest wait, lower request ``priority`` values
first, as in vLLM's continuous batching with priority scheduling.
Completion tokens are drawn around Table 5's mean for the dataset and prompt kind. Answers are scripted
so that the cascade's routes occur at Table 10's rates, keyed by the MAI request id of the call's
``ModelCall`` (deployments/affinity.py), so small and large agree or disagree consistently
within one request. Everything sleeps (asyncio), so replicas cost no CPU while they "decode"; each
costs memory (about 1 GB RSS measured here, mostly vLLM's request types it must load to read requests).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import deque
from typing import Any

from ray import serve

from . import paper_profile
from .affinity import ModelCall
from .emulated_script import (
    PASSTHROUGH,
    PROMPT_KINDS,
    call_script,
    completion_tokens,
    constrained_pieces,
    estimate_prompt_tokens,
    open_answer_words,
    per_token_s,
    reply_logprobs,
    reply_pieces,
    route_of,
    scripted_answer,
    scripted_confidence,
)
from .model_server import PlainChat
from .priority_slots import PrioritySlots
from .settings import EmulationSettings

logger = logging.getLogger("ray.serve")


@serve.deployment(name="EmulatedVLM", ray_actor_options={"num_cpus": 0})
class EmulatedVLM(PlainChat):
    def __init__(self, settings: EmulationSettings, role: str, model_id: str):
        from ray.serve.llm.openai_api_models import ChatCompletionResponse

        self._response_type = ChatCompletionResponse
        self.settings = settings
        self.role, self.model_id = role, model_id
        self._slots = PrioritySlots(self.settings.max_num_seqs)
        self._running = 0
        self._stats: dict[str, Any] = {}
        self._extra_delay_s = 0.0  # fault drills: every call takes this much longer
        # (arrival time, MAI request key) of every cascade call, for the stage-affinity bench.
        self._calls: deque[tuple[float, str]] = deque(maxlen=100_000)
        self.reset_stats_now()
        logger.warning(
            "EmulatedVLM %s (%s, profile %s, dataset %s): answers are scripted, latency is emulated; "
            "not for real serving",
            model_id,
            role,
            self.settings.profile,
            self.settings.dataset,
        )

    def reset_stats_now(self) -> None:
        self._stats = {
            "calls": {kind: 0 for kind in (*PROMPT_KINDS, PASSTHROUGH)},
            "completed": 0,
            "cancelled": 0,
            "completion_tokens": 0,
            "peak_batch": 0,
        }

    def engine_chat(self, call: ModelCall | None) -> Any:
        """A cascade call is answered by its ``ModelCall`` (``complete``'s)."""
        return lambda request: self._answer(request, call)

    async def chat(self, request: Any, raw_request_info: Any = None):
        """LLMServer's ``chat``: a request without a ``ModelCall``, a passthrough."""
        async for item in self._answer(request, None):
            yield item

    async def _answer(self, request: Any, call: ModelCall | None):
        settings = self.settings
        key, prompt_kind, answer_kind = call_script(call, getattr(request, "request_id", None))
        self._stats["calls"][prompt_kind] += 1
        if call is not None and prompt_kind != PASSTHROUGH:
            self._calls.append((time.time(), call.affinity_key))
        messages = [dict(message) for message in request.messages]
        prompt_tokens = estimate_prompt_tokens(messages, settings.image_tokens)
        max_tokens = getattr(request, "max_completion_tokens", None) or getattr(request, "max_tokens", None)
        tokens = completion_tokens(settings, key, prompt_kind, max_tokens)
        if prompt_kind == PASSTHROUGH:
            async for item in self._open_answer(request, prompt_tokens, tokens):
                yield item
            return
        route = route_of(key, settings.dataset, settings.seed)
        pieces = reply_pieces(
            scripted_answer(route, self.role, prompt_kind, answer_kind), prompt_kind, tokens
        )
        regex = getattr(getattr(request, "structured_outputs", None), "regex", None)
        if regex is not None:  # structured outputs, honoured as vLLM's would be
            shaped = constrained_pieces(pieces, regex, answer_kind)
            if shaped is None:
                yield self._error(f"structured outputs: no reply of this engine matches the regex {regex!r}")
                return
            pieces = shaped
        async for _ in self._decoding(prompt_tokens, tokens, getattr(request, "priority", 0) or 0):
            pass
        logprobs = None
        if getattr(request, "logprobs", False):
            confidence = scripted_confidence(settings, key, self.role, prompt_kind, route)
            logprobs = {"content": reply_logprobs(pieces, confidence)}
        yield self._response(["".join(pieces)], prompt_tokens, tokens, logprobs)

    @staticmethod
    def _error(message: str) -> Any:
        """A 400 as vLLM's server sends one: the request's structured outputs cannot be followed."""
        from ray.serve.llm.openai_api_models import ErrorResponse

        return ErrorResponse(error={"message": message, "type": "BadRequestError", "code": 400})

    def _response(
        self, texts: list[str], prompt_tokens: int, tokens: int, logprobs: dict | None = None
    ) -> Any:
        choices = [
            {
                "index": index,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
                "logprobs": logprobs,
            }
            for index, text in enumerate(texts)
        ]
        completion = tokens * len(texts)
        return self._response_type(
            id=f"emulated-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=self.model_id,
            choices=choices,
            usage={
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            },
        )

    async def _open_answer(self, request: Any, prompt_tokens: int, tokens: int):
        """A passthrough: ``n`` open answers of ``tokens`` words, whole or streamed as they decode."""
        words = open_answer_words(tokens)
        n = getattr(request, "n", None) or 1
        if not getattr(request, "stream", False):
            async for _ in self._decoding(prompt_tokens, tokens):
                pass
            yield self._response([" ".join(words)] * n, prompt_tokens, tokens)
            return
        chunk_id, sent = f"emulated-{uuid.uuid4().hex}", 0

        def event(choices: list[dict], **fields: Any) -> str:
            chunk = {
                "id": chunk_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": self.model_id,
                "choices": choices,
                **fields,
            }
            return f"data: {json.dumps(chunk)}\n\n"

        yield event([{"index": i, "delta": {"role": "assistant", "content": ""}} for i in range(n)])
        async for decoded in self._decoding(prompt_tokens, tokens):
            text = "".join(f" {word}" if j else word for j, word in enumerate(words) if sent <= j < decoded)
            sent = decoded
            yield event([{"index": i, "delta": {"content": text}, "finish_reason": None} for i in range(n)])
        yield event([{"index": i, "delta": {}, "finish_reason": "stop"} for i in range(n)])
        options = getattr(request, "stream_options", None)
        if options is not None and getattr(options, "include_usage", False):
            usage = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": tokens * n,
                "total_tokens": prompt_tokens + tokens * n,
            }
            yield event([], usage=usage)

    async def _decoding(self, prompt_tokens: int, tokens: int, priority: int = 0):
        """Take a batch slot (lower ``priority`` values first, as vLLM's priority scheduling) and
        decode: yields the tokens decoded so far after the first token and after each chunk; counts
        the call completed or cancelled."""
        try:
            async with self._slots.slot(priority):
                self._running += 1
                self._stats["peak_batch"] = max(self._stats["peak_batch"], self._running)
                try:
                    if self._extra_delay_s:
                        await asyncio.sleep(self._extra_delay_s)
                    async for decoded in self._decode(prompt_tokens, tokens):
                        yield decoded
                finally:
                    self._running -= 1
        except (asyncio.CancelledError, GeneratorExit):
            self._stats["cancelled"] += 1
            raise
        self._stats["completed"] += 1
        self._stats["completion_tokens"] += tokens

    async def _decode(self, prompt_tokens: int, tokens: int):
        """Sleep as the engine would take: the TTFT, then the tokens in chunks; yields the tokens
        decoded so far after each step."""
        settings = self.settings
        if settings.time_scale == 0:
            yield tokens
            return
        await asyncio.sleep(
            paper_profile.ttft_ms(settings.profile, prompt_tokens) / 1000 * settings.time_scale
        )
        decoded = 1  # the first token came with the TTFT
        yield decoded
        while decoded < tokens:
            step = min(settings.decode_chunk_tokens, tokens - decoded)
            await asyncio.sleep(step * per_token_s(settings, self._running) * settings.time_scale)
            decoded += step
            yield decoded

    async def check_health(self) -> None:
        """LLMServer's health check, which the ingress's readiness check calls: a replica that exists
        answers."""

    async def stats(self) -> dict[str, Any]:
        return {**self._stats, "calls": dict(self._stats["calls"]), "running": self._running}

    async def reset_stats(self) -> None:
        self.reset_stats_now()

    async def replay_dataset(self, dataset: str) -> str:
        """Capacity tests of a shifting stream: replay another dataset's token counts and route shares
        from now on. Returns the replica's id."""
        self.settings = EmulationSettings.model_validate(self.settings.model_dump() | {"dataset": dataset})
        return serve.get_replica_context().replica_id.unique_id

    async def calls_served(self) -> tuple[str, list[tuple[float, str]]]:
        """This replica's id and the (arrival time, request key) of the cascade calls it served since
        the last time it was asked (the log is emptied)."""
        calls, self._calls = list(self._calls), deque(maxlen=100_000)
        return serve.get_replica_context().replica_id.unique_id, calls

    async def inject_delay(self, seconds: float) -> str:
        """Fault drills: make this replica's calls ``seconds`` slower (0 restores it). Returns the
        replica's id, so a caller can tell when every replica has it."""
        self._extra_delay_s = max(0.0, float(seconds))
        return serve.get_replica_context().replica_id.unique_id
