"""Locust load test for MAI Serve: VQA requests through the OpenAI route and the native route
(``VQAUser``), and the traffic of a chat application beside them (``ChatMixUser``: a model itself,
streamed and not, a conversation and an open instruction to ``mai``), three VQA users to one chat user.

Requests are drawn from bench/data/*.jsonl (built on first use from easy-vqa and synthetic charts).
Besides one entry per endpoint, every answered request is reported again under the route it took
("route agree_short", "route transfer", "route passthrough", ...), so each route has its own latency
percentiles; a streamed reply's time to its first token is reported as "stream first token". Run one
kind of user alone by naming its class after the options (``... VQAUser``).

Bounded runs only, against this machine only:

    locust -f loadtest/locustfile.py --headless --host http://127.0.0.1:8000 \
        --users 16 --spawn-rate 4 --run-time 60s --max-requests 2000 \
        --json-file bench/results/locust   # writes locust.json

``--max-requests`` stops the run after that many requests; ``--host`` must be a loopback address.
"""

from __future__ import annotations

import ipaddress
import json
import random
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import gevent
from locust import HttpUser, between, events, task

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.datasets import ensure_datasets  # noqa: E402
from harness.jsonl import read_jsonl  # noqa: E402
from loadtest.fates import fate_of, route_label_is_true  # noqa: E402

RECORDS: list[dict] = []
_sent = 0
_quitting = False


@events.init_command_line_parser.add_listener
def _options(parser) -> None:
    parser.add_argument(
        "--max-requests", type=int, default=1000, help="stop after this many requests (default 1000)"
    )
    parser.add_argument(
        "--policy-mix", default="mai", help="comma-separated OpenAI model names to draw from (default: mai)"
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=330.0,
        help="seconds a request may take before it counts as hung (default 330)",
    )


def _is_loopback(host: str | None) -> bool:
    name = urlparse(host or "").hostname
    if not name:
        return False
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback for info in socket.getaddrinfo(name, None))
    except (OSError, ValueError):
        return False


@events.init.add_listener
def _on_init(environment, **kwargs) -> None:
    if not _is_loopback(environment.host):
        raise SystemExit(
            f"this load test only targets loopback hosts (127.0.0.1, localhost); got {environment.host!r}"
        )
    for path in ensure_datasets().values():
        RECORDS.extend(read_jsonl(path))


@events.request.add_listener
def _count(request_type, name, **kwargs) -> None:
    global _sent, _quitting
    if request_type == "POST":
        _sent += 1
        runner = kwargs.get("context", {}).get("runner")
        if runner is not None and not _quitting and _sent >= runner.environment.parsed_options.max_requests:
            _quitting = True
            gevent.spawn(runner.quit)  # not from this user's greenlet: quitting kills the users


class _MAIUser(HttpUser):
    abstract = True
    wait_time = between(0.0, 0.2)

    def on_start(self) -> None:
        self.client.timeout = self.environment.parsed_options.request_timeout

    def context(self) -> dict:
        return {"runner": self.environment.runner}

    def _report(self, name: str, elapsed_ms: float) -> None:
        events.request.fire(
            request_type="MAI",
            name=name,
            response_time=elapsed_ms,
            response_length=0,
            exception=None,
            context={},
        )


class VQAUser(_MAIUser):
    weight = 3

    def on_start(self) -> None:
        super().on_start()
        self.policies = [
            name.strip() for name in self.environment.parsed_options.policy_mix.split(",") if name.strip()
        ]

    def _post(self, path: str, body: dict, route_of) -> None:
        """POST one request; a non-200 is a failure, an answer is reported again under its route, and
        every request once more under its fate ("fate answered", "fate rejected_503", ...;
        "fate mislabelled" when a route label contradicts its trace)."""
        started = time.perf_counter()
        with self.client.post(
            path, json=body, name=path, catch_response=True, context=self.context()
        ) as response:
            elapsed_ms = (time.perf_counter() - started) * 1000
            try:
                payload = response.json() if response.status_code == 200 else None
            except ValueError:
                payload = None
            timed_out = response.status_code == 0 and "timed out" in str(response.error or "").lower()
            fate = fate_of(response.status_code, response.headers or {}, payload, timed_out=timed_out)
            self._report(f"fate {fate}", elapsed_ms)
            if fate == "failed":
                self._report(f"failed with status {response.status_code}", elapsed_ms)
            if response.status_code != 200:
                response.failure(
                    f"{response.status_code}: {response.text[:200] if response.text else response.error}"
                )
                return
            trace = payload.get("trace") or payload.get("mai", {}).get("trace", {})
            if not route_label_is_true(trace):
                self._report("fate mislabelled", elapsed_ms)
            self._report(f"route {route_of(response)}", elapsed_ms)

    @task(3)
    def openai_chat(self) -> None:
        record = random.choice(RECORDS)
        body = {
            "model": random.choice(self.policies),
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": record["image"]}},
                        {"type": "text", "text": record["question"]},
                    ],
                }
            ],
            "mai": {"answer_type": record["answer_type"]},
        }
        self._post("/v1/chat/completions", body, lambda response: response.headers.get("x-mai-route"))

    @task(1)
    def native_answer(self) -> None:
        record = random.choice(RECORDS)
        body = {
            "image": record["image"],
            "question": record["question"],
            "answer_type": record["answer_type"],
        }
        self._post("/v1/mai/answer", body, lambda response: response.json().get("route"))


