"""A batch job from input to summary: the driver's part.

1. ``prepare`` (before any engine starts): one pass over the input's ids (format, rows, duplicates),
   and what the output already answers (a rerun resumes there);
2. ``run``: the model deployments started or attached (batch/model_tier.py); the input read by Ray
   Data (batch/source.py, the answered lines skipped at the read) and answered by a pool of actors
   (batch/answerer.py, batch/pipeline.py), rows streaming through, never collected; each row's line
   appended to the output and counted (batch/delivery.py, batch/tally.py) as soon as it is answered,
   with the progress on the terminal.
Only this process writes the output, once per row, so a crash or Ctrl-C never duplicates one; rows in
flight when it stops are answered by the next run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.predictions import PredictionStore
from harness.provenance import provenance, stream_sha256
from serve_app.config import AppConfig

from .delivery import Delivery
from .inputs import (
    InputFormat,
    InputFormatError,
    InputScan,
    OutputMismatchError,
    RecordSettings,
    first_format,
    scan_lines,
)
from .outputs import LineWriter, answered_ids, drop_errors, output_file
from .pipeline import answered_rows
from .settings import BatchSettings, batch_config, rows_per_actor
from .shards import Shards, shards_of
from .source import numbered_lines
from .tally import Tally

PASSES = 3  # the job's pass, and up to two more for rows a retried task never handed back

logger = logging.getLogger("mai-batch")


@dataclass(frozen=True)
class BatchJob:
    """What the command line asked for, validated."""

    input: str
    output: Path
    config: AppConfig
    settings: BatchSettings = BatchSettings()
    records: RecordSettings = RecordSettings()
    fmt: InputFormat | None = None
    attach: str | None = None
    output_uri: str | None = None  # where the output is uploaded when the job ends (batch/output_store.py)
    retry_errors: str | None = None  # "server": rows that failed on the server's side; "all": 4xx too
    command: str = "mai-batch"  # as typed: the records' run.json names it
    config_path: str | None = None
    # This run's id, new for each run of the command (a resumed job gets another): on its start line,
    # in its summary, and on each row's trace (``mai.batch.job_id``), so an operator finds its rows.
    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class Prepared:
    scan: InputScan
    path: Path  # the file the lines go to
    done: frozenset[int] = field(default_factory=frozenset)
    retried: int = 0  # error lines taken out to be answered again (--retry-errors)
    shards: Shards | None = None  # the input's files (batch/shards.py)
    offsets: Mapping[str, int] = field(default_factory=dict)  # each shard's first line number less one
    store: PredictionStore | None = None  # a records folder's predictions (its digest read once, here)

    @property
    def todo(self) -> int:
        return self.scan.rows - len(self.done)


def prepare(job: BatchJob) -> Prepared:
    """Read the input's ids and the output's answered lines; ``OSError`` for an unreadable input,
    ``InputFormatError`` for one in no format, ``OutputMismatchError`` for an output mai-batch did not
    write (``outputs.ForeignOutputError``, nothing changed),
    ``evaluation.predictions.DatasetMismatchError`` for a records folder that holds another dataset's
    predictions."""
    limits, max_line_bytes = job.config.limits, job.settings.max_line_bytes
    shards = shards_of(job.input)
    fmt = job.fmt or _format_of_first_line(shards, job)
    path = output_file(job.output, fmt, job.records.policy)
    if fmt is InputFormat.OPENAI and path.is_dir():
        raise OutputMismatchError("is a folder; an OpenAI batch's output is a file")
    answered = answered_ids(path, fmt)
    offsets: dict[str, int] = {}
    scan = scan_lines(numbered_lines(shards, max_line_bytes, offsets), fmt, answered, limits)
    store = _prediction_store(job, scan, shards) if scan.fmt is InputFormat.RECORDS else None
    if store is not None:
        store.open(fresh=False)
    retried: frozenset[int] = frozenset()
    if job.retry_errors is not None:  # once the output is known to be this input's, never before
        retried = drop_errors(path, fmt, client_errors=job.retry_errors == "all")
    return Prepared(scan, path, scan.answered - retried, len(retried), shards, offsets, store)


def _format_of_first_line(shards: Shards, job: BatchJob) -> InputFormat:
    for number, text in numbered_lines(shards, job.settings.max_line_bytes):
        return first_format(number, text, job.config.limits)
    raise InputFormatError("the input has no lines")


def record_run(job: BatchJob, rows_in_flight: int) -> None:
    """``run.json`` of a records folder, as ``mai-eval run`` writes it, so ``mai-eval report``
    scores it: this policy added to those run into the folder before (the first one the baseline)."""
    path = job.output / "run.json"
    earlier = json.loads(path.read_text()) if path.exists() else {}
    policy = job.records.policy
    policies = [*earlier.get("policies", []), *([] if policy in earlier.get("policies", []) else [policy])]
    runs = earlier.get("runs", {}) | {policy: {"policy": policy, "options": dict(job.records.options)}}
    meta = provenance(
        job.command,
        config=job.config_path,
        dataset=job.input,
        url="mai-batch (Ray Data, no HTTP)",
        concurrency=rows_in_flight,
        baseline=earlier.get("baseline", policy),
        transfer_selector=None,
        limit=None,
        policies=policies,
        runs=runs,
    ) | {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    path.write_text(json.dumps(meta, indent=2) + "\n")


def _prediction_store(job: BatchJob, scan: InputScan, shards: Shards) -> PredictionStore:
    """mai-eval's folder for the records' predictions (its manifest names the dataset: a local path,
    folder, glob or URI as given, its digest that of its shards' bytes one after the other, read
    through the filesystem that holds them: one file's is the file's own)."""
    digest = hashlib.sha256()
    for path in shards:
        with shards.open(path) as stream:
            stream_sha256(stream, digest)
    return PredictionStore(job.output, job.input, range(scan.rows), dataset_sha256=digest.hexdigest())


def run(
    job: BatchJob,
    prepared: Prepared,
    *,
    apps: Mapping[str, Any] | None = None,
    on_progress: Callable[[int, Tally], None] | None = None,
) -> dict[str, Any]:
    """Answer every row ``prepared`` left to do; returns the summary. ``apps``: the applications to start
    instead of the config's models (the tests' scripted ones)."""
    from . import model_tier
    from .answerer import RowJob, peak_rss_mb
    from .source import NumberedLines

    scan, settings = prepared.scan, job.settings
    tally = Tally(skipped=len(prepared.done))
    if job.attach:
        targets = model_tier.attach(job.attach)
    else:
        targets = model_tier.start(apps if apps is not None else model_tier.model_apps(job.config))
    per_actor = rows_per_actor(settings, job.config)
    if scan.fmt is InputFormat.RECORDS:
        record_run(job, per_actor * settings.actors)
    shards = prepared.shards or shards_of(job.input)
    row_job = RowJob(
        fmt=scan.fmt,
        base=shards.folder(),
        records=job.records,
        duplicates=scan.duplicates,
        rows_per_actor=per_actor,
        attempts=settings.attempts,
        max_line_bytes=settings.max_line_bytes,
        key_name=settings.key_name,
        job_id=job.job_id,
    )
    writer = LineWriter(prepared.path, scan.fmt)
    delivery = Delivery(writer, tally, on_progress)
    started_at = time.time()
    answered = None
    try:
        for _ in range(PASSES):
            source = NumberedLines(
                shards,
                offsets=prepared.offsets,
                skip=prepared.done | delivery.written,
                rows_per_block=per_actor,
                max_line_bytes=settings.max_line_bytes,
            )
            answered = answered_rows(
                source,
                (batch_config(job.config, settings), targets, row_job),
                actors=settings.actors,
                rows_per_actor=per_actor,
            )
            # Each block as it comes (one row, or the few an actor finished together), written at once:
            # no prefetch, which would hold every block until the next one is there (batch/pipeline.py).
            for batch in answered.iter_batches(batch_size=None, batch_format="pyarrow", prefetch_batches=0):
                delivery.take(batch.to_pydict())
            missing = prepared.todo - len(delivery.written)
            if missing <= 0:
                break
            # Ray retried a task whose actor died after some of its rows had gone on: a row of its may
            # not have come at all. Those, and only those, are read and asked again.
            logger.warning("mai-batch: %d rows did not come back; asking them again", missing)
    finally:
        wall_s = time.monotonic() - delivery.started
        writer.close()
        usage = _key_usage(targets, settings.key_name)
        if not job.attach:
            model_tier.stop(targets)
        if scan.fmt is InputFormat.RECORDS and tally.rows:  # mai-eval report's timed segment
            segment = {"started": started_at, "wall_s": round(wall_s, 6), "requests": tally.rows}
            store = prepared.store or _prediction_store(job, scan, shards)
            store.add_segment(job.records.policy, segment | {"batch": True})
        stream = delivery.figures()
        summary = (
            tally.summary(wall_s)
            | stream
            | {
                # The rows' traces carry it (``mai.batch.job_id``).
                "job_id": job.job_id,
                # Rows/s once the first line is written: the job's start (actors, first calls) set apart.
                "steady_rows_per_s": _rate(tally.rows - 1, wall_s - (delivery.first_line_s or 0.0)),
                "driver_peak_rss_mb": peak_rss_mb(),
                # What the rows' API key used, from the key ledger (attached: the app's running total).
                "key_usage": usage,
                # Ray Data's own account of the run: each operator's wall and CPU time, rows and blocks.
                "ray_data_stats": None if answered is None else _stats_text(answered),
            }
        )
        summary_path(job.output, scan.fmt).write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _key_usage(targets: Any, key_name: str | None) -> dict[str, Any] | None:
    """The key ledger's usage of the key the rows counted against (``mai-batch`` by default)."""
    if targets.ledger is None:
        return None
    from ray import serve

    name = key_name or "mai-batch"
    try:
        ledger = serve.get_deployment_handle(targets.ledger.deployment, targets.ledger.app)
        return {"key": name, **ledger.snapshot.remote().result(timeout_s=30).get(name, {})}
    except Exception:  # the bill is read for the summary; its absence never fails the job
        logger.warning("mai-batch: the key ledger's usage was not read", exc_info=True)
        return None


def _rate(rows: int, seconds: float) -> float | None:
    return round(rows / seconds, 3) if rows > 0 and seconds > 0 else None


def _stats_text(dataset: Any) -> str | None:
    try:
        return dataset.stats()
    except Exception:  # an interrupted run has none to give; the summary is still written
        return None


def summary_path(output: Path, fmt: InputFormat) -> Path:
    return (
        output / "summary.json"
        if fmt is InputFormat.RECORDS
        else output.with_name(output.name + ".summary.json")
    )
