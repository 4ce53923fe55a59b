"""Where a chat request for ``mai`` goes: the cascade when MAI fits it, else the large model unchanged.

MAI fits a request that is
- one user turn (system or developer messages before it are allowed, no assistant or tool turns),
- with exactly one image,
- whose question wants a short answer: its text does not open with, or ask for, open generation
  (describe, explain, write, list, summarize, tell, generate, compose, create, caption, translate,
  compare, why ...),
- and carries only parameters the cascade honours (``HONOURED``; ``n`` only at 1).
``max_tokens`` is a cap on every stage's budget, never a signal. A server setting (``mai_route``) and a
request's ``mai.route`` force either way. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .protocol import ChatRequest

# The chat request fields a cascade policy honours (see README, "Parameters").
HONOURED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "stream",
        "stream_options",
        "mai",
        "user",
        "n",
        "temperature",
        "top_p",
        "seed",
        "logprobs",
        "top_logprobs",
    }
)
# Honoured only at these values (the cascade answers with one choice).
HONOURED_VALUES: Mapping[str, Any] = {"n": 1}
_OPEN_GENERATION = re.compile(
    r"^\s*(?:please\s+|can you\s+|could you\s+)?(?:describe|explain|write|list|summari[sz]e|tell\b|generate"
    r"|compose|create|caption|translate|compare|elaborate|discuss|narrate|draft|why\b|what\s+happens)",
    re.IGNORECASE,
)


def unhonoured_parameters(payload: Mapping[str, Any]) -> list[str]:
    """The request's parameters a cascade policy would not honour, by name."""
    names = []
    for name, value in payload.items():
        if value is None:
            continue
        if name not in HONOURED or (name in HONOURED_VALUES and value != HONOURED_VALUES[name]):
            names.append(name)
    return sorted(names)


def wants_open_answer(text: str) -> bool:
    """An instruction for open generation (describe, explain, write, list ...), not a short answer."""
    return any(
        _OPEN_GENERATION.match(sentence) for sentence in re.split(r"(?<=[.!?])\s+|\n+", text) if sentence
    )


def passthrough_reason(request: ChatRequest, payload: Mapping[str, Any]) -> str | None:
    """Why MAI does not fit ``request`` (it then goes to the large model unchanged), or None when it fits."""
    turns = [message.role for message in request.messages if message.role not in ("system", "developer")]
    if turns != ["user"]:
        return "a conversation of several turns" if len(turns) > 1 else "no single user turn"
    [user] = [message for message in request.messages if message.role == "user"]
    parts = [] if isinstance(user.content, str) or user.content is None else user.content
    images = sum(part.type == "image_url" for part in parts)
    if images != 1:
        return "no image" if images == 0 else f"{images} images"
    text = (
        user.content
        if isinstance(user.content, str)
        else " ".join(p.text or "" for p in parts if p.type == "text")
    )
    if wants_open_answer(text):
        return "an instruction for open generation"
    unhonoured = unhonoured_parameters(payload)
    if unhonoured:
        return f"parameters the cascade does not honour: {', '.join(unhonoured)}"
    return None
