"""The batch_stream scenario's runs: ``mai-batch`` as a subprocess whose output file is followed line by
line (when each line appeared, from the command's start), interrupted with SIGINT when asked, then run
again to the end; and what those lines add up to.

The ``before`` code is the repository at ``Parameters.before_commit`` (``git archive``, into a folder of
its own): its driver runs from that folder, and Ray gives a job's workers the driver's folder first on
their path (``ray/_private/worker.py``: ``code_paths``, the driver's current directory, shipped in
``py_driver_sys_path``), so its actors run that commit's code too. ``after`` is this tree, as installed.

Everything but ``follow``, ``code_at`` and ``plot`` is pure, so its figures are tested on made-up lines."""

from __future__ import annotations

import bisect
import json
import math
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from batch.delivery import quantiles

POLL_S = 0.05
EXIT_WAIT_S = 90.0  # a SIGINT'd job's shutdown (its summary, the Ray Data executor) may take a while


@dataclass(frozen=True)
class Code:
    """Which mai-batch runs: its name, the folder its driver runs in and the config it reads."""

    name: str
    folder: Path

    def command(self, data: Path, out: Path, app: str) -> list[str]:
        config = self.folder / "configs" / "mai-cpu.yaml"
        return [sys.executable, "-m", "batch.cli", str(data), "--output", str(out), "--config", str(config),
                "--attach", app, "--policy", "mai", "--no-progress"]  # fmt: skip


def code_at(commit: str, folder: Path) -> Path:
    """The repository's files at ``commit``, extracted under ``folder`` (git archive: read only)."""
    from harness.paths import ROOT

    target = folder / f"code-{commit[:12]}"
    target.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive.stdout, check=True)
    return target


@dataclass
class Followed:
    """One followed run: when each line appeared (s from the start), its exit code, its whole time."""

    line_times_s: list[float] = field(default_factory=list)
    returncode: int | None = None
    command_s: float = 0.0
    interrupted_at_s: float | None = None
    stderr_tail: str = ""


def follow(
    command: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    output: Path,
    interrupt_at_s: float | None = None,
    timeout_s: float = 1800.0,
    on_lines: Callable[[int, float], None] | None = None,
    poll_s: float = POLL_S,
    new_session: bool = False,
) -> Followed:
    """Run ``command``, timing each line appended to ``output`` (lines already there are not counted);
    SIGINT at ``interrupt_at_s``, as a user's Ctrl-C. ``on_lines``, while the command runs: called at
    each poll with the lines counted so far and the seconds since the start (a fault injected mid-job).
    ``poll_s``: the time between two looks at the output; ``new_session``: the job in a session of its
    own (below; the line-delay probe's contrast)."""
    done = Followed()
    offset = output.stat().st_size if output.exists() else 0
    with tempfile.TemporaryFile("w+") as stderr:
        process = subprocess.Popen(
            list(command), cwd=cwd, env=dict(env), stdout=subprocess.DEVNULL, stderr=stderr,
            # A process group of its own: a Ctrl-C at the bench's terminal does not reach the job. Not a
            # session of its own (``new_session``, for the line-delay probe only): under Linux's
            # autogroup a new session is a scheduling group of its own, and there the job's driver
            # wrote its lines a median 0.7-1.4 s after their answers instead of 0.35 s
            # (experiments/batch-throughput/line-delay-sessions.json).
            start_new_session=new_session,
            process_group=None if new_session else 0,
            # A shell's background job (a CI run, `make bench &`) ignores SIGINT, and its children
            # inherit that: Python then raises no KeyboardInterrupt. The job gets Ctrl-C as a user's.
            preexec_fn=_sigint_as_a_terminal_sends_it,
        )  # fmt: skip
        started = time.monotonic()
        while True:
            finished = process.poll() is not None
            now = time.monotonic() - started
            offset = _count_new_lines(output, offset, now, done.line_times_s)
            if finished:
                break
            if on_lines is not None:
                on_lines(len(done.line_times_s), now)
            if interrupt_at_s is not None and done.interrupted_at_s is None and now >= interrupt_at_s:
                process.send_signal(signal.SIGINT)
                done.interrupted_at_s = round(now, 3)
            limit = timeout_s if done.interrupted_at_s is None else done.interrupted_at_s + EXIT_WAIT_S
            if now > limit:
                process.kill()
            time.sleep(poll_s)
        done.returncode, done.command_s = process.returncode, round(time.monotonic() - started, 3)
        stderr.seek(0)
        done.stderr_tail = stderr.read()[-3000:]
    return done


def _sigint_as_a_terminal_sends_it() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _count_new_lines(path: Path, offset: int, now: float, times: list[float]) -> int:
    if not path.exists():
        return offset
    with path.open("rb") as file:
        file.seek(offset)
        new = file.read()
    complete = new[: new.rfind(b"\n") + 1]  # a line counts once it is whole
    times.extend([round(now, 3)] * complete.count(b"\n"))
    return offset + len(complete)


