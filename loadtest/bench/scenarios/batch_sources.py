"""batch_sources: ``mai-batch`` reading a sharded input from a folder, a glob and a ``file://`` URI, and
``--retry-errors`` after a model replica was killed mid-job, on the real CPU stack (configs/mai-cpu.yaml,
deployed in process as app ``mai``).

Sources: the first ``rows`` easy-vqa test questions of the demo's seeded sample (the batch scenario's),
split into ``shards`` consecutive ``.jsonl`` files of one folder. ``mai-batch --attach mai`` (the
installed console script, a subprocess joining the bench's Ray) runs three times, each into an output
of its own: the input named as the folder, as the glob ``<folder>/*.jsonl``, and as the folder's
``file://`` URI, that run's output a ``file://`` URI too (written to a staging copy, uploaded when the
job ends: batch/output_store.py; the check reads the uploaded copy). Per run: its exit code, lines,
error lines, the command's seconds, and its output against the input: every row answered by one line
that names its line (numbered across the shards) and its record's id, duplicates and gaps (goal 0, 0);
across the runs, the rows whose answers differ (the plans explore, so a few may).

Retry: a job over ``retry_rows`` rows run with ``--attempts attempts`` (1: a row whose model call failed
gets its line as it failed; the default 6 would wait out the replica's restart and hide the fault),
its output followed; once ``kill_at`` of its lines are out, one replica of the ``kill`` model (the
large one by default: every row asks it, where text questions never ask the small one and a lost small
model degrades a yes/no answer rather than failing it) is killed (loadtest/faults.kill_one) and Serve
starts another. Its lines, error lines by status, degraded answers (a 200 from the model that was
left, which ``--retry-errors`` keeps) and exit code. Then, the replacement running and ``/readyz``
200, the same command with ``--retry-errors``: the rows asked again, the error lines left, the final
output's duplicates and gaps (goal 0, 0, 0), its seconds. A kill that cost no row an error line is
reported as it is (``error_lines: 0``).
Every job's actors start with it; one untimed warm-up job runs first (``WARM_UP`` other questions).
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from batch.inputs import InputFormat
from batch.outputs import line_of, retried, status_of
from serve_app.core.routes import DEGRADED

from ..batch_arms import mai_batch_command, ray_env, split_blocks
from ..scenario import Bench, Scenario
from ..stream_runs import Followed, duplicates_and_gaps, follow, ray_job_env, summary_figures

CONFIG, APP, POLICY = "mai-cpu.yaml", "mai", "mai"
WARM_UP = 16  # questions past the measured ones: the first job, untimed
RECORDS = InputFormat.RECORDS
# How each run names the shards (the ``uri`` run writes its output to a URI too), and its table label.
SOURCES = {"folder": "folder", "glob": "glob", "uri": "`file://` URI"}


@dataclass(frozen=True)
class Parameters:
    rows: int = 240
    shards: int = 4
    retry_rows: int = 240
    kill_at: float = 0.25  # the share of the retry job's lines out when the replica is killed
    attempts: int = 1  # the retry job's --attempts
    kill: str = "large"  # the model one of whose replicas is killed: small or large


def write_shards(records: Sequence[Mapping[str, Any]], folder: Path, shards: int) -> list[Path]:
    """``records`` as ``shards`` consecutive ``part-NN.jsonl`` files of ``folder`` (their path order is
    the records' order, so the n-th record is input line n across them)."""
    from harness.jsonl import write_jsonl

    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"part-{index:02d}.jsonl" for index in range(shards)]
    for path, block in zip(paths, split_blocks(records, shards), strict=True):
        write_jsonl(block, path)
    return paths


def named(source: str, shards: Path, out: Path) -> tuple[str, str]:
    """The input and output as a ``source`` run types them (folder, glob, ``file://`` URIs)."""
    return {
        "folder": (str(shards), str(out)),
        "glob": (str(shards / "*.jsonl"), str(out)),
        "uri": (shards.as_uri(), out.as_uri()),
    }[source]


def local_path(out: str) -> Path:
    """Where an output named by a path or a ``file://`` URI is on this disk."""
    return Path(unquote(urlparse(out).path)) if out.startswith("file://") else Path(out)


def read_output(path: Path) -> list[dict[str, Any]]:
    """A records output's prediction lines; none when the file is missing (an upload that failed)."""
    from harness.jsonl import read_jsonl

    return read_jsonl(path) if path.exists() else []


