"""Drive a running MAI server through its OpenAI-compatible API, one policy after another, and keep
every prediction (with its route, per-stage tokens and latency) as JSONL in an output folder.

Predictions are written as they arrive, so an interrupted run resumes where it stopped: a record
already answered (HTTP 200) under a policy is not asked again; failed ones are. Every request asks the
server's answer cache to stay out of it (``Cache-Control: no-store, no-cache``): what is measured is the
policy's own run of each record.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from harness.driver import closed_loop
from serve_app.edge.protocol import POLICY_OF_MODEL

from .predictions import PredictionStore, prediction_of
from .records import EvalRecord, image_data_urls
from .requests import chat_body, request_id

POLICIES: tuple[str, ...] = tuple(POLICY_OF_MODEL)  # every policy the server offers, as OpenAI model names
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class RunSpec:
    """What mai-eval runs under one name: a served policy and per-request cascade options.

    ``mai-paper=mai:min_confidence=0`` runs the policy ``mai`` with ``min_confidence`` 0 under the name
    ``mai-paper``; a bare policy name runs it with the server's options."""

    name: str
    policy: str
    options: tuple[tuple[str, Any], ...] = ()
    # Ask for the served answer's logprobs: every stage's answer then comes with its confidence, the
    # reasoning's too, which the server asks only where a threshold reads it (a calibration replays it).
    logprobs: bool = False

    @classmethod
    def parse(cls, text: str) -> RunSpec:
        name, _, rest = text.partition("=") if "=" in text.split(":", 1)[0] else (text, "", text)
        policy, *pairs = rest.split(":")
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r} in {text!r}; choose from {', '.join(POLICIES)}")
        if not _SAFE_NAME.match(name):
            raise ValueError(f"run name {name!r}: use letters, digits, '.', '_' or '-'")
        options = []
        for pair in pairs:
            key, equals, value = pair.partition("=")
            if not equals or not key:
                raise ValueError(f"option {pair!r} in {text!r} is not key=value")
            options.append((key, _option_value(value)))
        return cls(name, policy, tuple(options))


def _option_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class DriveSettings:
    concurrency: int = 8
    timeout_s: float = 600.0
    retries: int = 3  # for 503 (server busy), dropped connections and requests lost with an ingress replica
    max_tokens: int | None = None
    api_key: str | None = None
    transfer_selector: str | None = None


async def ask(
    http: httpx.AsyncClient,
    record: EvalRecord,
    image_url: str | Mapping[str, str],
    run: RunSpec,
    settings: DriveSettings,
) -> dict[str, Any]:
    """One record under one run as a chat request (``image_url``: its images' data URLs, as
    ``chat_body`` reads them), retried on 503, dropped connections and a request
    lost with a dead ingress replica (``is_lost_in_flight``); the prediction row (``prediction_of``)."""
    policy = run.name
    body = chat_body(
        record,
        image_url,
        run.policy,
        settings.max_tokens,
        settings.transfer_selector,
        dict(run.options),
        logprobs=run.logprobs,
    )
    headers = {
        "x-request-id": request_id(policy, record.id),
        "content-type": "application/json",
        # Every request runs the policy: an answer the server's cache reused (the same question asked
        # before with the same key, by this run or another) would take no time and bill no tokens. The
        # header, not ``mai.cache``: the body stays the one mai-batch sends for the same row.
        "cache-control": "no-store, no-cache",
    }
    # ASCII escapes, as json.dumps writes them: a record's text that is no Unicode (a lone surrogate)
    # reaches the server, whose 400 is the row, where UTF-8 (httpx's json=) could not encode it.
    content = json.dumps(body)
    for attempt in range(settings.retries + 1):
        started = time.perf_counter()
        try:
            response = await http.post("/v1/chat/completions", content=content, headers=headers)
        except httpx.TransportError as exc:
            if attempt < settings.retries:
                await asyncio.sleep(min(2**attempt, 30))
                continue
            return prediction_of(
                record, policy, 0, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
            )
        latency = time.perf_counter() - started
        if response.status_code == 503 and attempt < settings.retries:
            await asyncio.sleep(_retry_after(response.headers.get("retry-after"), attempt))
            continue
        try:
            payload = response.json()
        except ValueError:
            payload = response.text
        if is_lost_in_flight(response.status_code, payload) and attempt < settings.retries:
            await asyncio.sleep(min(2**attempt, 30))
            continue
        return prediction_of(record, policy, response.status_code, latency, payload)
    raise AssertionError("unreachable")


def is_lost_in_flight(status: int, payload: Any) -> bool:
    """A 5xx that the app did not write (its errors are ``{"error": {...}}`` JSON): Serve's proxy
    answering for an ingress replica that died holding the request. MAI's requests are idempotent, so
    such an answer is retried like a 503."""
    return status >= 500 and not (isinstance(payload, dict) and isinstance(payload.get("error"), dict))


def _retry_after(header: str | None, attempt: int) -> float:
    try:
        return min(float(header), 60.0) if header is not None else min(2.0**attempt, 30.0)
    except ValueError:
        return min(2.0**attempt, 30.0)


async def run_policy(
    base_url: str,
    records: Sequence[EvalRecord],
    dataset_dir: Path,
    run: RunSpec,
    store: PredictionStore,
    settings: DriveSettings,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Ask every record not yet answered under ``run`` with ``settings.concurrency`` clients;
    append each row to the store as it arrives and the timed segment at the end (also when
    interrupted). Returns the segment."""
    policy = run.name
    done = store.done(policy)
    todo = [record for record in records if record.id not in done]
    headers = {"authorization": f"Bearer {settings.api_key}"} if settings.api_key else None
    answered = 0

    async def send(http: httpx.AsyncClient, index: int, record: EvalRecord) -> dict[str, Any]:
        return await ask(http, record, image_data_urls(record, dataset_dir), run, settings)

    def keep(row: dict[str, Any]) -> None:
        nonlocal answered
        store.append(policy, row)
        answered += 1
        if on_row is not None:
            on_row(row)

    started_at = time.time()
    started = time.perf_counter()
    try:
        await closed_loop(
            base_url,
            todo,
            send,
            concurrency=settings.concurrency,
            timeout_s=settings.timeout_s,
            headers=headers,
            on_result=keep,
        )
    finally:
        segment = {
            "started": started_at,
            "wall_s": round(time.perf_counter() - started, 6),
            "requests": answered,
            "concurrency": settings.concurrency,
        }
        if answered:
            store.add_segment(policy, segment)
    return segment


async def check_server(
    base_url: str, policies: Sequence[str], api_key: str | None, timeout_s: float = 10.0
) -> None:
    """Fail early, with a message a user can act on, when the server is not there or does not serve
    the policies asked for."""
    headers = {"authorization": f"Bearer {api_key}"} if api_key else None
    try:
        async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, headers=headers) as http:
            response = await http.get("/v1/models")
    except httpx.HTTPError as exc:
        raise ConnectionError(
            f"no MAI server at {base_url} ({type(exc).__name__}: {exc}); start one with "
            "`serve run configs/mai.yaml` or pass --url"
        ) from None
    if response.status_code != 200:
        raise ConnectionError(f"{base_url}/v1/models answered {response.status_code}: {response.text[:200]}")
    served = {model["id"] for model in response.json().get("data", [])}
    missing = [policy for policy in policies if policy not in served]
    if missing:
        raise ConnectionError(
            f"{base_url} does not serve {', '.join(missing)} (it serves {', '.join(sorted(served))})"
        )