def line_figures(rows: int, followed: Followed) -> dict[str, Any]:
    """A whole run's stream: its first and last line, how its lines spread over it, and when the
    first quarter, half and every line were out (s from the command's start)."""
    times = followed.line_times_s
    return {
        "rows": rows,
        "lines": len(times),
        "command_s": followed.command_s,
        "first_line_s": times[0] if times else None,
        "last_line_s": times[-1] if times else None,
        "spread_s": round(times[-1] - times[0], 3) if times else None,
        "line_times": quantiles(times),
        "quarter_out_s": _time_for(times, rows / 4),
        "half_out_s": _time_for(times, rows / 2),
        "line_times_s": [round(t, 2) for t in times],  # the plot's points
    }


def _time_for(times: Sequence[float], lines: float) -> float | None:
    index = max(0, int(lines + 0.999) - 1)
    return times[index] if index < len(times) else None


def written_by(times: Sequence[float], at_s: float) -> int:
    """How many of a full run's lines were out ``at_s`` seconds after its start."""
    return bisect.bisect_right(sorted(times), at_s)


def output_lines(path: Path) -> list[int]:
    """The input line each output line answers (a records run's ``line``), in file order."""
    lines = []
    for text in path.read_text().splitlines():
        if text.strip():
            lines.append(int(json.loads(text)["line"]))
    return lines


def duplicates_and_gaps(answered: Sequence[int], rows: int) -> dict[str, int]:
    """Input lines 1..rows (one row each): output lines beyond the first for a row, and rows with none."""
    counts = Counter(answered)
    return {
        "duplicates": sum(count - 1 for count in counts.values() if count > 1),
        "gaps": sum(1 for line in range(1, rows + 1) if line not in counts),
    }


def drill_figures(
    *,
    fraction: float,
    rows: int,
    interrupted: Followed,
    rerun: Followed,
    answered: Sequence[int],
    answered_times: Sequence[float],
    in_flight: int,
) -> dict[str, Any]:
    """A Ctrl-C drill: the lines the interrupted run had written by the SIGINT and kept in all; the rows
    answered by then, read off a full run that writes each row as it is answered (``answered_times``),
    its clock set to the interrupted run's by their first lines (a job's start varies by seconds, which
    at full pace is dozens of rows); the rows the rerun answered; and the output's duplicates and gaps.
    Without a line before the SIGINT the two runs are lined up by their starts."""
    at = interrupted.interrupted_at_s
    times = interrupted.line_times_s
    kept = len(times)
    before = sum(1 for seen in times if at is not None and seen <= at)
    shift = times[0] - min(answered_times) if before and answered_times else 0.0
    by_then = max(written_by(answered_times, at - shift), before) if at is not None else None
    return {
        "fraction": fraction,
        "interrupted_at_s": at,
        "exit_code": interrupted.returncode,
        "lines_at_ctrl_c": before,
        "lines_kept": kept,
        "answered_by_then": by_then,
        "full_run_shift_s": round(shift, 3),
        # Rows answered by then that the output did not keep: work done and thrown away.
        "lost": None if by_then is None else max(0, by_then - kept),
        "rows_in_flight": in_flight,
        "rerun_lines": len(rerun.line_times_s),
        "rerun_exit_code": rerun.returncode,
        **duplicates_and_gaps(answered, rows),
    }


def fraction_time(times: Sequence[float], rows: int, fraction: float) -> float:
    """When a full run had written ``fraction`` of its ``rows`` lines (its last line's time when it
    wrote fewer)."""
    ordered = sorted(times)
    return ordered[min(len(ordered), max(1, math.ceil(fraction * rows))) - 1]


def summary_figures(path: Path, keys: Sequence[str]) -> dict[str, Any]:
    """``keys`` of a run's summary.json, each as ``summary_<key>`` (those it has); none when the run
    wrote no summary (an interrupted run, or one with nothing to do)."""
    if not path.exists():
        return {}
    summary = json.loads(path.read_text())
    return {"summary_" + key: summary[key] for key in keys if key in summary}


def ray_job_env(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` without a job config a parent may have set: each run is its own Ray job."""
    return {key: value for key, value in base.items() if key != "RAY_JOB_CONFIG_JSON_ENV_VAR"}


def plot(runs: Sequence[Mapping[str, Any]], path: Path) -> bool:
    """Lines written against time, one panel per job size, one curve per code; False without
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    sizes = sorted({run["rows"] for run in runs})
    figure, panels = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 3.6), dpi=110, squeeze=False)
    for panel, size in zip(panels[0], sizes, strict=True):
        for run in (run for run in runs if run["rows"] == size):
            times = run["line_times_s"]
            label = f"{run['code']} (run {run['repeat'] + 1})"
            panel.step(times, range(1, len(times) + 1), where="post", label=label)
            panel.set_title(f"{size:,} rows", fontsize=10)
        panel.set_xlabel("seconds since mai-batch started")
        panel.set_ylabel("lines written")
        panel.grid(True, alpha=0.3)
        panel.legend(fontsize=8)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
    return True
