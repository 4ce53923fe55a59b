"""A scripted VLM client for the cascade's unit tests: it answers by the prompt kind its call names."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field

from serve_app.core.answers import answer_span
from serve_app.core.contracts import (
    GREEDY,
    Completion,
    Decoding,
    EngineCall,
    EngineUnavailableError,
    TokenLogprob,
)
from serve_app.core.prompts import TEMPLATES, TRANSFER_TEMPLATES, PromptKind

# The prompt kinds, as the scripts name them.
S, E, R, S2, T = (
    PromptKind.SIMPLE,
    PromptKind.EXPLAIN,
    PromptKind.REASONING,
    PromptKind.STAGE2,
    PromptKind.TRANSFER,
)
# The first words of every instruction template: where a prompt's instruction starts after its question.
TEMPLATE_OPENINGS = tuple(
    {
        template.split("{reasoning}")[0][:24]
        for template in (*TEMPLATES.values(), *TRANSFER_TEMPLATES.values())
    }
)


@dataclass
class Call:
    prompt_kind: PromptKind | None
    messages: list[dict]
    max_tokens: int
    started_at: float
    finished_at: float | None = None
    cancelled: bool = False
    engine_call: EngineCall | None = None
    decoding: Decoding = GREEDY


def logprobs_for(text: str, confidence: float) -> tuple[TokenLogprob, ...]:
    """Tokens spelling ``text`` whose answer tokens carry probability ``confidence`` in all."""
    start, end = answer_span(text) or (len(text), len(text))
    pieces = [(text[:start], 0.0), (text[start:end], math.log(confidence)), (text[end:], 0.0)]
    return tuple(TokenLogprob(piece, logprob) for piece, logprob in pieces if piece)


@dataclass
class ScriptedVLM:
    """Replies per prompt kind: a text, or an exception to raise. ``delays`` per prompt kind.
    ``confidences`` per prompt kind: the reply comes with token logprobs that give its answer that
    probability (no logprobs for a kind not listed)."""

    replies: dict[PromptKind, str | BaseException]
    delays: dict[PromptKind, float] = field(default_factory=dict)
    confidences: dict[PromptKind, float] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    # Per prompt kind, the reply to a call constrained to an answer's form (an engine's structured
    # outputs); a kind not listed replies as unconstrained.
    constrained: dict[PromptKind, str | BaseException] = field(default_factory=dict)

    async def complete(
        self, messages: list[dict], *, max_tokens: int, call: EngineCall, decoding: Decoding = GREEDY
    ) -> Completion:
        loop = asyncio.get_running_loop()
        kind = call.prompt_kind
        call = Call(kind, messages, max_tokens, started_at=loop.time(), engine_call=call, decoding=decoding)
        self.calls.append(call)
        delay = self.delays.get(kind, 0.0)
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        call.finished_at = loop.time()
        # A stage the script does not answer is a model that failed, as an engine reports it.
        reply = self.replies.get(kind, EngineUnavailableError(f"no scripted reply for {kind}"))
        if call.engine_call is not None and call.engine_call.constraint and kind in self.constrained:
            reply = self.constrained[kind]
        if isinstance(reply, BaseException):
            raise reply
        prompt_words = sum(len(str(part.get("text", "")).split()) + 1 for part in messages[-1]["content"])
        return Completion(
            reply,
            prompt_tokens=prompt_words,
            completion_tokens=len(reply.split()),
            latency_s=delay,
            token_logprobs=logprobs_for(reply, self.confidences[kind]) if kind in self.confidences else None,
        )

    def kinds(self) -> list[PromptKind | None]:
        return [call.prompt_kind for call in self.calls]

    def cancelled(self) -> list[PromptKind | None]:
        return [call.prompt_kind for call in self.calls if call.cancelled]

    def instruction_of(self, index: int) -> str:
        """The instruction of call ``index``: its prompt's text from the template's first words on."""
        text = self.calls[index].messages[-1]["content"][-1]["text"]
        starts = [text.find(opening) for opening in TEMPLATE_OPENINGS if opening in text]
        return text[min(starts) :]


class StreamingHandle:
    """A model deployment's handle as a passthrough calls it (``options(stream=True).chat.remote``):
    its token stream is ``events``; it records the requests sent, the trace context each came with
    (``RawRequestInfo``) and whether it was cancelled."""

    def __init__(self, events):
        self.events, self.requests, self.infos, self.cancelled = events, [], [], False

    def options(self, **_):
        return self

    @property
    def chat(self):
        return self

    def remote(self, request, *info):
        self.requests.append(request)
        self.infos.extend(info)
        return self

    def __aiter__(self):
        return self

    async def _stream(self):
        for packet in self.events:
            yield packet

    def __anext__(self):
        if not hasattr(self, "_packets"):
            self._packets = self._stream()
        return anext(self._packets)

    def cancel(self):
        self.cancelled = True
