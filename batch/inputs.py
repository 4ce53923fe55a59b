"""One input line -> the chat request it stands for, or the error that line gets (pure, no Ray).

Two formats, one line each:

- the OpenAI Batch API's request file (also vLLM's ``run-batch``)::

      {"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}

  ``body`` is the same chat completion request the server takes, ``model`` included;
- ``mai-eval``'s dataset records (evaluation/records.py)::

      {"id": "q1", "image": "images/1.png", "question": "...", "answer": "...", "metric": "exact"}

  (``images`` and ``turns`` optional: more images, the conversation before the question), turned into
  the chat request ``mai-eval run`` sends for the record under one policy
  (``evaluation.requests.chat_body``), so a row means what the same request means online.

A line that cannot be a request (not JSON, another endpoint, no ``custom_id``, a duplicate, an invalid
record, an unreadable image) becomes a ``LineError``: the 400 the server would answer, naming the problem.
So does a line past a limit, naming it: longer than ``max_line_bytes`` (never read whole, batch/lines.py),
JSON past the server's ``limits`` on nesting, keys, values, digits (``parse_json``, the server's own check,
made before the parser runs), text that is no Unicode (an escaped lone surrogate: ``invalid_text``, naming
the field), an image path (``image``, ``images[i]``, ``turns[i].images[j]``, named so) out of the image
root, no regular file, or larger than ``limits.max_image_bytes`` (batch/images.py).
Everything past the line's shape (an unknown model, a bad image, an unsupported parameter) is the
server's own check, made when the row runs (``IngressReplica.chat``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evaluation.records import EvalRecord, image_fields
from evaluation.requests import chat_body, request_id
from serve_app.config import Limits
from serve_app.edge.body import parse_json
from serve_app.edge.errors import RequestError, describe_validation_error

from .images import ImageRefused, image_data_url
from .lines import Overlong

CHAT_URL = "/v1/chat/completions"


class InputFormat(StrEnum):
    OPENAI = "openai"  # the OpenAI Batch API's request lines
    RECORDS = "records"  # mai-eval's dataset records


@dataclass(frozen=True)
class LineError:
    """Why a line is no request: the server's 400 body, and OpenAI's line-level ``error``."""

    message: str
    code: str = "invalid_request"
    param: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": "invalid_request_error",
                "param": self.param,
                "code": self.code,
            }
        }


@dataclass(frozen=True)
class Request:
    """A line's chat request: ``row_id`` names it in the output (``custom_id``, or the record's id),
    ``request_id`` is what the server would take from ``x-request-id``."""

    row_id: str
    body: dict[str, Any]
    request_id: str
    record: EvalRecord | None = None


@dataclass(frozen=True)
class RecordSettings:
    """How records become requests: the policy (the request's ``model``) and the ``mai.options``
    every request carries, as ``mai-eval run`` sends them."""

    policy: str = "mai"
    options: tuple[tuple[str, Any], ...] = ()
    max_tokens: int | None = None
    image_root: str | None = None  # image paths must resolve under it (default: the input's folder)


def json_of(text: str, line: int, limits: Limits) -> Any | LineError:
    """A line's JSON, parsed as the server parses a body (``parse_json``: nesting, keys, values, digits
    within ``limits``, checked before the parser runs), or the error naming what it is past."""
    try:
        return parse_json(text.encode("utf-8", errors="surrogatepass"), limits)
    except RequestError as exc:
        return LineError(f"line {line}: {exc.message}", code=exc.code, param=exc.param)


def line_too_long(line: int, overlong: Overlong) -> LineError:
    """The error of a line longer than the job takes (never read whole: only its size is known)."""
    return LineError(
        f"line {line} has {overlong.size} bytes, over the limit of {overlong.limit} (--max-line-bytes)",
        code="line_too_long",
    )


def _format_of_value(value: Any) -> InputFormat | None:
    if not isinstance(value, dict):
        return None
    if "custom_id" in value or "body" in value:
        return InputFormat.OPENAI
    if "question" in value and "image" in value:
        return InputFormat.RECORDS
    return None


def row_id_of(text: str, fmt: InputFormat, limits: Limits | None = None) -> str | None:
    """The id a line names (``custom_id`` or the record's ``id``), when it names one: what the
    duplicate check reads."""
    value = json_of(text, 0, limits or Limits()) if text else None
    if not isinstance(value, dict):
        return None
    found = value.get("custom_id" if fmt is InputFormat.OPENAI else "id")
    if fmt is InputFormat.RECORDS and isinstance(found, int) and not isinstance(found, bool):
        found = str(found)  # as EvalRecord reads it; an OpenAI custom_id must be a string
    return found if isinstance(found, str) and found else None


def _json_object(text: str, line: int, limits: Limits) -> dict[str, Any] | LineError:
    value = json_of(text, line, limits)
    if isinstance(value, LineError):
        return value
    if not isinstance(value, dict):
        return LineError(f"line {line} is not a JSON object", code="invalid_json")
    return value


def openai_request(text: str, line: int, limits: Limits | None = None) -> Request | LineError:
    """A line of an OpenAI batch file: its ``body`` for ``/v1/chat/completions``."""
    value = _json_object(text, line, limits or Limits())
    if isinstance(value, LineError):
        return value
    custom_id = value.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return LineError(f"line {line} has no custom_id (a non-empty string)", param="custom_id")
    method = value.get("method", "POST")
    if method != "POST":
        return LineError(f"method {method!r} is not served: POST only", param="method")
    url = value.get("url", CHAT_URL)
    if url != CHAT_URL:
        return LineError(f"url {url!r} is not served: {CHAT_URL} only", param="url", code="unsupported_url")
    body = value.get("body")
    if not isinstance(body, dict):
        return LineError(f"line {line} has no body (the chat completion request object)", param="body")
    if body.get("stream"):
        return LineError("stream is not served in a batch: each row's reply is one line", param="stream")
    model = body.get("model")
    return Request(
        row_id=custom_id,
        body=body,
        request_id=request_id(model if isinstance(model, str) else "none", custom_id, source="batch"),
    )


def record_request(
    text: str, line: int, base: Path, settings: RecordSettings, limits: Limits | None = None
) -> Request | LineError:
    """A mai-eval record: the request ``mai-eval run`` sends for it under ``settings.policy``, each of
    its images (``image``, ``images``, the turns') read from ``base`` (the dataset's folder) when it is
    a path, and only from under ``settings.image_root`` (default ``base``), of at most
    ``limits.max_image_bytes``; the first refused is the error, naming its field."""
    limits = limits or Limits()
    value = _json_object(text, line, limits)
    if isinstance(value, LineError):
        return value
    try:
        record = EvalRecord.model_validate(value)
    except ValidationError as exc:
        message, param = describe_validation_error(exc)
        return LineError(f"line {line}: {message}", param=param)
    root = Path(settings.image_root) if settings.image_root is not None else base
    images: dict[str, str] = {}
    for field, image in image_fields(record):
        try:
            images[field] = image_data_url(image, base, root, limits.max_image_bytes)
        except ImageRefused as exc:
            where = "" if field == "image" else f"{field}: "
            return LineError(f"line {line}: {where}{exc.message}", param=field, code=exc.code)
    body = chat_body(
        record, images, settings.policy, max_tokens=settings.max_tokens, options=dict(settings.options)
    )
    return Request(
        row_id=record.id,
        body=body,
        request_id=request_id(settings.policy, record.id, source="batch"),
        record=record,
    )


def parse_line(
    text: str,
    line: int,
    fmt: InputFormat,
    *,
    base: Path,
    settings: RecordSettings,
    duplicates: Mapping[int, int],
    limits: Limits | None = None,
) -> Request | LineError:
    """One line as a request, or its error. ``duplicates``: line -> the earlier line with its id;
    ``limits``: the config's (JSON and image limits)."""
    if line in duplicates:
        return LineError(
            f"line {line} repeats the id of line {duplicates[line]}: each row needs its own",
            param="custom_id" if fmt is InputFormat.OPENAI else "id",
            code="duplicate_id",
        )
    if fmt is InputFormat.OPENAI:
        return openai_request(text, line, limits)
    return record_request(text, line, base, settings, limits)


class InputFormatError(ValueError):
    """An input that is no batch: empty, or in neither format."""


def first_format(number: int, text: str | Overlong, limits: Limits | None = None) -> InputFormat:
    """The format of an input whose first line is ``text``; ``InputFormatError`` when it is neither."""
    if isinstance(text, Overlong):
        raise InputFormatError(
            f"line {number} has {text.size} bytes, over the limit of {text.limit} (--max-line-bytes): "
            "its format is not read; pass --format"
        )
    value = json_of(text, number, limits or Limits())
    fmt = _format_of_value(value)
    if fmt is None:
        why = f" ({value.message})" if isinstance(value, LineError) else ""  # no JSON, or past a limit
        raise InputFormatError(
            f"line {number} is neither an OpenAI batch request (custom_id, body) nor a mai-eval "
            f"record (id, image, question){why}; pass --format if the first line is a bad one"
        )
    return fmt


class OutputMismatchError(ValueError):
    """An output to resume that answers another input."""


@dataclass(frozen=True)
class InputScan:
    """What one pass over the input's ids found: its format, its rows, the lines whose id an earlier
    line already took (line -> that earlier line)."""

    fmt: InputFormat
    rows: int
    duplicates: dict[int, int]
    answered: frozenset[int] = frozenset()  # the input's lines an existing output answers


def scan_lines(
    lines: Iterable[tuple[int, str | Overlong]],
    fmt: InputFormat | None = None,
    answered: Mapping[int, str | None] | None = None,
    limits: Limits | None = None,
) -> InputScan:
    """The format (the first line's, unless given), the row count and the duplicate ids of numbered
    lines. Keeps one entry per id: the ids of a dataset, never its images. ``answered``: the ids an
    existing output gives its lines (``outputs.answered_ids``); a line whose id differs means the output
    answers another input, an ``OutputMismatchError``. A line too long to read is a row with no id."""
    answered, limits = answered or {}, limits or Limits()
    first_line: dict[str, int] = {}
    duplicates: dict[int, int] = {}
    done: set[int] = set()
    rows = 0
    for number, text in lines:
        if fmt is None:
            fmt = first_format(number, text, limits)
        rows += 1
        row_id = None if isinstance(text, Overlong) else row_id_of(text, fmt, limits)
        if number in answered:
            done.add(number)
        if answered.get(number) is not None and answered[number] != row_id:
            raise OutputMismatchError(
                f"answers line {number} as {answered[number]!r}, but that line of the input is "
                f"{row_id!r}: it holds another input's answers; choose another --output"
            )
        if row_id is None:
            continue
        if row_id in first_line:
            duplicates[number] = first_line[row_id]
        else:
            first_line[row_id] = number
    if fmt is None or rows == 0:
        raise InputFormatError("the input has no lines")
    return InputScan(fmt, rows, duplicates, frozenset(done))
