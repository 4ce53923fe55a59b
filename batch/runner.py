"""A batch job from input to summary: the driver's part.

1. ``prepare`` (before any engine starts): one pass over the input's ids (format, rows, duplicates),
   and what the output already answers (a rerun resumes there);
2. ``run``: the model deployments started or attached (batch/model_tier.py); the input read by Ray
   Data (batch/source.py, the answered lines skipped at the read) and answered by a pool of actors
   (batch/answerer.py), rows streaming through, never collected; each finished group of lines appended
   to the output and counted (batch/tally.py) as it arrives, with the progress on the terminal.
Only this process writes the output, once per row, so a crash or Ctrl-C never duplicates one; rows in
flight when it stops are answered by the next run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evaluation.predictions import PredictionStore
from harness.provenance import provenance, stream_sha256
from serve_app.config import AppConfig

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
from .settings import BatchSettings, batch_config, rows_per_actor
from .source import numbered_lines, open_input
from .tally import Tally

ACTOR_NUM_CPUS = 0.01
BLOCKS_PER_ACTOR = 4

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
    retry_errors: str | None = None  # "server": rows that failed on the server's side; "all": 4xx too
    command: str = "mai-batch"  # as typed: the records' run.json names it
    config_path: str | None = None


@dataclass(frozen=True)
class Prepared:
    scan: InputScan
    path: Path  # the file the lines go to
    done: frozenset[int] = field(default_factory=frozenset)
    retried: int = 0  # error lines taken out to be answered again (--retry-errors)

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
    fmt = job.fmt or _format_of_first_line(job)
    path = output_file(job.output, fmt, job.records.policy)
    if fmt is InputFormat.OPENAI and path.is_dir():
        raise OutputMismatchError("is a folder; an OpenAI batch's output is a file")
    answered = answered_ids(path, fmt)
    scan = scan_lines(numbered_lines(job.input, max_line_bytes), fmt, answered, limits)
    if scan.fmt is InputFormat.RECORDS:
        _prediction_store(job, scan).open(fresh=False)
    retried: frozenset[int] = frozenset()
    if job.retry_errors is not None:  # once the output is known to be this input's, never before
        retried = drop_errors(path, fmt, client_errors=job.retry_errors == "all")
    return Prepared(scan, path, scan.answered - retried, len(retried))


def _format_of_first_line(job: BatchJob) -> InputFormat:
    for number, text in numbered_lines(job.input, job.settings.max_line_bytes):
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


def _prediction_store(job: BatchJob, scan: InputScan) -> PredictionStore:
    """mai-eval's folder for the records' predictions (its manifest names the dataset: a local path
    or a URI as given, its digest read through the filesystem that holds it)."""
    with open_input(job.input) as stream:
        digest = stream_sha256(stream)
    return PredictionStore(job.output, job.input, range(scan.rows), dataset_sha256=digest)


def run(
    job: BatchJob,
    prepared: Prepared,
    *,
    apps: Mapping[str, Any] | None = None,
    on_progress: Callable[[int, Tally], None] | None = None,
) -> dict[str, Any]:
    """Answer every row ``prepared`` left to do; returns the summary. ``apps``: the applications to start
    instead of the config's models (the tests' scripted ones)."""
    import ray

    from . import model_tier
    from .answerer import RowAnswerer, RowJob, peak_rss_mb
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
    row_job = RowJob(
        fmt=scan.fmt,
        base=str(_folder_of(job.input)),
        records=job.records,
        duplicates=scan.duplicates,
        rows_per_actor=per_actor,
        attempts=settings.attempts,
        max_line_bytes=settings.max_line_bytes,
        key_name=settings.key_name,
    )
    ray.data.DataContext.get_current().enable_progress_bars = False
    rows = ray.data.read_datasource(
        NumberedLines(
            job.input,
            skip=prepared.done,
            rows_per_block=per_actor,
            max_line_bytes=settings.max_line_bytes,
        ),
        num_cpus=0,
    )
    answered = rows.map_batches(
        RowAnswerer,
        fn_constructor_args=(batch_config(job.config, settings), targets, row_job),
        batch_size=per_actor,
        # Blocks answered side by side in each actor (its rows share the actor's slots): a block's slow
        # last rows never leave the slots idle while the next block waits for them.
        compute=ray.data.ActorPoolStrategy(
            size=settings.actors,
            max_tasks_in_flight_per_actor=BLOCKS_PER_ACTOR,
            max_concurrent_calls_per_actor=BLOCKS_PER_ACTOR,
        ),
        # The actors wait on the models: a sliver of a CPU each, so that SPREAD places them on the nodes
        # in turn (an actor asking for nothing is placed where the driver is).
        num_cpus=ACTOR_NUM_CPUS,
        scheduling_strategy="SPREAD",
    )
    writer = LineWriter(prepared.path, scan.fmt)
    started_at, started = time.time(), time.monotonic()
    first_lines_s: float | None = None  # the job's start: actors up, first rows answered
    first_lines = 0
    try:
        for batch in answered.iter_batches(batch_size=None, batch_format="pyarrow"):
            columns = batch.to_pydict()
            writer.write(columns["output"])
            if first_lines_s is None:
                first_lines_s, first_lines = time.monotonic() - started, len(columns["output"])
            for status, route, tokens, node, attempts, rss in zip(
                columns["status"],
                columns["route"],
                columns["tokens"],
                columns["node"],
                columns["attempts"],
                columns["peak_rss_mb"],
                strict=True,
            ):
                tally.add(status, route, json.loads(tokens), node, attempts, rss)
            if on_progress is not None:
                on_progress(len(columns["output"]), tally)
    finally:
        wall_s = time.monotonic() - started
        writer.close()
        usage = _key_usage(targets, settings.key_name)
        if not job.attach:
            model_tier.stop(targets)
        if scan.fmt is InputFormat.RECORDS and tally.rows:  # mai-eval report's timed segment
            segment = {"started": started_at, "wall_s": round(wall_s, 6), "requests": tally.rows}
            _prediction_store(job, scan).add_segment(job.records.policy, segment | {"batch": True})
        summary = tally.summary(wall_s) | {
            # Rows/s once the first lines are written: the job's start (actors, first calls) set apart.
            "first_lines_s": None if first_lines_s is None else round(first_lines_s, 3),
            "steady_rows_per_s": _rate(tally.rows - first_lines, wall_s - (first_lines_s or 0.0)),
            "driver_peak_rss_mb": peak_rss_mb(),
            # What the rows' API key used, from the key ledger (attached: the app's running total).
            "key_usage": usage,
            # Ray Data's own account of the run: each operator's wall and CPU time, rows and blocks.
            "ray_data_stats": _stats_text(answered),
        }
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


def _folder_of(path: str) -> Path:
    """The folder a record's relative image path is read from: the input's (a local path)."""
    return Path(path).resolve().parent if "://" not in path else Path(".")
