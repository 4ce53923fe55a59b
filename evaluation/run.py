"""Drive a running MAI server through its OpenAI-compatible API, one policy after another, and keep
every prediction (with its route, per-stage tokens and latency) as JSONL in an output folder.

Predictions are written as they arrive, so an interrupted run resumes where it stopped: a record
already answered (HTTP 200) under a policy is not asked again; failed ones are.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from harness.driver import closed_loop
from harness.jsonl import append_jsonl, read_jsonl
from harness.provenance import file_sha256
from serve_app.edge.protocol import POLICY_OF_MODEL

from .records import EvalRecord, image_data_url
from .scoring import score

POLICIES: tuple[str, ...] = tuple(POLICY_OF_MODEL)  # every policy the server offers, as OpenAI model names
_UNSAFE_ID_CHARS = re.compile(r"[^A-Za-z0-9._:-]")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class DatasetMismatchError(ValueError):
    """The output folder holds results of another dataset."""


@dataclass(frozen=True)
class RunSpec:
    """What mai-eval runs under one name: a served policy and per-request cascade options.

    ``mai-paper=mai:min_confidence=0`` runs the policy ``mai`` with ``min_confidence`` 0 under the name
    ``mai-paper``; a bare policy name runs it with the server's options."""

    name: str
    policy: str
    options: tuple[tuple[str, Any], ...] = ()

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


def user_message(image_url: str, question: str) -> dict[str, Any]:
    """The chat message of one image and a question about it."""
    return {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": image_url}},
            {"type": "text", "text": question},
        ],
    }


def chat_body(
    record: EvalRecord,
    image_url: str,
    policy: str,
    max_tokens: int | None = None,
    transfer_selector: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The chat request for one record under one policy: the image and the question in the user
    message, the options, answer kind and cascade options in the ``mai`` extension."""
    mai: dict[str, Any] = {}
    request_options = dict(options or {}) | (
        {"transfer_selector": transfer_selector} if transfer_selector else {}
    )
    if request_options:
        mai["options"] = request_options
    if record.choices:
        mai["choices"] = list(record.choices)
    if record.answer_type:
        mai["answer_type"] = record.answer_type
    body: dict[str, Any] = {"model": policy, "messages": [user_message(image_url, record.question)]}
    if mai:
        body["mai"] = mai
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    return body


def request_id(policy: str, record_id: str, *, source: str = "eval") -> str:
    """An ``x-request-id`` the server accepts, naming the source (``eval``, ``batch``), the policy and
    the record for log correlation."""
    token = _UNSAFE_ID_CHARS.sub("_", f"{source}.{policy}.{record_id}")
    if len(token) <= 128:
        return token
    return token[:111] + "." + hashlib.sha256(token.encode()).hexdigest()[:16]


def prediction_of(
    record: EvalRecord, policy: str, status: int, latency_s: float, body: Any
) -> dict[str, Any]:
    """What is kept of one response: the answer and its score, or the error."""
    row: dict[str, Any] = {
        "id": record.id,
        "policy": policy,
        "status": status,
        "latency_s": round(latency_s, 6),
    }
    if status == 200 and isinstance(body, dict):
        answer = body["choices"][0]["message"]["content"]
        mai = body.get("mai", {})
        trace = mai.get("trace", {})
        row |= {
            "answer": answer,
            "score": score(answer, record.model_dump()),
            "route": mai.get("route"),
            "plan": trace.get("plan"),
            "kind": trace.get("kind"),
            "kind_basis": trace.get("kind_basis"),
            "stages": [
                {
                    key: stage.get(key)
                    for key in (
                        "name",
                        "model",
                        "prompt_kind",
                        "status",
                        "prompt_tokens",
                        "cached_tokens",
                        "completion_tokens",
                        "latency_s",
                        "answer",
                        "confidence",
                    )
                }
                for stage in trace.get("stages", [])
            ],
            "checks": trace.get("checks", []),
            "usage": body.get("usage", {}),
            "transfer": trace.get("transfer"),
            "repair": trace.get("repair"),
        }
    else:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        row["error"] = (
            error.get("message") if isinstance(error, dict) and error.get("message") else str(body)[:500]
        )
    return row


class PredictionStore:
    """``<out>/predictions/<policy>.jsonl`` (one line per answered request, appended as answers
    arrive) and ``<out>/runs.jsonl`` (one line per timed segment of a policy's run)."""

    def __init__(
        self, out: Path, dataset: Path | str, records: Sized, *, dataset_sha256: str | None = None
    ):  # only the records' count is kept; a dataset named by URI comes with its digest
        self.out = out
        self.dir = out / "predictions"
        self.manifest = {
            "dataset": str(dataset),
            "dataset_sha256": dataset_sha256 or file_sha256(Path(dataset)),
            "records": len(records),
        }

    def open(self, *, fresh: bool) -> None:
        """Create the folder, or check that it holds results of this very dataset."""
        path = self.out / "manifest.json"
        if fresh:
            for stale in [*self.dir.glob("*.jsonl"), self.out / "runs.jsonl"]:
                stale.unlink(missing_ok=True)
        elif path.exists():
            existing = json.loads(path.read_text())
            if existing.get("dataset_sha256") != self.manifest["dataset_sha256"]:
                raise DatasetMismatchError(
                    f"{self.out} holds results of another dataset ({existing.get('dataset')}); "
                    "choose another --out, or pass --fresh to start over"
                )
        self.dir.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.manifest, indent=2) + "\n")

    def path(self, policy: str) -> Path:
        return self.dir / f"{policy}.jsonl"

    def load(self, policy: str) -> dict[str, dict[str, Any]]:
        """The latest row per record id under ``policy``."""
        path = self.path(policy)
        return {row["id"]: row for row in read_jsonl(path, skip_truncated=True)} if path.exists() else {}

    def done(self, policy: str) -> set[str]:
        return {record_id for record_id, row in self.load(policy).items() if row["status"] == 200}

    def append(self, policy: str, row: dict[str, Any]) -> None:
        append_jsonl(row, self.path(policy))

    def add_segment(self, policy: str, segment: dict[str, Any]) -> None:
        append_jsonl({"policy": policy, **segment}, self.out / "runs.jsonl")

    def segments(self, policy: str) -> list[dict[str, Any]]:
        path = self.out / "runs.jsonl"
        if not path.exists():
            return []
        return [segment for segment in read_jsonl(path) if segment["policy"] == policy]


@dataclass(frozen=True)
class DriveSettings:
    concurrency: int = 8
    timeout_s: float = 600.0
    retries: int = 3  # for 503 (server busy), dropped connections and requests lost with an ingress replica
    max_tokens: int | None = None
    api_key: str | None = None
    transfer_selector: str | None = None


async def ask(
    http: httpx.AsyncClient, record: EvalRecord, image_url: str, run: RunSpec, settings: DriveSettings
) -> dict[str, Any]:
    """One record under one run as a chat request, retried on 503, dropped connections and a request
    lost with a dead ingress replica (``is_lost_in_flight``); the prediction row (``prediction_of``)."""
    policy = run.name
    body = chat_body(
        record, image_url, run.policy, settings.max_tokens, settings.transfer_selector, dict(run.options)
    )
    headers = {"x-request-id": request_id(policy, record.id)}
    for attempt in range(settings.retries + 1):
        started = time.perf_counter()
        try:
            response = await http.post("/v1/chat/completions", json=body, headers=headers)
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
        return await ask(http, record, image_data_url(record.image, dataset_dir), run, settings)

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