def output_check(rows: Sequence[Mapping[str, Any]], ids: Sequence[str]) -> dict[str, Any]:
    """An output's lines against its input (``ids[n - 1]``: input line n's id): lines, answers, error
    lines by status and commonest message, those ``--retry-errors`` asks again, degraded answers,
    duplicates and gaps, lines naming another record than their line's, whether the ids are the input's."""
    lines = [line_of(dict(row), RECORDS) for row in rows]
    statuses = [status_of(dict(row), RECORDS) for row in rows]
    errors = [row for row, status in zip(rows, statuses, strict=True) if status != 200]
    failed = Counter(status for status in statuses if status != 200)
    misnumbered = [
        row
        for row, line in zip(rows, lines, strict=True)
        if not line or line > len(ids) or ids[line - 1] != row.get("id")
    ]
    return {
        "lines": len(rows),
        "answered": len(rows) - len(errors),
        "error_lines": len(errors),
        "error_statuses": {str(s): n for s, n in sorted(failed.items(), key=lambda item: str(item[0]))},
        "error_messages": dict(Counter(str(row.get("error", ""))[:120] for row in errors).most_common(3)),
        "retryable": sum(1 for status in statuses if retried(status)),
        "degraded": sum(1 for row in rows if row.get("route") in DEGRADED),
        **duplicates_and_gaps([line for line in lines if line is not None], len(ids)),
        "misnumbered": len(misnumbered),
        "ids_match": {row.get("id") for row in rows} == set(ids),
    }


def differing_answers(outputs: Sequence[Sequence[Mapping[str, Any]]]) -> dict[str, int]:
    """Across runs over one input: the rows answered (200) in every run, and those whose answers differ."""
    answers = [{row["id"]: row.get("answer") for row in rows if row.get("status") == 200} for rows in outputs]
    common = set.intersection(*(set(run) for run in answers)) if answers else set()
    return {
        "answered_in_every_run": len(common),
        "differing": sum(1 for row_id in common if len({run[row_id] for run in answers}) > 1),
    }


def kill_line(rows: int, fraction: float) -> int:
    """The line count at which a job of ``rows`` rows has ``fraction`` of its lines out (at least 1)."""
    return max(1, math.ceil(rows * fraction))


@dataclass
class KillAt:
    """``follow``'s ``on_lines``: one replica of ``deployment`` killed once ``lines`` lines are out, once
    (a failed kill noted, never raised: the job must run to its end); what was killed and when."""

    deployment: str
    lines: int
    killed: str | None = None
    at_s: float | None = None
    at_lines: int | None = None
    at_monotonic: float | None = None
    failure: str | None = None

    def __call__(self, written: int, now_s: float) -> None:
        if self.at_s is not None or written < self.lines:
            return
        from loadtest.faults import kill_one

        self.at_s, self.at_lines, self.at_monotonic = round(now_s, 3), written, time.monotonic()
        try:
            self.killed = kill_one(self.deployment)
        except Exception as exc:  # noqa: BLE001 - reported in the result
            self.failure = f"{type(exc).__name__}: {exc}"
        _say(f"killed {self.killed or self.failure} at {written} lines ({self.at_s} s)")


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    if parameters.kill not in ("small", "large"):
        raise ValueError(f"kill={parameters.kill}: the model whose replica is killed is small or large")
    import ray
    from ray import serve

    from harness.datasets import dataset_file, easy_vqa_records
    from harness.jsonl import read_jsonl, write_jsonl
    from harness.local_server import config_args, deploy

    total = max(parameters.rows, parameters.retry_rows) + WARM_UP
    records = read_jsonl(
        dataset_file(f"easy-vqa-test-{total}.jsonl", lambda: easy_vqa_records("test", total))
    )
    with tempfile.TemporaryDirectory(prefix="mai-bench-sources-") as tmp:
        folder = Path(tmp)
        # Outputs at a URI are staged here, not in the user's ~/.cache/mai-batch.
        env = ray_job_env(ray_env(ray.get_runtime_context().gcs_address)) | {
            "MAI_BATCH_STAGING": str(folder / "staging")
        }
        jobs = Jobs(folder, env)
        write_shards(records[: parameters.rows], folder / "shards", parameters.shards)
        write_jsonl(records[: parameters.retry_rows], folder / "retry.jsonl")
        write_jsonl(records[-WARM_UP:], folder / "warm-up.jsonl")
        deploy(config_args(CONFIG), name=APP)
        warm_up = jobs.run(str(folder / "warm-up.jsonl"), str(folder / "out-warm-up"))  # untimed
        if warm_up.returncode != 0:
            raise RuntimeError(f"the warm-up's mai-batch exited {warm_up.returncode}:\n{warm_up.stderr_tail}")
        ids = [record["id"] for record in records[: parameters.rows]]
        sources, outputs = zip(*(jobs.source(source, ids) for source in SOURCES), strict=True)
        retry_ids = [record["id"] for record in records[: parameters.retry_rows]]
        retry = jobs.retry(parameters, retry_ids, bench.url)
        serve.delete(APP)
    return {
        "config": f"configs/{CONFIG}",
        "shards": parameters.shards,
        "sources": list(sources),
        "answers": differing_answers(outputs),
        "retry": retry,
    }


