"""Locust load test for MAI Serve: VQA requests through the OpenAI route and the native route.

Requests are drawn from bench/data/*.jsonl (built on first use from easy-vqa and synthetic charts).
Besides one entry per endpoint, every answered request is reported again under the cascade route it
took ("route agree_short", "route transfer", ...), so each route has its own latency percentiles.

Bounded runs only, against this machine only:

    locust -f loadtest/locustfile.py --headless --host http://127.0.0.1:8000 \
        --users 16 --spawn-rate 4 --run-time 60s --max-requests 2000 \
        --json-file bench/results/locust   # writes locust.json

``--max-requests`` stops the run after that many requests; ``--host`` must be a loopback address.
"""

from __future__ import annotations

import ipaddress
import random
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import gevent
from locust import HttpUser, between, events, task

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from evaluation.datasets import ensure_datasets  # noqa: E402
from evaluation.jsonl import read_jsonl  # noqa: E402
from loadtest.outcomes import classify, route_label_is_true  # noqa: E402

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


class VQAUser(HttpUser):
    wait_time = between(0.0, 0.2)

    def on_start(self) -> None:
        self.client.timeout = self.environment.parsed_options.request_timeout
        self.policies = [
            name.strip() for name in self.environment.parsed_options.policy_mix.split(",") if name.strip()
        ]

    def context(self) -> dict:
        return {"runner": self.environment.runner}

    def _post(self, path: str, body: dict, route_of) -> None:
        """POST one request; a non-200 is a failure, an answer is reported again under its route, and
        every request once more under its outcome ("outcome answered", "outcome rejected_503", ...;
        "outcome mislabelled" when a route label contradicts its trace)."""
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
            outcome = classify(response.status_code, response.headers or {}, payload, timed_out=timed_out)
            self._report(f"outcome {outcome}", elapsed_ms)
            if outcome == "failed":
                self._report(f"failed with status {response.status_code}", elapsed_ms)
            if response.status_code != 200:
                response.failure(
                    f"{response.status_code}: {response.text[:200] if response.text else response.error}"
                )
                return
            trace = payload.get("trace") or payload.get("mai", {}).get("trace", {})
            if not route_label_is_true(trace):
                self._report("outcome mislabelled", elapsed_ms)
            self._report(f"route {route_of(response)}", elapsed_ms)

    def _report(self, name: str, elapsed_ms: float) -> None:
        events.request.fire(
            request_type="MAI",
            name=name,
            response_time=elapsed_ms,
            response_length=0,
            exception=None,
            context={},
        )

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
