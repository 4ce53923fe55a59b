"""batch_stream: when ``mai-batch``'s lines reach its output, before and after lines were written as rows
finish, on the real CPU stack (configs/mai-cpu.yaml, deployed in process as app ``mai``).

Two codes (stream_runs.py): ``before``, the repository at ``before_commit`` (a block's lines written
when its last row is done), and ``after``, this tree. Each runs ``mai-batch --attach mai`` as a
subprocess over the first 240 and 1,000 easy-vqa test questions of the demo's seeded sample (the
batch scenario's), the two codes' order rotated from repeat to repeat; the bench follows the output
file and notes when each line appears (s from the command's start): the first line, the spread, the
plot of lines written against time (bench/results/batch-stream.png).

Then Ctrl-C drills on ``drill_rows`` rows: SIGINT to the job when the after code's full run had
written 25 %, 50 % and 90 % of its lines, the lines it had written by then and kept, the rows answered
by then (read off that full run, which writes each row as it is answered, lined up by the first line),
so the rows the Ctrl-C threw away, and the same command run again to the end: the output's duplicates
and gaps (goal 0 and 0).
The actors' start is the summary's (``actor_starts``, batch/actor_start.py), ``after`` only.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..scenario import Bench, Scenario
from ..stream_runs import (
    Code,
    Followed,
    code_at,
    drill_figures,
    follow,
    fraction_time,
    line_figures,
    output_lines,
    plot,
    ray_job_env,
    summary_figures,
)

CONFIG, APP = "mai-cpu.yaml", "mai"
WARM_UP = 16  # questions past the measured ones: each code's first job, untimed
PLOT = "batch-stream.png"


@dataclass(frozen=True)
class Parameters:
    sizes: tuple[int, ...] = (240, 1000)
    repeats: int = 1
    drill_rows: int = 240
    fractions: tuple[float, ...] = (0.25, 0.5, 0.9)
    before_commit: str = "b751b7c92fc90354942f8a8ca8759be67c3e131a"


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    import ray
    from ray import serve

    from harness.datasets import dataset_file, easy_vqa_records
    from harness.jsonl import read_jsonl, write_jsonl
    from harness.local_server import config_args, deploy
    from harness.paths import RESULTS, ROOT

    from ..batch_arms import ray_env
    from ..schedule import rotated

    total = max(parameters.sizes) + WARM_UP
    records = read_jsonl(
        dataset_file(f"easy-vqa-test-{total}.jsonl", lambda: easy_vqa_records("test", total))
    )
    env = ray_job_env(ray_env(ray.get_runtime_context().gcs_address))
    with tempfile.TemporaryDirectory(prefix="mai-bench-stream-") as tmp:
        folder = Path(tmp)
        codes = [Code("before", code_at(parameters.before_commit, folder)), Code("after", ROOT)]
        inputs = {size: folder / f"rows-{size}.jsonl" for size in {*parameters.sizes, parameters.drill_rows}}
        for size, path in inputs.items():
            write_jsonl(records[:size], path)
        write_jsonl(records[-WARM_UP:], folder / "warm-up.jsonl")
        jobs = Jobs(folder, env)
        deploy(config_args(CONFIG), name=APP)
        for code in codes:  # each code's worker pool started and every path compiled before timing
            jobs.run(code, folder / "warm-up.jsonl", "warm-up")
        runs = []
        for repeat in range(parameters.repeats):
            for size in parameters.sizes:
                for code in rotated(codes, repeat):
                    followed, summary = jobs.run(code, inputs[size], f"{size}-{repeat}")
                    runs.append(
                        {"code": code.name, "repeat": repeat, **line_figures(size, followed)} | summary
                    )
                    _say(f"{code.name} {size} rows: first line {runs[-1]['first_line_s']} s, "
                         f"last {runs[-1]['last_line_s']} s")  # fmt: skip
        drills = [
            jobs.drill(code, inputs[parameters.drill_rows], parameters.drill_rows, fraction, runs)
            for code in codes
            for fraction in parameters.fractions
        ]
        serve.delete(APP)
    plotted = plot(runs, RESULTS / PLOT)
    return {
        "config": f"configs/{CONFIG}",
        "before_commit": parameters.before_commit,
        "runs": runs,
        "drills": drills,
        "plot": f"bench/results/{PLOT}" if plotted else None,
    }


@dataclass
class Jobs:
    """The scenario's ``mai-batch`` runs, each into an output folder of its own (a drill's rerun into
    its interrupted run's)."""

    folder: Path
    env: Mapping[str, str]

    def run(
        self, code: Code, data: Path, name: str, *, interrupt_at_s: float | None = None
    ) -> tuple[Followed, dict[str, Any]]:
        out = self.folder / f"out-{code.name}-{name}"
        followed = follow(
            code.command(data, out, APP),
            cwd=code.folder,
            env=self.env,
            output=out / "predictions" / "mai.jsonl",
            interrupt_at_s=interrupt_at_s,
        )
        # A SIGINT that lands while a job is already shutting down may end it with 1 (the code before
        # this change did): the drill records the exit code; a full run must end with 0.
        if followed.returncode not in (0, 130) and interrupt_at_s is None:
            raise RuntimeError(f"{code.name} mai-batch exited {followed.returncode}:\n{followed.stderr_tail}")
        return followed, _summary(out / "summary.json")

    def drill(
        self, code: Code, data: Path, rows: int, fraction: float, runs: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any]:
        # Both codes are interrupted at the same time: when the after code's full run had written that
        # share of the rows (a share of the job's time would land in the start for small shares); rows
        # answered by then are read off that run, lined up by the first line (drill_figures).
        full = next(
            run for run in runs if run["rows"] == rows and run["repeat"] == 0 and run["code"] == "after"
        )
        answered_times = full["line_times_s"]
        at_s = fraction_time(answered_times, rows, fraction)
        name = f"drill-{rows}-{round(fraction * 100)}"
        interrupted, _ = self.run(code, data, name, interrupt_at_s=at_s)
        rerun, _ = self.run(code, data, name)
        answered = output_lines(self.folder / f"out-{code.name}-{name}" / "predictions" / "mai.jsonl")
        figures = drill_figures(
            fraction=fraction,
            rows=rows,
            interrupted=interrupted,
            rerun=rerun,
            answered=answered,
            answered_times=answered_times,
            in_flight=_in_flight(),
        )
        _say(f"{code.name} Ctrl-C at {fraction:.0%}: {figures}")
        return {"code": code.name, **figures}


