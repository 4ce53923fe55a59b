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
lines, so no row is written twice; a last line cut short by a crash is dropped before appending.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import IO, Any

from evaluation.run import prediction_of

from .inputs import InputFormat, LineError, Request

_OPENAI_ID = re.compile(r"^batch_req_(\d+)$")


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
        return line if isinstance(line, int) else None
    match = _OPENAI_ID.match(str(row.get("id", "")))
    return int(match.group(1)) if match else None


def output_file(output: Path, fmt: InputFormat, policy: str) -> Path:
    """Where the lines go: the output file itself, or ``predictions/<policy>.jsonl`` in the records'
    output folder."""
    return output if fmt is InputFormat.OPENAI else output / "predictions" / f"{policy}.jsonl"


def drop_partial_last_line(path: Path) -> bool:
    """Cut a last line a crash left without its newline, so the next line starts on its own; a last line
    that is whole JSON but for its newline (``done_lines`` counts it) gets its newline instead. True
    when a line was cut."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb+") as file:
        file.seek(-1, 2)
        if file.read(1) == b"\n":
            return False
        data = path.read_bytes()
        start = data.rfind(b"\n") + 1
        try:
            json.loads(data[start:])
        except ValueError:
            file.truncate(start)
            return True
        file.write(b"\n")
    return False


def done_lines(path: Path, fmt: InputFormat) -> set[int]:
    """The input lines the output already answers (none when it does not exist yet)."""
    return set(answered_ids(path, fmt))


def answered_ids(path: Path, fmt: InputFormat) -> dict[int, str | None]:
    """Input line -> the id its output line names (``custom_id``, a record's ``id``; None for a line
    that was no request): what a rerun checks the input against."""
    if not path.exists():
        return {}
    answered: dict[int, str | None] = {}
    with path.open() as file:
        for text in file:
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except ValueError:
                continue
            line = line_of(row, fmt) if isinstance(row, dict) else None
            if line is not None:
                row_id = row.get("custom_id" if fmt is InputFormat.OPENAI else "id")
                answered[line] = row_id if isinstance(row_id, str) else None
    return answered


class LineWriter:
    """Appends output lines as rows finish; flushed after every group, so a crash loses no written row."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        drop_partial_last_line(path)
        self.path = path
        self._file: IO[str] = path.open("a")

    def write(self, lines: list[str]) -> None:
        for text in lines:
            self._file.write(text + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()
