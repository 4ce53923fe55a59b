"""What ``mai-eval run``, ``report`` and ``calibrate`` do, as functions: ``cli.py`` parses the
arguments and calls them, ``demo_eval.py`` calls them with its own datasets. Every result file they
write carries the flat provenance record of ``harness.provenance`` under ``meta``, naming ``command``:
the command line as the user typed it (``command_line``)."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.provenance import git_commit, provenance
from serve_app.core.plans import Objective

from .predictions import DatasetMismatchError, PredictionStore
from .records import DatasetError, EvalRecord, load_records
from .report import add_speedups, summarize_policy, write_report
from .run import DriveSettings, RunSpec, check_server, run_policy


def command_line(program: str, argv: Sequence[str]) -> str:
    """``program`` and its arguments as a user types them (quoted where a shell needs it)."""
    return f"{program} {shlex.join(argv)}" if argv else program


def guarded(work: Callable[[], int]) -> int:
    """``work()``, with the failures a user can act on said in one line (status 2) and an interrupt
    answered with how to resume (status 130)."""
    try:
        return work()
    except (DatasetError, DatasetMismatchError, ConnectionError) as exc:
        print(f"mai-eval: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "mai-eval: interrupted; the predictions so far are saved, run the same command to resume",
            file=sys.stderr,
        )
        return 130


def _progress(total: int, policy: str, disabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=policy, unit="q", disable=disabled, file=sys.stderr, dynamic_ncols=True)


def _tally(bar) -> Callable[[dict[str, Any]], None]:
    """Advance ``bar`` per answered row, showing the running score and the errors so far."""
    scores: list[float] = []
    errors = 0

    def tick(row: dict[str, Any]) -> None:
        nonlocal errors
        if row["status"] == 200:
            scores.append(row["score"])
        else:
            errors += 1
        bar.update(1)
        bar.set_postfix(score=f"{100 * sum(scores) / max(len(scores), 1):.1f}%", errors=errors, refresh=False)

    return tick


def ask_runs(
    url: str,
    data: Path,
    records: Sequence[EvalRecord],
    runs: Sequence[RunSpec],
    store: PredictionStore,
    settings: DriveSettings,
    progress: bool = True,
) -> None:
    """The records not answered yet, under each run in turn, a progress bar each."""
    for run in runs:
        remaining = len(records) - len(store.done(run.name) & {record.id for record in records})
        with _progress(remaining, run.name, not progress) as bar:
            asyncio.run(run_policy(url, records, data.parent, run, store, settings, on_row=_tally(bar)))


def run_eval(
    data: Path,
    out: Path,
    runs: Sequence[RunSpec],
    *,
    url: str,
    command: str,
    settings: DriveSettings,
    baseline: str | None = None,
    limit: int | None = None,
    fresh: bool = False,
    progress: bool = True,
    config: str | None = None,
) -> int:
    """``mai-eval run``: every run in turn on ``data`` (resumed from the predictions in ``out``), then
    the report. ``out/run.json`` is the run record: ``command``'s provenance (``config``: the config
    the server was started with here, when it was) and the settings. 1 when requests failed."""
    records = load_records(data)[:limit]
    names = [run.name for run in runs]
    baseline = baseline or names[-1]
    if baseline not in names:
        raise SystemExit(f"mai-eval: --baseline {baseline} is not among --policies {','.join(names)}")
    store = PredictionStore(out, data, records)
    store.open(fresh=fresh)
    asyncio.run(check_server(url, sorted({run.policy for run in runs}), settings.api_key))
    # The checkout that asked and scored; the server's own is its business.
    meta = provenance(
        command,
        config=config,
        dataset=str(data),
        url=url,
        concurrency=settings.concurrency,
        baseline=baseline,
        transfer_selector=settings.transfer_selector,
        limit=limit,
        policies=names,
        runs={run.name: {"policy": run.policy, "options": dict(run.options)} for run in runs},
    ) | {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    (out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    ask_runs(url, data, records, runs, store, settings, progress)
    return report_run(out, records, names, baseline, meta)


def report_run(
    out: Path, records: Sequence[EvalRecord], policies: Sequence[str], baseline: str, meta: dict[str, Any]
) -> int:
    """results.md, .csv, .json (with ``meta``) and the plot of ``out`` from its predictions; the table
    printed. 1 when requests failed."""
    store = PredictionStore(out, Path(meta["dataset"]), records)
    summaries = {
        policy: summarize_policy(policy, records, store.load(policy), store.segments(policy))
        for policy in policies
    }
    add_speedups(summaries, baseline)
    paths = write_report(out, summaries, meta)
    print((out / "results.md").read_text())
    print("written: " + ", ".join(str(path) for path in paths.values()), file=sys.stderr)
    failed = sum(summary["errors"] for summary in summaries.values())
    if failed:
        print(
            f"mai-eval: {failed} requests failed; run the same command again to retry them", file=sys.stderr
        )
    return 1 if failed else 0


def report_folder(out: Path, *, command: str, baseline: str | None = None) -> int:
    """``mai-eval report``: the tables of a ``mai-eval run`` folder rebuilt from its predictions. Their
    ``meta`` is the run's record (run.json) and ``reported``: the command and commit that rebuilt them;
    a run recorded before runs named their command is named by ``command``."""
    meta_path = out / "run.json"
    if not meta_path.exists():
        raise SystemExit(f"mai-eval: {out} has no run.json; is it an output folder of `mai-eval run`?")
    run = json.loads(meta_path.read_text())
    records = load_records(Path(run["dataset"]))[: run.get("limit")]
    baseline = baseline or run["baseline"]
    if baseline not in run["policies"]:
        raise SystemExit(f"mai-eval: --baseline {baseline} was not run (ran {','.join(run['policies'])})")
    reported = {"command": command, **git_commit()}
    meta = {"command": command} | run | {"baseline": baseline, "reported": reported}
    return report_run(out, records, run["policies"], baseline, meta)


def calibrate_pass(
    data: Path,
    out: Path,
    *,
    command: str,
    settings: DriveSettings,
    url: str | None = None,
    limit: int | None = None,
    fresh: bool = False,
    replay_only: bool = False,
    max_accuracy_loss: float | None = None,
    max_escalation: float | None = None,
    objective: Objective = "latency",
    progress: bool = True,
    config: str | None = None,
) -> int:
    """``mai-eval calibrate``: the three calibration runs on ``data`` into ``out`` (resumed; none with
    ``replay_only``), every rule replayed over them, and calibration.json (``meta``: ``command``'s
    provenance), .md, .png and cascade.yaml written. 1 when no rule meets the goal."""
    from . import calibrate, calibration_report

    started = time.time()
    records = load_records(data)[:limit]
    store = PredictionStore(out, data, records)
    store.open(fresh=fresh and not replay_only)
    if not replay_only:
        if url is None:
            raise ValueError("a calibration pass needs the server's URL (or replay_only)")
        asyncio.run(check_server(url, calibrate.CALIBRATION_RUNS, settings.api_key))
        runs = list(calibrate.CALIBRATION_SPECS)
        ask_runs(url, data, records, runs, store, settings, progress)
    questions, missing = calibrate.recorded_questions(
        records, {name: store.load(name) for name in calibrate.CALIBRATION_RUNS}
    )
    if not questions:
        raise SystemExit(
            f"mai-eval: no question was answered under all of {', '.join(calibrate.CALIBRATION_RUNS)}"
            + (" (--replay-only replays the predictions already in --out)" if replay_only else "")
        )
    if not any(q.stages["short_large"].confidence is not None for q in questions):
        print(
            "mai-eval: the server returned no answer confidences (answer_logprobs off?): only the paper's "
            "rule can be evaluated",
            file=sys.stderr,
        )
    with _progress(len(calibrate.threshold_grid(questions)), "replaying rules", not progress) as bar:
        summary, rules, yaml_text = calibrate.calibration_summary(
            str(data),
            questions,
            missing,
            max_accuracy_loss=max_accuracy_loss,
            max_escalation=max_escalation,
            objective=objective,
            progress=bar.update,
        )
    meta = provenance(command, config=config, started=started)
    written = calibration_report.write(out, summary, rules, yaml_text, meta)
    print((out / "calibration.md").read_text())
    if summary["precision_note"]:
        print(f"mai-eval: {summary['precision_note']}", file=sys.stderr)
    if missing:
        print(
            f"mai-eval: {len(missing)} questions left out (a run failed); run again to retry them",
            file=sys.stderr,
        )
    print("written: " + ", ".join(str(path) for path in written), file=sys.stderr)
    return 0 if summary["chosen"] is not None else 1
