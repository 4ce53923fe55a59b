"""A row's reply -> its output line, and the output a rerun resumes from (pure but for the file).

OpenAI batch input gets OpenAI's batch output, one line per row (vLLM's ``run-batch`` writes the same)::

    {"id": "batch_req_7", "custom_id": "q1",
     "response": {"status_code": 200, "request_id": "...", "body": {chat.completion, with "mai"}},
     "error": null}

A request the server refused keeps its response (the 4xx and its error body); a line that is no request
at all (not JSON, another url, a duplicate id) has ``response: null`` and ``error: {code, message}``.

mai-eval records get ``mai-eval run``'s folder: ``predictions/<policy>.jsonl`` (``prediction_of``'s
rows), ``manifest.json`` and ``runs.jsonl``, so ``mai-eval report OUT`` scores a batch run.

Every line names the input line it answers (``batch_req_<line>``, or ``line``): a rerun skips those
lines, so no row is written twice; a last line cut short by a crash is dropped before appending. A rerun,
with ``--retry-errors`` or without, takes an existing output only when every line of it is one of these
(a last line without its newline: the start of one), blank lines included: a file mai-batch did not
write, or has been edited since, is refused as it is, naming the first line that is none, never cut,
rewritten or appended to.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, BinaryIO

from evaluation.predictions import prediction_of

from .inputs import InputFormat, LineError, OutputMismatchError, Request
from .lines import CHUNK_BYTES, Overlong, numbered_raw_lines

_OPENAI_ID = re.compile(r"^batch_req_(\d+)$")
OUTPUT_LINE_BYTES = 64 << 20  # longest output line taken: a reply with its trace is far shorter
# How every line this module writes starts (json.dumps, "id" first): a crash's partial line starts so.
_START = {InputFormat.OPENAI: b'{"id": "batch_req_', InputFormat.RECORDS: b'{"id": "'}


class ForeignOutputError(OutputMismatchError):
    """An existing output mai-batch did not write: a line of it is no output line of the format."""


def openai_reply_line(line: int, request: Request, status: int, body: Any) -> dict[str, Any]:
    return {
        "id": f"batch_req_{line}",
        "custom_id": request.row_id,
        "response": {"status_code": status, "request_id": request.request_id, "body": body},
        "error": None,
    }


def openai_error_line(line: int, custom_id: str | None, error: LineError) -> dict[str, Any]:
    return {
        "id": f"batch_req_{line}",
        "custom_id": custom_id,
        "response": None,
        "error": {"code": error.code, "message": error.message},
    }


def record_reply_line(
    line: int, request: Request, policy: str, status: int, latency_s: float, body: Any
) -> dict[str, Any]:
    assert request.record is not None
    return prediction_of(request.record, policy, status, latency_s, body) | {"line": line}


def record_error_line(line: int, row_id: str | None, policy: str, error: LineError) -> dict[str, Any]:
    return {
        "id": row_id or f"line-{line}",
        "policy": policy,
        "status": 400,
        "latency_s": 0.0,
        "error": error.message,
        "line": line,
    }


def line_of(row: dict[str, Any], fmt: InputFormat) -> int | None:
    """The input line an output line answers."""
    if fmt is InputFormat.RECORDS:
        line = row.get("line")
        return line if isinstance(line, int) and not isinstance(line, bool) and line > 0 else None
    match = _OPENAI_ID.match(str(row.get("id", "")))
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


def output_file(output: Path, fmt: InputFormat, policy: str) -> Path:
    """Where the lines go: the output file itself, or ``predictions/<policy>.jsonl`` in the records'
    output folder."""
    return output if fmt is InputFormat.OPENAI else output / "predictions" / f"{policy}.jsonl"


def fault_of(row: Any, fmt: InputFormat) -> str | None:
    """Why ``row`` is no output line of ``fmt`` as this module writes them, or None when it is one."""
    if not isinstance(row, dict):
        return "is not a JSON object"
    if line_of(row, fmt) is None:
        return (
            "names no input line ("
            + ("an id batch_req_<line>" if fmt is InputFormat.OPENAI else "line")
            + ")"
        )
    if fmt is InputFormat.OPENAI:
        if "custom_id" not in row or not isinstance(row["custom_id"], str | None):
            return "has no custom_id"
        response, error = row.get("response"), row.get("error")
        if not (isinstance(response, dict) and error is None or response is None and isinstance(error, dict)):
            return "has neither a response nor an error (an object, the other null)"
        return None
    kinds = {"id": str, "policy": str, "status": int, "latency_s": int | float}
    missing = [key for key, kind in kinds.items() if not isinstance(row.get(key), kind)]
    return f"has no {', '.join(missing)} (a prediction's)" if missing else None


_NOT_JSON = object()


def _parsed(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the parser's recursion
        return _NOT_JSON


def _rows(path: Path, fmt: InputFormat) -> Iterator[tuple[int, dict[str, Any]]]:
    """The output's lines as rows, each with its line number; ``ForeignOutputError`` at the first that
    is no output line (a blank one too: mai-batch writes none). A last line without its newline is a
    row when whole, else it must start as one (a crash's partial line, skipped)."""
    with path.open("rb") as file:
        ended = _last_byte(file) in (b"", b"\n")
        held: tuple[int, bytes | Overlong] | None = None
        for number, raw in numbered_raw_lines(file, OUTPUT_LINE_BYTES):
            if held is not None:
                yield held[0], _row(path, *held, fmt)
            if not isinstance(raw, Overlong) and not raw.strip():
                raise _foreign(
                    path, number, "is blank (mai-batch writes none)", "delete it, or choose another --output"
                )
            held = (number, raw)
        if held is None:
            return
        number, raw = held
        if ended or isinstance(raw, Overlong) or fault_of(_parsed(raw), fmt) is None:
            yield number, _row(path, number, raw, fmt)
        elif not (raw.startswith(_START[fmt]) or _START[fmt].startswith(raw)):
            raise _foreign(path, number, f"does not start as an output line ({_START[fmt].decode()}...)")


def _row(path: Path, number: int, raw: bytes | Overlong, fmt: InputFormat) -> dict[str, Any]:
    if isinstance(raw, Overlong):
        raise _foreign(path, number, f"has {raw.size} bytes, over the {raw.limit} of an output line")
    row = _parsed(raw)
    fault = "is not JSON" if row is _NOT_JSON else fault_of(row, fmt)
    if fault is not None:
        raise _foreign(path, number, fault)
    return row


def _foreign(
    path: Path, number: int, fault: str, remedy: str = "choose another --output"
) -> ForeignOutputError:
    return ForeignOutputError(
        f"is no mai-batch output: line {number} of {path} {fault}; nothing was changed: {remedy}"
    )


def _last_byte(file: BinaryIO) -> bytes:
    file.seek(0, 2)
    if file.tell() == 0:
        return b""
    file.seek(-1, 2)
    last = file.read(1)
    file.seek(0)
    return last


def _last_line_start(file: BinaryIO) -> int:
    """Where the file's last line starts, read backwards a chunk at a time."""
    end = file.seek(0, 2)
    while end > 0:
        begin = max(0, end - CHUNK_BYTES)
        file.seek(begin)
        newline = file.read(end - begin).rfind(b"\n")
        if newline >= 0:
            return begin + newline + 1
        end = begin
    return 0


def drop_partial_last_line(path: Path, fmt: InputFormat) -> bool:
    """Cut a last line a crash left without its newline, so the next line starts on its own; a last line
    that is a whole output line but for its newline (``done_lines`` counts it) gets its newline instead.
    True when a line was cut. ``ForeignOutputError``, the file unchanged, when any line of it is no
    output line (``answered_ids``)."""
    if not path.exists():
        return False
    answered_ids(path, fmt)  # every line checked before any byte changes
    with path.open("rb+") as file:
        if _last_byte(file) in (b"", b"\n"):
            return False
        start = _last_line_start(file)
        file.seek(start)
        if fault_of(_parsed(file.read()), fmt) is None:
            file.write(b"\n")
            return False
        file.truncate(start)
    return True


def done_lines(path: Path, fmt: InputFormat) -> set[int]:
    """The input lines the output already answers (none when it does not exist yet)."""
    return set(answered_ids(path, fmt))


def answered_ids(path: Path, fmt: InputFormat) -> dict[int, str | None]:
    """Input line -> the id its output line names (``custom_id``, a record's ``id``; None for a line
    that was no request): what a rerun checks the input against. ``ForeignOutputError`` when a line
    is no output line of ``fmt`` (an output mai-batch did not write)."""
    if not path.exists():
        return {}
    answered: dict[int, str | None] = {}
    for _, row in _rows(path, fmt):
        line = line_of(row, fmt)
        assert line is not None  # fault_of checked it
        row_id = row.get("custom_id" if fmt is InputFormat.OPENAI else "id")
        answered[line] = row_id if isinstance(row_id, str) else None
    return answered


class LineWriter:
    """Appends output lines as rows finish; flushed after every group, so a crash loses no written row.
    Refuses (``ForeignOutputError``) an existing file that is no output of ``fmt``."""

    def __init__(self, path: Path, fmt: InputFormat):
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_partial_last_line(path, fmt)
        self.path = path
        self._file: IO[str] = path.open("a")

    def write(self, lines: list[str]) -> None:
        for text in lines:
            self._file.write(text + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# A row that failed on the server's side: the models (5xx), its time (408, 504) or the load (429).
SERVER_SIDE = frozenset({408, 429})


def status_of(row: dict[str, Any], fmt: InputFormat) -> int | None:
    """The HTTP status an output line records; None for a line that was no request at all."""
    if fmt is InputFormat.OPENAI:
        response = row.get("response")
        status = response.get("status_code") if isinstance(response, dict) else None
    else:
        status = row.get("status")
    return status if isinstance(status, int) else None


def retried(status: int | None, *, client_errors: bool = False) -> bool:
    """Whether ``--retry-errors`` answers a row again: a server-side failure, and a 4xx when asked."""
    if status is None:  # the line is no request (not JSON, a duplicate id): it would fail the same way
        return False
    return status >= 500 or status in SERVER_SIDE or (client_errors and 400 <= status < 500)


def drop_errors(path: Path, fmt: InputFormat, *, client_errors: bool = False) -> frozenset[int]:
    """Takes the lines of rows ``retried`` out of the output, so that the run answers them again and
    its lines replace theirs; the input lines they answered. Every line is read as a row first (the
    reader of ``answered_ids``): an output with a line that is none is refused (``ForeignOutputError``
    naming it) before any byte changes. The lines kept are copied byte for byte into a file beside the
    output, renamed over it: a crash leaves the old output or the new, and a rerun answers whatever is
    missing."""
    if not path.exists():
        return frozenset()
    drop_partial_last_line(path, fmt)  # every line read as a row before any byte changes
    dropped: dict[int, int] = {}  # the output's line -> the input line it answers
    for number, row in _rows(path, fmt):
        if retried(status_of(row, fmt), client_errors=client_errors):
            line = line_of(row, fmt)
            assert line is not None  # fault_of checked it
            dropped[number] = line
    if not dropped:
        return frozenset()
    partial = path.with_name(path.name + ".retry")
    # Numbered as ``_rows`` numbers them: lines end at b"\n" alone, and the last one has its newline.
    with path.open("rb") as source, partial.open("wb") as kept:
        for number, text in enumerate(source, start=1):
            if number not in dropped:
                kept.write(text)
    os.replace(partial, path)
    return frozenset(dropped.values())
