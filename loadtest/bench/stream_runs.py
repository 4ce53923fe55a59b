"""``mai-batch`` as a subprocess whose output file is followed line by line (when each line appeared,
from the command's start), interrupted with SIGINT when asked; and what its lines and summary add up to
(the batch_sources scenario, and experiments/batch-throughput's line-delay probe).

Everything but ``follow`` is pure, so its figures are tested on made-up lines."""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POLL_S = 0.05
EXIT_WAIT_S = 90.0  # a SIGINT'd job's shutdown (its summary, the Ray Data executor) may take a while


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


def duplicates_and_gaps(answered: Sequence[int], rows: int) -> dict[str, int]:
    """Input lines 1..rows (one row each): output lines beyond the first for a row, and rows with none."""
    counts = Counter(answered)
    return {
        "duplicates": sum(count - 1 for count in counts.values() if count > 1),
        "gaps": sum(1 for line in range(1, rows + 1) if line not in counts),
    }


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
