"""The chat request of one labelled record, as mai-eval sends it over HTTP and mai-batch runs it in
process: one module both import, so a row means what the same request means online."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .records import EvalRecord, image_fields

_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._:-]")


def user_message(image_url: str | Sequence[str], question: str) -> dict[str, Any]:
    """The chat message of one image (or several, in order) and a question about them."""
    urls = [image_url] if isinstance(image_url, str) else image_url
    images = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return {"role": "user", "content": [*images, {"type": "text", "text": question}]}


def conversation(record: EvalRecord, image_urls: str | Mapping[str, str]) -> list[dict[str, Any]]:
    """A record's messages: its turns in order (a user turn's images, then its text; an assistant
    turn's text), then the question's user turn (its images, then the question). ``image_urls``: each
    image's data URL by its field (``records.image_fields``), or the ``image``'s alone, when the
    record's other images (if any) are data URLs already."""
    urls = {"image": image_urls} if isinstance(image_urls, str) else dict(image_urls)
    for field, image in image_fields(record):
        if field not in urls:
            if not image.startswith("data:"):
                raise ValueError(f"record {record.id!r}: {field} ({image!r}) is not read as a data URL")
            urls[field] = image
    messages: list[dict[str, Any]] = []
    for number, turn in enumerate(record.turns or ()):
        if turn.role == "assistant":
            messages.append({"role": "assistant", "content": turn.text})
        else:
            images = [urls[f"turns[{number}].images[{index}]"] for index in range(len(turn.images))]
            message = user_message(images, turn.text)
            if not turn.text:  # a turn of images alone
                message["content"].pop()
            messages.append(message)
    question_images = [urls["image"], *(urls[f"images[{i}]"] for i in range(len(record.images or ())))]
    messages.append(user_message(question_images, record.question))
    return messages


def chat_body(
    record: EvalRecord,
    image_url: str | Mapping[str, str],
    policy: str,
    max_tokens: int | None = None,
    transfer_selector: str | None = None,
    options: Mapping[str, Any] | None = None,
    *,
    logprobs: bool = False,
) -> dict[str, Any]:
    """The chat request for one record under one policy: the record's turns, then its images and the
    question in the last user message (``conversation``; ``image_url`` as it reads it), the options,
    answer kind and cascade options in the ``mai`` extension; ``logprobs``: ask for the served answer's
    (and so every stage's answer confidence)."""
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
    body: dict[str, Any] = {"model": policy, "messages": conversation(record, image_url)}
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
