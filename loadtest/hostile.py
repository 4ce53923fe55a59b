"""A hostile caller against a running server: what anyone may send when the API is open.

Crafted requests, each of which must get its 4xx within a time bound: bodies that made a regex
backtrack, nesting past the limit, image parts in every spelling vLLM's parser takes pointing at a
local listener (which must see no connection: the engines fetch nothing a client names), parts and
fields only the server may set, bodies sent a byte at a time (from another loopback address, so that
the bound per client address is tested too). Beside them: task tags past the class bound, one
request id sent again and again (the server's audit sample must not follow it), and a normal request
whose latency is measured alone and then beside a flood of the hostile bodies.

    python -m loadtest.hostile --url http://127.0.0.1:8000 --out bench/results/hostile.json
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import http.server
import json
import secrets
import socket
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from harness.paths import ROOT
from serve_app.core.routes import AUDITED

IMAGE_PATH = ROOT / "docs" / "examples" / "shape.png"
QUESTION = "What is the color of the shape?"
SLOW_ADDRESS = "127.0.0.2"  # the slow senders' source address: not the normal client's


@dataclass
class Outcome:
    """One hostile request: what came back and when."""

    case: str
    item: str  # which part of the server it attacks
    status: int  # 0: no answer within the client's own cap
    seconds: float
    expected: tuple[int, ...]
    bound_s: float
    code: str | None = None
    ok: bool = field(init=False)

    def __post_init__(self) -> None:
        self.ok = self.status in self.expected and self.seconds <= self.bound_s


@dataclass(frozen=True)
class Target:
    base_url: str
    image: str  # a data URL
    model_id: str  # a configured model id (passthrough)
    listener: str  # a URL nobody may fetch


# ---------------------------------------------------------------- the listener nobody may reach


@contextmanager
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on a free loopback port; yields its URL and the paths it was asked for."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the library's name)
            asked.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.end_headers()
            self.wfile.write(IMAGE_PATH.read_bytes())

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked
    finally:
        server.shutdown()


# ---------------------------------------------------------------- the crafted requests


def backtracking_body(size: int) -> bytes:
    """Brackets past the depth limit, then an unterminated string of escaped quotes."""
    return b"[" * 40 + b'"' + b'\\"' * max(1, (size - 41) // 2)


def model_body(target: Target, part: Any = None, **fields: Any) -> dict[str, Any]:
    content = ([part] if part is not None else []) + [{"type": "text", "text": "What is it?"}]
    return {"model": target.model_id, "messages": [{"role": "user", "content": content}], **fields}


def request_cases(target: Target, body_size: int) -> list[tuple[str, str, Any, tuple[int, ...]]]:
    """(case, item, body, expected statuses) of the JSON requests."""
    url = target.listener
    parts = {
        "typeless image part, a string": {"image_url": f"{url}/typeless"},
        "typeless image part, an object": {"image_url": {"url": f"{url}/typeless-object"}},
        "image_url as a string": {"type": "image_url", "image_url": f"{url}/string"},
        "input_image part": {"type": "input_image", "image_url": f"{url}/input-image"},
        "typed image_url to the listener": {"type": "image_url", "image_url": {"url": f"{url}/typed"}},
        "audio part": {"type": "audio_url", "audio_url": {"url": f"{url}/audio"}},
        "video part": {"type": "video_url", "video_url": {"url": f"{url}/video"}},
        "file URL, typeless": {"image_url": "file:///etc/passwd"},
        "uuid reference": {"uuid": "another-clients-image", "image_url": None},
    }
    fields = {
        "priority far ahead": {"priority": -1_000_000},
        "n of 16384": {"n": 16384},
        "ignore_eos": {"ignore_eos": True, "max_tokens": 64},
        "min_tokens past the bound": {"min_tokens": 100_000},
        "max_tokens of a million": {"max_tokens": 1_000_000},
        "engine request id": {"request_id": "mai-audit-x"},
        "chat template": {"chat_template": "{{ 7 * 7 }}"},
        "processor settings": {"mm_processor_kwargs": {"max_pixels": 10**9}},
    }
    cases: list[tuple[str, str, Any, tuple[int, ...]]] = [
        ("backtracking body", "linear parsing", backtracking_body(body_size), (400,)),
        ("nested 100,000 deep", "linear parsing", b"[" * 100_000 + b"]" * 100_000, (400,)),
        ("a million values", "linear parsing", b"[" + b"0," * 1_000_000 + b"0]", (400,)),
    ]
    cases += [
        (name, "engines fetch nothing", model_body(target, part), (400,)) for name, part in parts.items()
    ]
    cases += [
        (name, "passthrough fields", model_body(target, **extra), (400,)) for name, extra in fields.items()
    ]
    return cases


def send(
    client: httpx.Client, case: str, item: str, body: Any, expected: tuple[int, ...], bound_s: float
) -> Outcome:
    started = time.monotonic()
    try:
        if isinstance(body, bytes):
            response = client.post(
                "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
            )
        else:
            response = client.post("/v1/chat/completions", json=body)
        status = response.status_code
        code = _code(response)
    except httpx.TimeoutException:
        status, code = 0, None
    return Outcome(case, item, status, time.monotonic() - started, expected, bound_s, code)


def _code(response: httpx.Response) -> str | None:
    try:
        return response.json().get("error", {}).get("code")
    except (ValueError, AttributeError):
        return None


# ---------------------------------------------------------------- bodies a byte at a time


def slow_body(base_url: str, seconds_cap: float, source: str = SLOW_ADDRESS) -> tuple[int, float]:
    """A POST whose body (declared 4096 bytes) comes a byte every 0.5 s: the status the server
    answered with and when (0: none within ``seconds_cap``)."""
    host, port = base_url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=seconds_cap, source_address=(source, 0)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
            b"content-length: 4096\r\n\r\n{"
        )
        sock.setblocking(False)
        reply = b""
        while time.monotonic() - started < seconds_cap:
            try:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
                if b"\r\n\r\n" in reply:
                    break
            except BlockingIOError:
                pass
            try:
                sock.send(b" ")
            except OSError:
                break
            time.sleep(0.5)
    status = int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/") else 0
    return status, time.monotonic() - started


# ---------------------------------------------------------------- normal requests beside them


def normal_latencies(client: httpx.Client, target: Target, count: int) -> list[float]:
    body = {
        "model": "mai",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": target.image}},
                    {"type": "text", "text": QUESTION},
                ],
            }
        ],
    }
    seconds = []
    for _ in range(count):
        started = time.monotonic()
        response = client.post("/v1/chat/completions", json=body)
        response.raise_for_status()
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


def cascade_body(target: Target, **mai: Any) -> dict[str, Any]:
    return {
        "model": "mai",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": target.image}},
                    {"type": "text", "text": "Is the shape red?"},
                ],
            }
        ],
        **({"mai": mai} if mai else {}),
    }


def tag_flood(client: httpx.Client, target: Target, tags: int) -> dict[str, Any]:
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


def reused_id_flood(client: httpx.Client, target: Target, requests: int) -> dict[str, Any]:
    """``requests`` requests with one request id chosen to be sampled: how many the server sampled
    for audit (audited, or shed or refused for want of room)."""

    def sampled() -> int:
        stats = client.get("/v1/mai/stats").json()
        audited = sum(entry["audit"]["audited"] for entry in stats["classes"].values())
        return audited + sum(stats["audit"]["not_run"].values())

    request_id = sampled_id()
    before = sampled()
    routes: Counter[str] = Counter()
    for _ in range(requests):
        response = client.post(
            "/v1/chat/completions", json=cascade_body(target), headers={"x-request-id": request_id}
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
        target = Target(base_url, image, models[-1], url)
        cases = request_cases(target, body_size)
        outcomes = [send(client, *case, bound_s) for case in cases]
        outcomes += [
            Outcome("GET /docs", "no internals", client.get("/docs").status_code, 0.0, (404,), bound_s),
            Outcome(
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
            outcomes.append(Outcome("body a byte at a time", "slow bodies", status, seconds, expected, limit))
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
    parser.add_argument("--bound-s", type=float, default=5.0, help="seconds a hostile request may take")
    parser.add_argument(
        "--body-timeout-s", type=float, default=30.0, help="the server's limits.body_timeout_s"
    )
    parser.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    args = parser.parse_args(argv)
    started = time.time()
    report = run(args.url, body_size=args.body_size, bound_s=args.bound_s, body_timeout_s=args.body_timeout_s)
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
