"""The crafted requests of the hostile suite (loadtest/hostile.py): each with the statuses it must
get and the part of the server it attacks; a listener no engine may reach; a body sent a byte at a
time from another loopback address."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from harness.paths import ROOT

IMAGE_PATH = ROOT / "docs" / "examples" / "shape.png"
SLOW_ADDRESS = "127.0.0.2"  # the slow senders' source address: not the normal client's


@dataclass
class HostileOutcome:
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
class HostileTarget:
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


def nested_body(size: int) -> bytes:
    """``size`` bytes of brackets nested as deep as they go: the nesting check's worst body."""
    return b"[" * (size // 2) + b"]" * (size - size // 2)


def brackets_at_the_limit(size: int, depth: int = 32) -> bytes:
    """``size`` bytes of brackets nested ``depth`` deep again and again: no nesting past the limit
    anywhere, so the check reads every byte (and the parser refuses what follows the first)."""
    block = b"[" * depth + b"]" * depth
    return block * (size // len(block)) + b" " * (size % len(block))


def unencodable(payload: Any) -> bytes:
    """``payload`` as JSON with ASCII escapes, as many clients' encoders send it: a lone surrogate in
    its text goes as its escape (``\\ud800``), which the parser takes and no UTF-8 encoder does."""
    return json.dumps(payload).encode()


def user_turn(target: HostileTarget, question: str) -> dict[str, Any]:
    content = [
        {"type": "image_url", "image_url": {"url": target.image}},
        {"type": "text", "text": question},
    ]
    return {"role": "user", "content": content}


def model_body(target: HostileTarget, part: Any = None, **fields: Any) -> dict[str, Any]:
    content = ([part] if part is not None else []) + [{"type": "text", "text": "What is it?"}]
    return {"model": target.model_id, "messages": [{"role": "user", "content": content}], **fields}


def request_cases(
    target: HostileTarget, body_size: int, max_body_bytes: int = 16 * 1024 * 1024
) -> list[tuple[str, str, Any, tuple[int, ...]]]:
    """(case, item, body, expected statuses) of the JSON requests for /v1/chat/completions;
    ``max_body_bytes``: the server's ``limits.max_body_bytes``, the size of the largest bodies sent."""
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
        "ignore_eos to a context-sized budget": {"ignore_eos": True, "max_tokens": 100_000},
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
        ("brackets nested as deep as the body limit", "linear parsing", nested_body(max_body_bytes), (400,)),
        (
            "brackets at the depth limit up to the body limit",
            "linear parsing",
            brackets_at_the_limit(max_body_bytes),
            (400,),
        ),
        (
            "lone surrogate in a cascade question",
            "unencodable text",
            unencodable({"model": "mai", "messages": [user_turn(target, "Is the shape red\ud800?")]}),
            (400,),
        ),
        (
            "lone surrogate in a system message",
            "unencodable text",
            unencodable(
                {
                    "model": "mai",
                    "messages": [
                        {"role": "system", "content": "Answer briefly.\udc00"},
                        user_turn(target, "Is the shape red?"),
                    ],
                }
            ),
            (400,),
        ),
        (
            "lone surrogate in a message to a model",
            "unencodable text",
            unencodable(model_body(target) | {"messages": [{"role": "user", "content": "Hello\ud800"}]}),
            (400,),
        ),
    ]
    cases += every_path_pays(target)
    cases += [
        (name, "engines fetch nothing", model_body(target, part), (400,)) for name, part in parts.items()
    ]
    cases += [
        (name, "passthrough fields", model_body(target, **extra), (400,)) for name, extra in fields.items()
    ]
    return cases


def every_path_pays(target: HostileTarget) -> list[tuple[str, str, Any, tuple[int, ...]]]:
    """Requests for a model id that would make its engine work past what a request may ask: decode
    past the bound of all its choices, compile a grammar past ``limits.grammar``, or read a lone
    surrogate out of a tool call's JSON arguments."""
    enum = {"type": "string", "enum": [f"value-{n:06d}" for n in range(50_000)]}
    alternation = "|".join(f"word{n:05d}" for n in range(85_000))
    tools = [
        {"type": "function", "function": {"name": f"tool_{n}", "parameters": {"type": "object"}}}
        for n in range(200)
    ]
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": "\\ud800"}'}}
    replay = [
        {"role": "user", "content": "Call f."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "done"},
    ]
    decode = {"n": 8, "max_tokens": 4096, "min_tokens": 4096, "ignore_eos": True}
    schema = {"type": "json_schema", "json_schema": {"name": "answer", "schema": enum}}
    return [
        ("n × max_tokens past the decode bound", "every path pays", model_body(target, **decode), (400,)),
        (
            "a JSON-schema enum of 50,000 strings",
            "grammar work",
            model_body(target, response_format=schema),
            (400,),
        ),
        (
            "a 0.85 MB regex alternation",
            "grammar work",
            model_body(target, structured_outputs={"regex": alternation}),
            (400,),
        ),
        (
            "200 tools, one required",
            "grammar work",
            model_body(target, tools=tools, tool_choice="required"),
            (400,),
        ),
        (
            "lone surrogate in a tool call's JSON arguments",
            "unencodable text",
            model_body(target) | {"messages": replay},
            (400,),
        ),
    ]


def answer_cases(target: HostileTarget) -> list[tuple[str, str, Any, tuple[int, ...]]]:
    """(case, item, body, expected statuses) of the requests for /v1/mai/answer."""
    question = {"image": target.image, "question": "Is the shape red\udbff?"}
    return [("lone surrogate in an answer's question", "unencodable text", unencodable(question), (400,))]


def send(
    client: httpx.Client,
    case: str,
    item: str,
    body: Any,
    expected: tuple[int, ...],
    bound_s: float,
    path: str = "/v1/chat/completions",
) -> HostileOutcome:
    started = time.monotonic()
    try:
        if isinstance(body, bytes):
            response = client.post(path, content=body, headers={"content-type": "application/json"})
        else:
            response = client.post(path, json=body)
        status = response.status_code
        code = _code(response)
    except httpx.TimeoutException:
        status, code = 0, None
    return HostileOutcome(case, item, status, time.monotonic() - started, expected, bound_s, code)


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
