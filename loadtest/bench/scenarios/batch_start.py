"""batch_start: where a ``mai-batch`` actor's first seconds go, before and after the cascade's calls
became plain values (deployments/plain_chat.py), on the real CPU stack (configs/mai-cpu.yaml, deployed
in process as app ``mai``).

Two codes (stream_runs.py): ``before``, the repository at ``before_commit`` (the ingress's model
clients built vLLM's ``ChatCompletionRequest`` and read its replies, so an actor loaded vLLM's
protocol before its first row), and ``after``, this tree. Each runs ``mai-batch --attach mai`` as a
subprocess over the first ``rows`` easy-vqa test questions, ``repeats`` times, the codes' order
rotated from repeat to repeat, after an untimed warm-up job per code. Every actor of every job reports
its start's phases (batch/actor_start.py); the result keeps them all, and per code each phase's
median with its range, and each job's first line.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cells import cell
from ..scenario import Bench, Scenario
from ..stream_runs import Code, code_at, follow, ray_job_env, summary_figures
from ..summary import spread

CONFIG, APP = "mai-cpu.yaml", "mai"
WARM_UP = 16  # questions past the measured ones: each code's first job, untimed
PHASES = ("process_s", "init_s", "to_first_batch_s", "replica_s", "first_row_s", "total_s")


@dataclass(frozen=True)
class Parameters:
    rows: int = 48
    repeats: int = 3
    before_commit: str = "c0f9aa0aca4dcb43ba62411f2ba689d494a09456"


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    import ray
    from ray import serve

    from harness.datasets import dataset_file, easy_vqa_records
    from harness.jsonl import read_jsonl, write_jsonl
    from harness.local_server import config_args, deploy
    from harness.paths import ROOT

    from ..batch_arms import ray_env
    from ..schedule import rotated

    total = parameters.rows + WARM_UP
    records = read_jsonl(
        dataset_file(f"easy-vqa-test-{total}.jsonl", lambda: easy_vqa_records("test", total))
    )
    env = ray_job_env(ray_env(ray.get_runtime_context().gcs_address))
    jobs = []
    with tempfile.TemporaryDirectory(prefix="mai-bench-start-") as tmp:
        folder = Path(tmp)
        codes = [Code("before", code_at(parameters.before_commit, folder)), Code("after", ROOT)]
        write_jsonl(records[: parameters.rows], folder / "rows.jsonl")
        write_jsonl(records[-WARM_UP:], folder / "warm-up.jsonl")
        deploy(config_args(CONFIG), name=APP)
        for code in codes:  # each code's worker pool started and every path compiled before timing
            _job(code, folder, "warm-up.jsonl", "warm-up", env)
        for repeat in range(parameters.repeats):
            for code in rotated(codes, repeat):
                summary = _job(code, folder, "rows.jsonl", f"run-{repeat}", env)
                jobs.append({"code": code.name, "repeat": repeat, **summary})
                starts = summary.get("summary_actor_starts") or []
                _say(
                    f"{code.name} #{repeat}: actors' total "
                    + ", ".join(f"{s['total_s']:.2f}" for s in starts)
                )
        serve.delete(APP)
    return {
        "config": f"configs/{CONFIG}",
        "before_commit": parameters.before_commit,
        "rows": parameters.rows,
        "jobs": jobs,
        "phases": {code: phase_figures(jobs, code) for code in ("before", "after")},
    }


def _job(code: Code, folder: Path, data: str, name: str, env: Mapping[str, str]) -> dict[str, Any]:
    out = folder / f"out-{code.name}-{name}"
    followed = follow(
        code.command(folder / data, out, APP),
        cwd=code.folder,
        env=env,
        output=out / "predictions" / "mai.jsonl",
    )
    if followed.returncode != 0:
        raise RuntimeError(f"{code.name} mai-batch exited {followed.returncode}:\n{followed.stderr_tail}")
    first = followed.line_times_s[0] if followed.line_times_s else None
    keys = ("wall_s", "rows_per_s", "errors", "actor_starts")
    return {
        "first_line_s": first,
        "command_s": followed.command_s,
        **summary_figures(out / "summary.json", keys),
    }


def phase_figures(jobs: Sequence[Mapping[str, Any]], code: str) -> dict[str, Any]:
    """Each phase of ``code``'s actors' starts over every job, and the jobs' first line: median, min,
    max and how many (``summary.spread``). Pure."""
    starts = [start for job in jobs if job["code"] == code for start in job.get("summary_actor_starts") or []]
    figures: dict[str, Any] = {"actors": len(starts)}
    for phase in PHASES:
        figures[phase] = spread([start.get(phase) for start in starts], digits=3)
    figures["first_line_s"] = spread([job["first_line_s"] for job in jobs if job["code"] == code], digits=3)
    return figures


def _say(text: str) -> None:
    print(f"batch_start: {text}", file=sys.stderr, flush=True)


def _cell(figures: Mapping[str, float] | None) -> str:
    return "–" if figures is None else cell(dict(figures), 2)


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"`{result['config']}` in process, `mai-batch --attach mai` as a subprocess over "
        f"{result['rows']} rows; *before*: commit {result['before_commit'][:10]} (the model clients "
        "build and read vLLM's request types), *after*: the cascade's calls in plain values. Each actor's "
        "start (batch/actor_start.py), in seconds: median [min–max] over every actor of every job.",
        "",
        "| code | actors | process | init | to first batch | replica | first row | total "
        "| job's first line |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for code, figures in result["phases"].items():
        cells = " | ".join(_cell(figures[phase]) for phase in PHASES)
        lines.append(f"| {code} | {figures['actors']} | {cells} | {_cell(figures['first_line_s'])} |")
    return lines


SCENARIO = Scenario(
    name="batch_start",
    title="mai-batch's actor start: before and after the cascade's calls became plain values",
    result="batch-start.json",
    config=CONFIG,
    run=run,
    table=table,
    parameters=Parameters(),
)