def _summary(path: Path) -> dict[str, Any]:
    """What a run's summary adds to its line times (the ``after`` code's stream figures, the actors'
    start); an interrupted ``before`` run may have none."""
    keys = ("wall_s", "rows_per_s", "errors", "line_delay_s", "actor_starts", "rows_repeated")
    return summary_figures(path, keys)


def _in_flight() -> int:
    """The rows one actor keeps in flight under configs/mai-cpu.yaml (the models' capacity)."""
    from batch.cli import read_config
    from batch.settings import BatchSettings, rows_per_actor
    from harness.paths import CONFIGS

    return rows_per_actor(BatchSettings(), read_config(str(CONFIGS / CONFIG), None))


def _say(text: str) -> None:
    print(f"batch_stream: {text}", file=sys.stderr, flush=True)


def _n(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"`{result['config']}` in process, `mai-batch --attach mai` as a subprocess; *before*: commit "
        f"{result['before_commit'][:10]} (a block's lines written when its last row is done), *after*: "
        "lines written as rows finish. Times in seconds from the command's start, as the output file "
        "showed them; *line delay*: a line's write after its row's answer (the summary's, after only).",
        "",
        "| code | rows | first line | a quarter out | half out | last line | spread (first to last) "
        "| line delay median / max | command |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        delay = run.get("summary_line_delay_s")
        lines.append(
            f"| {run['code']} | {run['rows']:,} | {_n(run['first_line_s'])} | {_n(run['quarter_out_s'])} | "
            f"{_n(run['half_out_s'])} | {_n(run['last_line_s'])} | {_n(run['spread_s'])} | "
            + (f"{delay['median']:.2f} / {delay['max']:.2f}" if delay else "–")
            + f" | {_n(run['command_s'])} |"
        )
    if result.get("plot"):
        lines += ["", f"![lines written against time](results/{PLOT})"]
    lines += [
        "",
        "Ctrl-C (SIGINT to mai-batch) when the after code's full run had written that share of the rows, "
        "then the same command again to the end. *At Ctrl-C*: the interrupted run's lines by then; "
        "*answered by then*: the after code's full run's lines by that time, its clock lined up with the "
        "interrupted run's by their first lines (it writes each row as it is answered: an estimate, not a "
        "count of the interrupted run's answers); *lost*: those the interrupted run did not keep (rows "
        "answered, then thrown away). Goal: no more lost than the rows in flight, no duplicate or gap "
        "after the rerun.",
        "",
        "| code | Ctrl-C at | at Ctrl-C | lines kept | answered by then | lost | rows in flight "
        "| rerun's lines "
        "| duplicates | gaps |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for drill in result["drills"]:
        lines.append(
            f"| {drill['code']} | {drill['fraction']:.0%} ({_n(drill['interrupted_at_s'])} s) | "
            f"{drill.get('lines_at_ctrl_c', '–')} | "
            f"{drill['lines_kept']} | {drill['answered_by_then']} | {drill['lost']} | "
            f"{drill['rows_in_flight']} | {drill['rerun_lines']} | {drill['duplicates']} | {drill['gaps']} |"
        )
    lines += _start_lines(result["runs"])
    return lines


def _start_lines(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    starts = [start for run in runs for start in run.get("summary_actor_starts") or []]
    if not starts:
        return []
    keys = ("process_s", "init_s", "to_first_batch_s", "replica_s", "first_row_s", "total_s")
    rows = [" | ".join(_n(start.get(key), 2) for key in keys) for start in starts]
    return [
        "",
        "Each *after* actor's start (batch/actor_start.py): process up and batch.answerer imported, "
        "`__init__`, until Ray Data's first batch, the ingress replica made (begun as `__init__` "
        "ends), from it to the first row answered, and in all.",
        "",
        "| process | init | to first batch | replica | first row | total |",
        "|---|---|---|---|---|---|",
        *[f"| {row} |" for row in rows],
    ]


SCENARIO = Scenario(
    name="batch_stream",
    title="mai-batch's lines as rows finish: before and after",
    result="batch-stream.json",
    config=CONFIG,
    run=run,
    table=table,
    parameters=Parameters(),
)