def _has_content(chunk: str) -> bool:
    choices = json.loads(chunk).get("choices") or []
    return any((choice.get("delta") or {}).get("content") for choice in choices)


def _image_turn(record: dict, text: str) -> dict:
    return {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": record["image"]}},
            {"type": "text", "text": text},
        ],
    }


class ChatMixUser(_MAIUser):
    """A chat application's traffic: the large model itself (streamed, and with a system message), a
    conversation and an open instruction sent to ``mai`` (which passes them to the large model)."""

    weight = 1

    def on_start(self) -> None:
        super().on_start()
        models = self.client.get("/v1/models", name="/v1/models").json()["data"]
        # The models themselves are listed after the policies; the large one last.
        self.large = [model["id"] for model in models if "policy" not in model][-1]

    def _chat(self, name: str, body: dict) -> None:
        started = time.perf_counter()
        with self.client.post(
            "/v1/chat/completions", json=body, name=name, catch_response=True, context=self.context()
        ) as response:
            elapsed_ms = (time.perf_counter() - started) * 1000
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {response.text[:200]}")
                return
            self._report(f"route {response.headers.get('x-mai-route')}", elapsed_ms)

    @task(2)
    def model_streamed(self) -> None:
        """The large model itself, streamed: time to the first token and to the end."""
        body = {
            "model": self.large,
            "messages": [_image_turn(random.choice(RECORDS), "Describe this image.")],
            "max_tokens": 64,
            "stream": True,
        }
        started = time.perf_counter()
        first_ms = None
        with self.client.post(
            "/v1/chat/completions",
            json=body,
            name="chat stream (model)",
            stream=True,
            catch_response=True,
            context=self.context(),
        ) as response:
            if response.status_code != 200:
                response.failure(f"{response.status_code}: {response.text[:200]}")
                return
            done = False
            for line in response.iter_lines(decode_unicode=True):
                if first_ms is None and line.startswith("data: {") and _has_content(line[6:]):
                    first_ms = (time.perf_counter() - started) * 1000
                done = done or line == "data: [DONE]"
            if not done or first_ms is None:
                response.failure("the stream ended without content or [DONE]")
                return
        self._report("stream first token", first_ms)
        self._report("route passthrough", (time.perf_counter() - started) * 1000)

    @task(1)
    def model_with_system(self) -> None:
        record = random.choice(RECORDS)
        body = {
            "model": self.large,
            "messages": [
                {"role": "system", "content": "Answer in one sentence."},
                _image_turn(record, record["question"]),
            ],
            "max_tokens": 48,
        }
        self._chat("chat system (model)", body)

    @task(1)
    def mai_conversation(self) -> None:
        record = random.choice(RECORDS)
        body = {
            "model": "mai",
            "messages": [
                _image_turn(record, record["question"]),
                {"role": "assistant", "content": "I am not sure."},
                {"role": "user", "content": "Look again and answer in one word."},
            ],
            "max_tokens": 16,
        }
        self._chat("chat multi-turn (mai)", body)

    @task(1)
    def mai_open_instruction(self) -> None:
        body = {
            "model": "mai",
            "messages": [_image_turn(random.choice(RECORDS), "Describe this image in detail.")],
            "max_tokens": 96,
        }
        self._chat("chat describe (mai)", body)
