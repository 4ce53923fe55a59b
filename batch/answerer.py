"""The Ray Data actor that answers rows: the server's own request path, over deployment handles.

Each actor holds one ``IngressReplica`` built as a Serve replica builds it (``IngressReplica.__init__``: the
model clients, the plan controller, the auditor, the statistics reporter), over handles to the model
deployments of the config; a row runs ``IngressReplica.chat``, what ``POST /v1/chat/completions`` runs once
its body is read. So a row gets the gate, the job, the decision, the cascade and the reply an HTTP request
gets, with no HTTP in between and no second copy of any of it.

What batch does differently, and why:
- at most ``rows_per_actor`` rows of an actor are in flight (the deployments' capacity, shared out):
  a row waits for a slot instead of queueing past what the engines batch;
- a batch's rows are handed on as they finish, not when its last one does (``__call__``): each row's
  line reaches the driver, and the output, within moments of its answer;
- a row the server could only answer degraded (a model failed: ``routes.DEGRADED``) or not at all (503,
  504) is asked again after a pause, up to ``attempts`` times: a replica that dies mid-job costs the row
  a wait, never a degraded answer; the last attempt's reply is written as it is (its route says so);
- anything else (a 4xx, or a 500 from a bug, logged with its traceback) is the row's line, and the job
  goes on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import dataclasses
import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deployments.trace_context import log_trace_ids
from serve_app.config import AppConfig
from serve_app.core.routes import DEGRADED
from serve_app.edge.errors import internal_error_body
from serve_app.edge.responses import Forwarded, Refused, RequestOutcome, chat_completion
from serve_app.telemetry import spans
from serve_app.telemetry.exporter import trace_this_process

from .actor_start import StartClock
from .inputs import InputFormat, LineError, RecordSettings, Request, line_too_long, parse_line
from .lines import Overlong
from .model_tier import Targets
from .outputs import openai_error_line, openai_reply_line, record_error_line, record_reply_line
from .packing import packed, unpacked
from .row_stream import GATHER_S, EventLoopThread, finished
from .settings import MAX_LINE_BYTES

logger = logging.getLogger("ray.data")

RETRIED_STATUSES = (429, 503, 504)  # a key's share or quota: the row waits and asks again
Answered = tuple[dict[str, Any], dict[str, Any], float]  # a row's line, its outcome, when it was done


@dataclass(frozen=True)
class RowJob:
    """What every actor needs to know of the job: the input's format and folder, how records become
    requests, the duplicate lines, and how rows wait and retry."""

    fmt: InputFormat
    base: str  # the input's folder: a record's relative image path is read from there
    records: RecordSettings = RecordSettings()
    duplicates: dict[int, int] = field(default_factory=dict)
    rows_per_actor: int = 16
    attempts: int = 6
    retry_pause_s: float = 2.0  # doubled after each attempt, up to 30 s
    max_line_bytes: int = MAX_LINE_BYTES  # a row without text was longer (batch/source.py)
    key_name: str | None = None  # the API key the rows count against; None: ``mai-batch``, unlimited
    # The job's id, the driver's own: each row's trace names it (``mai.batch.job_id``).
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class RowReply:
    """A row's reply: its status and JSON body, and for an answer its route and tokens per model."""

    status: int
    body: Any
    latency_s: float
    attempts: int = 1
    route: str | None = None
    tokens: dict[str, dict[str, int]] = field(default_factory=dict)


