"""Chat completions timed as a client sees them: a streamed one's first and last tokens and its usage,
read from the server-sent events with the moment each arrived; a whole one's latency; and a decoding
speed from the two."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

CHAT = "/v1/chat/completions"


class StreamError(RuntimeError):
    """A stream that failed, or ended without what a timing needs."""


@dataclass(frozen=True)
class StreamTiming:
    first_s: float  # from sending the request to the first chunk that carries content
    end_s: float  # to its last chunk (the finish and the usage): the end of decoding
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # of prompt_tokens, served from the prefix cache; None: not reported


def decode_tokens_per_s(ttft_s: float, stream: StreamTiming) -> float | None:
    """Decoding speed: the stream's tokens after the first, over the time from its first token to the
    stream's end; None for fewer than two tokens or no time. The first token's time is ``ttft_s`` (a
    one-token call's latency for the same prompt length), or the stream's first content chunk when
    that came sooner: the stream's first token was decoded by then, and a one-token call that took
    longer (a slow sample on a busy machine) says nothing of this stream. A stream's own first chunk
    is otherwise no start: ray.serve.llm sends a stream's chunks in batches (every 50 ms by default),
    and only its last batch leaves as soon as decoding ends. Nor is its last content: tokens that
    decode to no text (special tokens after an end of sequence that ``ignore_eos`` decoded past) send
    no chunk."""
    span = stream.end_s - min(ttft_s, stream.first_s)
    if stream.completion_tokens < 2 or span <= 0:
        return None
    return (stream.completion_tokens - 1) / span


def timing_of(started: float, lines: Sequence[tuple[float, str]]) -> StreamTiming:
    """The timing of one stream from its lines, each with the moment it arrived (same clock as
    ``started``): its first chunk with content, its last chunk, and the usage chunk
    (``stream_options.include_usage``)."""
    first = last = None
    usage: dict[str, Any] | None = None
    for at, line in lines:
        if not line.startswith("data:") or line[5:].strip() == "[DONE]":
            continue
        chunk = json.loads(line[5:])
        if "error" in chunk:
            raise StreamError(f"the stream failed: {json.dumps(chunk['error'])[:300]}")
        if first is None and any(
            (choice.get("delta") or {}).get("content") for choice in chunk.get("choices") or []
        ):
            first = at
        last = at
        usage = chunk.get("usage") or usage
    if first is None or last is None:
        raise StreamError("the stream carried no content")
    if usage is None:
        raise StreamError("the stream ended without usage: stream_options.include_usage not honoured")
    details = usage.get("prompt_tokens_details") or {}
    return StreamTiming(
        first_s=first - started,
        end_s=last - started,
        prompt_tokens=int(usage["prompt_tokens"]),
        completion_tokens=int(usage["completion_tokens"]),
        cached_tokens=details.get("cached_tokens"),
    )


async def stream_chat(http: Any, body: dict[str, Any]) -> StreamTiming:
    """Send ``body`` streamed, with usage, on ``http`` (an ``httpx.AsyncClient``) and time it."""
    payload = body | {"stream": True, "stream_options": {"include_usage": True}}
    lines: list[tuple[float, str]] = []
    started = time.perf_counter()
    async with http.stream("POST", CHAT, json=payload) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")
            raise StreamError(f"{body.get('model')}: {response.status_code} {text[:300]}")
        async for line in response.aiter_lines():
            lines.append((time.perf_counter(), line))
    return timing_of(started, lines)


async def complete(http: Any, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """One chat completion, not streamed: its latency in seconds and its JSON; an error names the model
    and the status. With ``max_tokens: 1`` the latency is the time to the first token, which no stream
    batching delays."""
    started = time.perf_counter()
    response = await http.post(CHAT, json=body | {"stream": False})
    latency = time.perf_counter() - started
    if response.status_code != 200:
        raise StreamError(f"{body.get('model')}: {response.status_code} {response.text[:300]}")
    return latency, response.json()
