"""A hostile caller against a running server: what anyone may send when the API is open.

Crafted requests, each of which must get its 4xx within a time bound: bodies that made a regex
backtrack, nesting past the limit, brackets as large as the body limit (16 MiB), text that is no
Unicode (an escaped lone surrogate in a question, a system message, a message to a model, an
answer's question), image parts in every spelling vLLM's parser takes pointing at a
local listener (which must see no connection: the engines fetch nothing a client names), parts and
fields only the server may set, bodies sent a byte at a time (from another loopback address, so that
the bound per client address is tested too). Beside them: task tags past the class bound, one
request id sent again and again (the server's audit sample must not follow it), and a normal request
whose latency is measured alone and then beside a flood of the hostile bodies (these two each run
afresh: ``Cache-Control: no-store, no-cache``, no answer the cache reused).

    python -m loadtest.hostile --url http://127.0.0.1:8000 --out experiments/safe-to-expose/hostile-after.json
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import secrets
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from loadtest.hostile_cases import (
    IMAGE_PATH,
    HostileOutcome,
    HostileTarget,
    answer_cases,
    listener,
    request_cases,
    send,
    slow_body,
)
from serve_app.core.routes import AUDITED

QUESTION = "What is the color of the shape?"
# For the requests that ask one question again and again: each runs the cascade, none is an answer the
# server's cache reused (a header, which a server from before the cache ignores).
NO_REUSE = {"cache-control": "no-store, no-cache"}


# ---------------------------------------------------------------- normal requests beside them


def normal_latencies(client: httpx.Client, target: HostileTarget, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.monotonic()
        body = cascade_body(target, QUESTION)
        client.post("/v1/chat/completions", json=body, headers=NO_REUSE).raise_for_status()
        seconds.append(time.monotonic() - started)
    return seconds


def summary(values: list[float]) -> dict[str, Any]:
    ordered = sorted(values)
    return {
        "n": len(values),
        "median_s": round(statistics.median(ordered), 4),
        "p90_s": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 4),
        "max_s": round(ordered[-1], 4),
    }


# ---------------------------------------------------------------- the server's own state


def cascade_body(target: HostileTarget, question: str = "Is the shape red?", **mai: Any) -> dict[str, Any]:
    content = [
        {"type": "image_url", "image_url": {"url": target.image}},
        {"type": "text", "text": question},
    ]
    return {
        "model": "mai",
        "messages": [{"role": "user", "content": content}],
        **({"mai": mai} if mai else {}),
    }


def tag_flood(client: httpx.Client, target: HostileTarget, tags: int) -> dict[str, Any]:
    """``tags`` requests, each with a task tag of its own: how many classes the server made of them."""
    run_tag = secrets.token_hex(3)  # tags no earlier run sent
    before = set(client.get("/v1/mai/stats").json()["classes"])
    statuses = [
        client.post(
            "/v1/chat/completions", json=cascade_body(target, task=f"flood-{run_tag}-{i}")
        ).status_code
        for i in range(tags)
    ]
    after = set(client.get("/v1/mai/stats").json()["classes"])
    return {
        "tags_sent": tags,
        "answered": statuses.count(200),
        "classes_created": len(after - before),
        "tasks": client.get("/v1/mai/stats").json().get("tasks"),
    }


def sampled_id(seed: int = 0, rate: float = 0.05) -> str:
    """A request id the public seeded hash puts in the audit sample (what a client could compute
    when the server hashed its id with a known seed)."""
    for n in range(100_000):
        candidate = f"steer-{n}"
        digest = hashlib.sha256(f"{seed}:{candidate}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 < rate:
            return candidate
    raise RuntimeError("no id found")


def reused_id_flood(client: httpx.Client, target: HostileTarget, requests: int) -> dict[str, Any]:
    """``requests`` requests with one request id chosen to be sampled: how many the server sampled
    for audit (audited, or shed or refused for want of room)."""

    def sampled() -> int:
        stats = client.get("/v1/mai/stats").json()
        audited = sum(entry["audit"]["audited"] for entry in stats["classes"].values())
        return audited + sum(stats["audit"]["not_run"].values())

    request_id = sampled_id()
    before = sampled()
    routes: Counter[str] = Counter()
    for _ in range(requests):  # run afresh: a reused answer is never audited, sampled or not
        response = client.post(
            "/v1/chat/completions", json=cascade_body(target), headers={"x-request-id": request_id} | NO_REUSE
        )
        routes[response.headers.get("x-mai-route", str(response.status_code))] += 1
    time.sleep(2)  # audits run after their replies
    auditable = sum(count for route, count in routes.items() if route in AUDITED)
    return {
        "request_id": request_id,
        "requests": requests,
        "routes": dict(routes),
        "auditable": auditable,
        "sampled": sampled() - before,
    }


# ---------------------------------------------------------------- the run


def run(
    base_url: str,
    *,
    body_size: int = 1024 * 1024,
    max_body_bytes: int = 16 * 1024 * 1024,
    bound_s: float = 5.0,
    body_timeout_s: float = 30.0,
    slow_senders: int = 40,
    normal: int = 8,
    tags: int = 40,
    reused: int = 40,
    api_key: str | None = None,
) -> dict[str, Any]:
    """Every crafted case, the slow senders and the floods against ``base_url``; the report."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    image = "data:image/png;base64," + base64.b64encode(IMAGE_PATH.read_bytes()).decode()
    with (
        listener() as (url, asked),
        httpx.Client(base_url=base_url, timeout=bound_s * 12, headers=headers) as client,
    ):
        models = [model["id"] for model in client.get("/v1/models").json()["data"] if "policy" not in model]
        target = HostileTarget(base_url, image, models[-1], url)
        cases = request_cases(target, body_size, max_body_bytes)
        outcomes = [send(client, *case, bound_s) for case in cases]
        outcomes += [send(client, *case, bound_s, path="/v1/mai/answer") for case in answer_cases(target)]
        outcomes += [
            HostileOutcome(
                "GET /docs", "no internals", client.get("/docs").status_code, 0.0, (404,), bound_s
            ),
            HostileOutcome(
                "GET /openapi.json",
                "no internals",
                client.get("/openapi.json").status_code,
                0.0,
                (401, 404),
                bound_s,
            ),
        ]
        readyz = client.get("/readyz").text
        normal_latencies(client, target, 2)  # warm-up: the first requests after a start are slow
        alone = normal_latencies(client, target, normal)
        slow_cap = body_timeout_s + 15
        with ThreadPoolExecutor(max_workers=slow_senders + 4) as pool:
            slow = [pool.submit(slow_body, base_url, slow_cap) for _ in range(slow_senders)]
            hostile = [pool.submit(send, client, *cases[0], bound_s) for _ in range(4)]
            beside = normal_latencies(client, target, normal)
            slow_results = [future.result() for future in slow]
            outcomes += [future.result() for future in hostile]
        for status, seconds in slow_results:
            expected, limit = ((408, 429), body_timeout_s + 10)
            outcomes.append(
                HostileOutcome("body a byte at a time", "slow bodies", status, seconds, expected, limit)
            )
        tag_result = tag_flood(client, target, tags)
        audit_result = reused_id_flood(client, target, reused)
    return {
        "cases": [asdict(outcome) for outcome in outcomes],
        "failed_cases": [asdict(outcome) for outcome in outcomes if not outcome.ok],
        "listener_requests": asked,
        "readyz_names_models": any(model in readyz for model in models),
        "slow_senders": {
            "senders": slow_senders,
            "by_status": {
                str(status): sum(1 for s, _ in slow_results if s == status)
                for status in sorted({s for s, _ in slow_results})
            },
            "longest_s": round(max((seconds for _, seconds in slow_results), default=0.0), 2),
        },
        "normal_latency": {"alone": summary(alone), "beside_hostile": summary(beside)},
        "tag_flood": tag_result,
        "reused_request_id": audit_result,
        "settings": {
            "body_size": body_size,
            "max_body_bytes": max_body_bytes,
            "bound_s": bound_s,
            "body_timeout_s": body_timeout_s,
            "slow_senders": slow_senders,
            "normal_requests": normal,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--body-size", type=int, default=1024 * 1024, help="bytes of the backtracking body")
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=16 * 1024 * 1024,
        help="the server's limits.max_body_bytes: the size of the largest bodies sent",
    )
    parser.add_argument("--bound-s", type=float, default=5.0, help="seconds a hostile request may take")
    parser.add_argument(
        "--body-timeout-s", type=float, default=30.0, help="the server's limits.body_timeout_s"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    started = time.time()
    report = run(
        args.url,
        body_size=args.body_size,
        max_body_bytes=args.max_body_bytes,
        bound_s=args.bound_s,
        body_timeout_s=args.body_timeout_s,
    )
    print(
        json.dumps(
            {
                key: report[key]
                for key in (
                    "failed_cases",
                    "listener_requests",
                    "normal_latency",
                    "tag_flood",
                    "reused_request_id",
                    "slow_senders",
                )
            },
            indent=2,
        )
    )
    if args.out:
        from harness.provenance import provenance
        from harness.results import write_result

        command = "python -m loadtest.hostile " + " ".join(argv if argv is not None else sys.argv[1:])
        write_result(args.out, report, provenance(command.strip(), started=started, url=args.url))
    return 1 if report["failed_cases"] or report["listener_requests"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
