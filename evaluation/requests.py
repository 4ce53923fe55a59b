"""The chat request of one labelled record, as mai-eval sends it over HTTP and mai-batch runs it in
process: one module both import, so a row means what the same request means online."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from .records import EvalRecord

_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._:-]")


def user_message(image_url: str, question: str) -> dict[str, Any]:
    """The chat message of one image and a question about it."""
    return {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": image_url}},
            {"type": "text", "text": question},
        ],
    }


def chat_body(
    record: EvalRecord,
    image_url: str,
    policy: str,
    max_tokens: int | None = None,
    transfer_selector: str | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    logprobs: bool = False,
) -> dict[str, Any]:
    """The chat request for one record under one policy: the image and the question in the user
    message, the options, answer kind and cascade options in the ``mai`` extension; ``logprobs``:
    ask for the served answer's (and so every stage's answer confidence)."""
    mai: dict[str, Any] = {}
    request_options = dict(options or {}) | (
        {"transfer_selector": transfer_selector} if transfer_selector else {}
    )
    if request_options:
        mai["options"] = request_options
    if record.choices:
        mai["choices"] = list(record.choices)
    if record.answer_type:
        mai["answer_type"] = record.answer_type
    body: dict[str, Any] = {"model": policy, "messages": [user_message(image_url, record.question)]}
    if mai:
        body["mai"] = mai
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if logprobs:
        body["logprobs"] = True
    return body


def request_id(policy: str, record_id: str, *, source: str = "eval") -> str:
    """An ``x-request-id`` the server accepts, naming the source (``eval``, ``batch``), the policy and
    the record for log correlation."""
    token = _UNSAFE_ID_CHARS.sub("_", f"{source}.{policy}.{record_id}")
    if len(token) <= 128:
        return token
    return token[:111] + "." + hashlib.sha256(token.encode()).hexdigest()[:16]