@dataclass
class Jobs:
    """The scenario's ``mai-batch`` runs, each followed (batch_stream's follower) into an output of its
    own under ``folder``."""

    folder: Path
    env: Mapping[str, str]

    def run(
        self, data: str, out: str, *extra: str, on_lines: Callable[[int, float], None] | None = None
    ) -> Followed:
        """``mai-batch`` over ``data`` into ``out``, its lines followed where they are written while it
        runs (an output at a URI: its staging copy, batch/output_store.py)."""
        from batch.output_store import is_uri, staged
        from harness.paths import CONFIGS, ROOT

        written = staged(out, self.folder / "staging").local if is_uri(out) else Path(out)
        return follow(
            mai_batch_command(data, out, POLICY, config=CONFIGS / CONFIG, app=APP) + list(extra),
            cwd=ROOT,
            env=self.env,
            output=written / "predictions" / f"{POLICY}.jsonl",
            on_lines=on_lines,
        )

    def source(self, source: str, ids: Sequence[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """One source's run over the shards: its figures, and its output's lines (read where the job
        left them: an output at a URI, the uploaded copy)."""
        data, out = named(source, self.folder / "shards", self.folder / f"out-{source}")
        followed = self.run(data, out)
        rows = read_output(local_path(out) / "predictions" / f"{POLICY}.jsonl")
        figures = output_check(rows, ids)
        _say(f"{source}: exit {followed.returncode}, {figures['lines']} lines, {followed.command_s} s")
        return {
            "input": source,
            "input_given": data.replace(str(self.folder), "<tmp>"),
            "output_given": out.replace(str(self.folder), "<tmp>"),
            "rows": len(ids),
            "exit_code": followed.returncode,
            "command_s": followed.command_s,
            "lines_followed": len(followed.line_times_s),
            **_summary(local_path(out) / "summary.json"),
            **figures,
            **_failure(followed),
        }, rows

    def retry(self, parameters: Parameters, ids: Sequence[str], url: str) -> dict[str, Any]:
        from batch.model_tier import attach

        data, out = str(self.folder / "retry.jsonl"), str(self.folder / "out-retry")
        attempts = ("--attempts", str(parameters.attempts))
        kill = KillAt(
            getattr(attach(APP), parameters.kill).deployment, kill_line(len(ids), parameters.kill_at)
        )
        first = self.run(data, out, *attempts, on_lines=kill)
        predictions, summary = Path(out) / "predictions" / f"{POLICY}.jsonl", Path(out) / "summary.json"
        first_figures, first_summary = output_check(read_output(predictions), ids), _summary(summary)
        _say(f"killed run: exit {first.returncode}, {first_figures['error_lines']} error lines")
        recovered_by_s = _wait_replaced(kill, url) if kill.killed else None
        # A rerun with nothing to ask again writes no summary: the first run's must not be read as its.
        summary.unlink(missing_ok=True)
        rerun = self.run(data, out, *attempts, "--retry-errors")
        final, rerun_summary = output_check(read_output(predictions), ids), _summary(summary)
        _say(f"rerun: exit {rerun.returncode}, {rerun_summary.get('summary_rows', 0)} rows asked again")
        return {
            "rows": len(ids),
            "attempts": parameters.attempts,
            "deployment": kill.deployment,
            "killed": kill.killed,
            "kill_failure": kill.failure,
            "killed_at_lines": kill.at_lines,
            "killed_at_s": kill.at_s,
            "recovered_by_s": recovered_by_s,
            "first": {"exit_code": first.returncode, "command_s": first.command_s}
            | first_summary
            | first_figures
            | _failure(first),
            # The rerun rewrites the output before appending (batch/outputs.drop_errors): its lines are
            # read from the file once it ends, not followed.
            "rerun": {
                "exit_code": rerun.returncode,
                "command_s": rerun.command_s,
                "rows_retried": rerun_summary.get("summary_rows", 0),
            }
            | rerun_summary
            | final
            | _failure(rerun),
        }


def _wait_replaced(kill: KillAt, url: str, timeout_s: float = 900.0) -> float:
    """Seconds from the kill until the killed replica's successor runs and ``/readyz`` answers 200
    (looked at once the killed job has ended: at most that long)."""
    from harness.local_server import replica_actors, replica_counts, wait_ready

    assert kill.at_monotonic is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        live = replica_actors(kill.deployment)
        if live and kill.killed not in live and replica_counts(APP).get(kill.deployment, 0) >= 1:
            break
        time.sleep(0.5)
    wait_ready(url, max(1.0, deadline - time.monotonic()))
    return round(time.monotonic() - kill.at_monotonic, 1)


def _summary(path: Path) -> dict[str, Any]:
    """What a run's summary adds: the rows it answered, their wall time, its errors."""
    return summary_figures(path, ("rows", "wall_s", "errors", "retried"))


def _failure(followed: Followed) -> dict[str, str]:
    """A failed command's last words (its stderr's end), to read beside its figures."""
    return {} if followed.returncode == 0 else {"stderr_tail": followed.stderr_tail[-800:]}


def _say(text: str) -> None:
    print(f"batch_sources: {text}", file=sys.stderr, flush=True)


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _statuses(figures: Mapping[str, Any]) -> str:
    shown = ", ".join(f"{status}: {count}" for status, count in figures["error_statuses"].items())
    return f"{figures['error_lines']}" + (f" ({shown})" if shown else "")


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"`{result['config']}` in process, `mai-batch --attach mai` as a subprocess over one folder of "
        "`.jsonl` shards, named three ways; the `file://` run writes to a `file://` URI too (staged, "
        "uploaded at the end; checked on the uploaded copy). *Misnumbered*: lines naming another record "
        "than their input line's (rows are numbered across the shards). Goal: 0 duplicates, 0 gaps.",
        "",
        "| input | output | rows | exit | lines | error lines | duplicates | gaps | misnumbered "
        "| ids as the input's | command s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in result["sources"]:
        lines.append(
            f"| {SOURCES[run['input']]} (`{run['input_given']}`) | `{run['output_given']}` | {run['rows']} "
            f"| {run['exit_code']} | {run['lines']} | {_statuses(run)} | {run['duplicates']} | {run['gaps']} "
            f"| {run['misnumbered']} | {'yes' if run['ids_match'] else 'no'} | {_n(run['command_s'])} |"
        )
    answers = result["answers"]
    lines += [
        "",
        f"Rows answered in every run: {answers['answered_in_every_run']}; of them answered differently "
        f"from one run to another: {answers['differing']} (the plans explore).",
    ]
    retry = result["retry"]
    killed = retry["killed"] or f"nothing ({retry['kill_failure']})"
    lines += [
        "",
        f"`--retry-errors` after a killed model replica: {retry['rows']} rows with `--attempts "
        f"{retry['attempts']}`; `{killed}` killed at {retry['killed_at_lines']} lines "
        f"({_n(retry['killed_at_s'])} s), its successor ready by {_n(retry['recovered_by_s'])} s after the "
        "kill (looked at once the job ended). Then the same command with `--retry-errors`. *Degraded*: "
        "answers from the model left (a 200, kept). Goal after the rerun: 0 error lines, 0 duplicates, "
        "0 gaps.",
        "",
        "| run | exit | lines | error lines | degraded | rows asked again | duplicates | gaps | command s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    first, rerun = retry["first"], retry["rerun"]
    lines += [
        f"| killed | {first['exit_code']} | {first['lines']} | {_statuses(first)} | {first['degraded']} | – "
        f"| {first['duplicates']} | {first['gaps']} | {_n(first['command_s'])} |",
        f"| `--retry-errors` | {rerun['exit_code']} | {rerun['lines']} | {_statuses(rerun)} | "
        f"{rerun['degraded']} | {rerun['rows_retried']} | {rerun['duplicates']} | {rerun['gaps']} "
        f"| {_n(rerun['command_s'])} |",
    ]
    return lines


SCENARIO = Scenario(
    name="batch_sources",
    title="mai-batch's sharded inputs and URIs, and --retry-errors after a killed replica",
    result="batch-sources.json",
    config=CONFIG,
    run=run,
    table=table,
    parameters=Parameters(),
)