class RowAnswerer:
    """A pool member of ``Dataset.map_batches``: answers a batch of ``(line, text)`` rows concurrently."""

    def __init__(self, config: AppConfig, targets: Targets, job: RowJob):
        self.clock = StartClock()
        import ray

        from serve_app.edge.keys import BATCH_CALLER, KeyRing

        self.config, self.targets = config, targets
        self.ingress: Any = None  # built on the loop the rows run on (``_replica``)
        # Whose rows these are: the key's models, quotas and usage apply (the key ledger's).
        self.caller = (
            BATCH_CALLER if job.key_name is None else KeyRing(config.security).caller_named(job.key_name)
        )
        self.job = job
        self.node = ray.get_runtime_context().get_node_id()
        self._slots: asyncio.Semaphore | None = None
        self.clock.mark("initialised")
        self.begin()

    def __call__(self, batch: dict[str, Any]) -> Iterator[dict[str, list[Any]]]:
        """The batch's output rows, each group yielded as soon as its rows are answered: every row of
        the batch is in flight at once (under the actor's slots), and a row's line never waits for a
        slower one of its batch (batch/row_stream.py says why this is a plain generator)."""
        self.clock.mark("first_batch")
        rows = self._started()
        batch = unpacked(batch)  # a packed row of lines (batch/packing.py), or plain columns
        lines = [int(line) for line in batch["line"]]
        texts = [
            Overlong(int(size), self.job.max_line_bytes) if text is None else str(text)
            for text, size in zip(batch["text"], batch["size"], strict=True)
        ]
        futures = [rows.submit(self._answered(line, text)) for line, text in zip(lines, texts, strict=True)]
        for group in finished(futures, GATHER_S):
            columns = self._columns([lines[index] for index, _ in group], [result for _, result in group])
            yield packed(columns)

    def begin(self) -> None:
        """Start the loop every row of this actor runs on, and make the ingress replica and the slots on
        it at once, while Ray Data finishes starting the actor and sends its first batch. Ray Data
        calls for batches from several threads: all wait for this one start (``_started``)."""
        self._rows = EventLoopThread()
        self._ready: concurrent.futures.Future[None] = self._rows.submit(self._start())

    def _started(self) -> EventLoopThread:
        """The rows' loop, once the ingress replica and the slots are made on it."""
        self._ready.result()  # a failed start fails the batch, as Ray Data's own would
        return self._rows

    async def _start(self) -> None:
        self.clock.mark("replica_started")
        if trace_this_process("mai-batch", self.node):  # each row a trace, as Serve's requests are
            log_trace_ids("ray.data")  # this module's records inside a row name its trace
        if self.ingress is None:
            self.ingress = self._replica()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.job.rows_per_actor)
        self.clock.mark("replica")

    async def _answered(self, line: int, text: str | Overlong) -> Answered:
        """``answer``'s row and outcome, and when it was done (wall clock: the driver's line delay)."""
        row, outcome = await self.answer(line, text)
        self.clock.mark("first_row")
        return row, outcome, time.time()

    def _columns(self, lines: list[int], results: list[Answered]) -> dict[str, list[Any]]:
        """Finished rows as the block Ray Data hands to the driver (batch/delivery.py reads it)."""
        return {
            "line": lines,
            "output": [json.dumps(row) for row, _, _ in results],
            "status": [outcome["status"] for _, outcome, _ in results],
            "route": [outcome["route"] for _, outcome, _ in results],
            "tokens": [json.dumps(outcome["tokens"]) for _, outcome, _ in results],
            "attempts": [outcome["attempts"] for _, outcome, _ in results],
            "answered_at": [done_at for _, _, done_at in results],
            "node": [self.node] * len(lines),
            "peak_rss_mb": [peak_rss_mb()] * len(lines),
            # The actor's start, once: with the first rows it hands on (batch/actor_start.py).
            "actor_start": [self.clock.report()] + [""] * (len(lines) - 1),
        }

    def _replica(self) -> Any:
        """The ingress replica over handles to the targets, made on the running loop: the loop Ray
        Data runs this actor's batches on, where a handle's router must live when Serve runs routers
        on the caller's loop (``RAY_SERVE_THROUGHPUT_OPTIMIZED``)."""
        from serve_app.edge.ingress import IngressReplica

        small, large, scorer, stats, ledger = self.targets.handles()
        # What a passthrough row needs loads with the first such row, not before every job's first row.
        # No HTTP reaches this replica: each row comes with its caller, the job's key the driver
        # resolved (batch/runner.py), so the replica itself requires no key of its own environment.
        return IngressReplica(
            small, large, self.config, scorer, stats, ledger, "anonymous", preload_passthrough=False
        )

    async def answer(self, line: int, text: str | Overlong) -> tuple[dict[str, Any], dict[str, Any]]:
        """A line's output row, and what the job's tally reads of it (status, route, tokens)."""
        job = self.job
        if isinstance(text, Overlong):
            parsed: Request | LineError = line_too_long(line, text)
        else:
            parsed = parse_line(
                text,
                line,
                job.fmt,
                base=Path(job.base),
                settings=job.records,
                duplicates=job.duplicates,
                limits=self.config.limits,
            )
        if isinstance(parsed, LineError):
            return self._error_row(line, "" if isinstance(text, Overlong) else text, parsed), {
                "status": 400,
                "route": None,
                "tokens": {},
                "attempts": 0,
            }
        assert self._slots is not None
        traced = {"mai.batch.job_id": job.job_id, "mai.batch.line": line, "mai.request_id": parsed.request_id}
        async with self._slots:
            with spans.span("mai.batch_row", traced, settings=self.config.telemetry):
                reply = await self.ask(parsed)
        outcome = {
            "status": reply.status,
            "route": reply.route,
            "tokens": reply.tokens,
            "attempts": reply.attempts,
        }
        if job.fmt is InputFormat.OPENAI:
            return openai_reply_line(line, parsed, reply.status, reply.body), outcome
        return (
            record_reply_line(line, parsed, job.records.policy, reply.status, reply.latency_s, reply.body),
            outcome,
        )

    async def ask(self, request: Request) -> RowReply:
        """The server's reply to one request, asked again while a model is down or busy."""
        pause = self.job.retry_pause_s
        for attempt in range(1, self.job.attempts + 1):
            reply = await self._ask_once(request)
            if not _worth_retrying(reply) or attempt == self.job.attempts:
                return dataclasses.replace(reply, attempts=attempt)
            logger.warning(
                "mai-batch: row %s got %s (attempt %d of %d); asking again in %.0f s",
                request.row_id,
                _what_failed(reply),
                attempt,
                self.job.attempts,
                pause,
            )
            await asyncio.sleep(pause)
            pause = min(pause * 2, 30.0)
        raise AssertionError("unreachable")

    async def _ask_once(self, request: Request) -> RowReply:
        started = time.monotonic()
        try:
            # The ingress reads the payload as a request's JSON; each attempt gets its own copy.
            outcome = await self.ingress.chat(copy.deepcopy(request.body), request.request_id, self.caller)
        except Exception:  # a bug: the row's 500, its traceback logged under an id; the job goes on
            error_id = uuid.uuid4().hex
            logger.exception("mai-batch internal error %s on row %s", error_id, request.row_id)
            return RowReply(500, internal_error_body(error_id), time.monotonic() - started)
        return reply_of(outcome, time.monotonic() - started)

    def _error_row(self, line: int, text: str, error: LineError) -> dict[str, Any]:
        from .inputs import row_id_of

        row_id = row_id_of(text, self.job.fmt, self.config.limits)
        if self.job.fmt is InputFormat.OPENAI:
            return openai_error_line(line, row_id, error)
        return record_error_line(line, row_id, self.job.records.policy, error)


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports kilobytes)."""
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def reply_of(outcome: RequestOutcome, latency_s: float) -> RowReply:
    """A row's reply from the request path's outcome: the body the HTTP API would send, read as a
    value (a forwarded request's route is none: no cascade ran)."""
    if isinstance(outcome, Refused):
        return RowReply(outcome.status, outcome.error.body(), latency_s)
    if isinstance(outcome, Forwarded):
        # mai-batch never streams (batch/inputs.py refuses ``stream``): the engine's JSON reply
        return RowReply(200, outcome.body, latency_s)
    result = outcome.result
    tokens = result.trace.tokens().as_dict()
    return RowReply(200, chat_completion(outcome.job, result), latency_s, route=result.route, tokens=tokens)


def _worth_retrying(reply: RowReply) -> bool:
    return reply.status in RETRIED_STATUSES or reply.route in DEGRADED


def _what_failed(reply: RowReply) -> str:
    if reply.status != 200:
        return f"a {reply.status}"
    return f"a degraded answer ({reply.route})"
