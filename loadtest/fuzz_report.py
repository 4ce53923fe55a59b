"""What the fuzzer (``loadtest.fuzz``) got back: answers counted per operation, input mode, status and
error code with one example input each, the violations of its checks, and the Markdown table of it."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx


@dataclass
class FuzzReport:
    """Answers per (operation, mode, status, error code), with an example input; the violations."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[tuple[str, str, int, str], str] = field(default_factory=dict)
    violations: list[dict[str, Any]] = field(default_factory=list)
    not_generated: list[str] = field(default_factory=list)  # operation and mode with no input to send
    server_errors: Counter = field(default_factory=Counter)  # 5xx answers by status (backpressure too)

    def add(self, operation: str, mode: str, body: Any, response: httpx.Response) -> None:
        code = ""
        problem = None
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                code = str(error["code"])
                if not isinstance(error.get("message"), str) or not error["message"]:
                    problem = "error without a message"
            except (ValueError, KeyError, TypeError):
                problem = "error body is not {'error': {...}} JSON"
        if response.status_code >= 500 and not (
            response.status_code == 503 and response.headers.get("retry-after")
        ):
            problem = f"server error {response.status_code}"
        key = (operation, mode, response.status_code, code)
        self.counts[key] += 1
        if response.status_code >= 500:
            self.server_errors[response.status_code] += 1
        self.examples.setdefault(key, describe(body))
        if problem:
            self.violations.append(
                {
                    "operation": operation,
                    "mode": mode,
                    "status": response.status_code,
                    "problem": problem,
                    "input": describe(body),
                    "answer": response.text[:300],
                }
            )

    def rows(self) -> list[dict[str, Any]]:
        return [
            {
                "operation": op,
                "mode": mode,
                "status": status,
                "code": code,
                "count": count,
                "example": self.examples[(op, mode, status, code)],
            }
            for (op, mode, status, code), count in sorted(
                self.counts.items(), key=lambda item: (item[0][0], item[0][1], item[0][2], item[0][3])
            )
        ]


def describe(body: Any) -> str:
    """A short, printable, single-line rendering of an input."""
    if isinstance(body, bytes | bytearray):
        text = "b'" + bytes(body).decode("latin-1").encode("unicode_escape").decode("ascii") + "'"
    else:
        text = json.dumps(body, ensure_ascii=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def markdown(report: FuzzReport, example_chars: int = 70) -> str:
    lines = [
        "| operation | input | status | error code | answers | example input |",
        "|---|---|---|---|---|---|",
    ]
    for row in report.rows():
        example = (
            row["example"]
            if len(row["example"]) <= example_chars
            else row["example"][: example_chars - 3] + "..."
        )
        example = example.replace("|", "\\|").replace("`", "'")
        lines.append(
            f"| `{row['operation']}` | {row['mode']} | {row['status']} | {row['code'] or '–'} | "
            f"{row['count']} | `{example}` |"
        )
    return "\n".join(lines) + "\n"
