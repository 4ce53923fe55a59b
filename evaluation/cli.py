"""mai-eval: accuracy, routes, tokens and speed per policy of a running MAI server, on a VQA set.

    mai-eval run DATA.jsonl --url http://127.0.0.1:8000 --policies mai,mai-transfer \
        --baseline mai-transfer --out eval/run1
    mai-eval report eval/run1                       # rebuild the tables from the saved predictions
    mai-eval convert easy-vqa --out data/easy-vqa.jsonl --limit 500
    mai-eval convert easy-vqa-balanced --out data/easy-vqa-balanced.jsonl
    mai-eval calibrate data/easy-vqa-validation.jsonl --url http://127.0.0.1:8000 --out eval/calibration
    mai-eval convert charts --out data/charts.jsonl --limit 300
    mai-eval convert lmms-eval chartqa test-*.parquet --out data/chartqa.jsonl

``run`` asks every record under each policy in turn (bounded concurrency, a progress bar), saves each
prediction as it arrives and resumes from them when run again with the same --out, then writes
results.md, results.csv, results.json and accuracy_latency.png there.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.provenance import git_commit

from .records import DatasetError, load_records
from .report import add_speedups, summarize_policy, write_report
from .run import (
    POLICIES,
    DriveSettings,
    OutputMismatchError,
    PredictionStore,
    RunSpec,
    check_server,
    run_policy,
)


def _policies(text: str) -> list[RunSpec]:
    """Comma-separated policies, each a served policy or NAME=POLICY:option=value:... (RunSpec)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"no policy in {text!r}; choose from {', '.join(POLICIES)}")
    try:
        runs = [RunSpec.parse(item) for item in items]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if len({run.name for run in runs}) != len(runs):
        raise argparse.ArgumentTypeError("a policy is listed twice")
    return runs


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mai-eval", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="evaluate policies of a running server on a dataset")
    run.add_argument("data", type=Path, help="JSONL dataset (see evaluation/records.py for the format)")
    run.add_argument(
        "--url",
        default=os.environ.get("MAI_URL", "http://127.0.0.1:8000"),
        help="the server's base URL (default $MAI_URL or http://127.0.0.1:8000)",
    )
    run.add_argument(
        "--policies",
        type=_policies,
        default="mai,mai-transfer",
        help=f"comma-separated, run in this order (default mai,mai-transfer; known: {','.join(POLICIES)}); "
        "NAME=POLICY:key=value:... runs POLICY with those cascade options under NAME, e.g. "
        "mai-paper=mai:min_confidence=0",
    )
    run.add_argument(
        "--baseline", default=None, help="policy the speedups are measured against (default: the last one)"
    )
    run.add_argument("--out", type=Path, required=True, help="output folder; predictions there are resumed")
    run.add_argument("--concurrency", type=_positive_int, default=8, help="requests in flight (default 8)")
    run.add_argument("--limit", type=_positive_int, default=None, help="only the first N records")
    run.add_argument("--timeout", type=float, default=600.0, help="seconds per request (default 600)")
    run.add_argument(
        "--retries", type=int, default=3, help="retries on 503 and dropped connections (default 3)"
    )
    run.add_argument(
        "--max-tokens",
        type=_positive_int,
        default=None,
        help="the requests' max_tokens (default: the server's)",
    )
    run.add_argument(
        "--transfer-selector",
        default=None,
        help="the requests' transfer selector (full, budget, attention; default: the server's)",
    )
    run.add_argument(
        "--api-key", default=os.environ.get("MAI_API_KEY"), help="bearer token (default $MAI_API_KEY)"
    )
    run.add_argument("--fresh", action="store_true", help="discard the predictions already in --out")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    calibrate = commands.add_parser(
        "calibrate",
        help="fit the verification's confidence thresholds on a labelled set (never a test split)",
    )
    calibrate.add_argument("data", type=Path, help="JSONL dataset, labelled (a validation split)")
    calibrate.add_argument("--url", default=os.environ.get("MAI_URL", "http://127.0.0.1:8000"))
    calibrate.add_argument(
        "--out", type=Path, required=True, help="output folder; predictions there are resumed"
    )
    goal = calibrate.add_mutually_exclusive_group()
    goal.add_argument(
        "--max-accuracy-loss",
        type=float,
        default=None,
        help="points of accuracy the rule may lose against Full RT; the fastest such rule wins (default 1)",
    )
    goal.add_argument(
        "--max-escalation", type=float, default=None, help="share of questions the rule may escalate (0-1)"
    )
    calibrate.add_argument("--concurrency", type=_positive_int, default=8)
    calibrate.add_argument("--limit", type=_positive_int, default=None, help="only the first N records")
    calibrate.add_argument("--timeout", type=float, default=600.0)
    calibrate.add_argument("--api-key", default=os.environ.get("MAI_API_KEY"))
    calibrate.add_argument("--fresh", action="store_true", help="discard the predictions already in --out")
    calibrate.add_argument("--no-progress", action="store_true")
    calibrate.add_argument(
        "--objective",
        choices=("latency", "engine_time", "large_tokens"),
        default="latency",
        help="what the chosen rule and each kind's plan minimise (the config's cascade.adaptive.objective)",
    )
    calibrate.add_argument(
        "--replay-only",
        action="store_true",
        help="no server: replay the predictions already in --out (a pass recorded earlier)",
    )

    report = commands.add_parser("report", help="rebuild the tables of an output folder from its predictions")
    report.add_argument("out", type=Path)
    report.add_argument("--baseline", default=None)

    stats = commands.add_parser("stats", help="a running server's audit statistics (GET /v1/mai/stats)")
    stats.add_argument("--url", default="http://127.0.0.1:8000")
    stats.add_argument(
        "--api-key",
        default=os.environ.get("MAI_API_KEY"),
        help="when the server requires one (env MAI_API_KEY)",
    )
    stats.add_argument("--json", action="store_true", help="the body as the server sent it")

    convert = commands.add_parser("convert", help="write a dataset in mai-eval's JSONL format")
    convert.add_argument("source", choices=["easy-vqa", "easy-vqa-balanced", "charts", "lmms-eval"])
    convert.add_argument(
        "task", nargs="?", help="for lmms-eval: pope, mmbench, mmmu, chartqa, infovqa, realworldqa"
    )
    convert.add_argument("files", nargs="*", type=Path, help="for lmms-eval: the task's parquet files")
    convert.add_argument("--out", type=Path, required=True)
    convert.add_argument("--limit", type=_positive_int, default=None)
    convert.add_argument(
        "--split",
        choices=["test", "train", "validation"],
        default="test",
        help="easy-vqa: test (default), train, or validation (train images the demo models never saw); "
        "easy-vqa-balanced (yes/no questions balanced per question text, 500 unless --limit): test or "
        "validation",
    )
    return parser


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


def command_run(args: argparse.Namespace) -> int:
    records = load_records(args.data)[: args.limit]
    runs: list[RunSpec] = args.policies
    names = [run.name for run in runs]
    baseline = args.baseline or names[-1]
    if baseline not in names:
        raise SystemExit(f"mai-eval: --baseline {baseline} is not among --policies {','.join(names)}")
    store = PredictionStore(args.out, args.data, records)
    store.open(fresh=args.fresh)
    asyncio.run(check_server(args.url, sorted({run.policy for run in runs}), args.api_key))
    settings = DriveSettings(
        concurrency=args.concurrency,
        timeout_s=args.timeout,
        retries=args.retries,
        max_tokens=args.max_tokens,
        api_key=args.api_key,
        transfer_selector=args.transfer_selector,
    )
    meta = git_commit() | {  # the checkout that asked and scored; the server's own is its business
        "dataset": str(args.data),
        "url": args.url,
        "concurrency": args.concurrency,
        "baseline": baseline,
        "transfer_selector": args.transfer_selector,
        "limit": args.limit,
        "policies": names,
        "runs": {run.name: {"policy": run.policy, "options": dict(run.options)} for run in runs},
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    (args.out / "run.json").write_text(json.dumps(meta, indent=2) + "\n")
    for run in runs:
        remaining = len(records) - len(store.done(run.name) & {record.id for record in records})
        with _progress(remaining, run.name, args.no_progress) as bar:
            asyncio.run(
                run_policy(args.url, records, args.data.parent, run, store, settings, on_row=_tally(bar))
            )
    return _report(args.out, records, names, baseline, meta)


def _report(out: Path, records, policies: list[str], baseline: str, meta: dict[str, Any]) -> int:
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


def command_calibrate(args: argparse.Namespace) -> int:
    from . import calibrate, calibration_report

    if args.max_escalation is not None and not 0 <= args.max_escalation <= 1:
        raise SystemExit("mai-eval: --max-escalation is a share between 0 and 1")
    if args.max_accuracy_loss is not None and args.max_accuracy_loss < 0:
        raise SystemExit("mai-eval: --max-accuracy-loss is a number of points, at least 0")
    records = load_records(args.data)[: args.limit]
    store = PredictionStore(args.out, args.data, records)
    store.open(fresh=args.fresh and not args.replay_only)
    if not args.replay_only:
        asyncio.run(check_server(args.url, calibrate.CALIBRATION_RUNS, args.api_key))
        settings = DriveSettings(concurrency=args.concurrency, timeout_s=args.timeout, api_key=args.api_key)
        for name in calibrate.CALIBRATION_RUNS:
            remaining = len(records) - len(store.done(name) & {record.id for record in records})
            with _progress(remaining, name, args.no_progress) as bar:
                asyncio.run(
                    run_policy(
                        args.url,
                        records,
                        args.data.parent,
                        RunSpec(name, name),
                        store,
                        settings,
                        on_row=_tally(bar),
                    )
                )
    questions, missing = calibrate.recorded_questions(
        records, {name: store.load(name) for name in calibrate.CALIBRATION_RUNS}
    )
    if not questions:
        raise SystemExit(
            f"mai-eval: no question was answered under all of {', '.join(calibrate.CALIBRATION_RUNS)}"
            + (" (--replay-only replays the predictions already in --out)" if args.replay_only else "")
        )
    if not any(q.stages["short_large"].confidence is not None for q in questions):
        print(
            "mai-eval: the server returned no answer confidences (answer_logprobs off?): only the paper's "
            "rule can be evaluated",
            file=sys.stderr,
        )
    with _progress(len(calibrate.threshold_grid(questions)), "replaying rules", args.no_progress) as bar:
        summary, rules, yaml_text = calibrate.calibration_summary(
            str(args.data),
            questions,
            missing,
            max_accuracy_loss=args.max_accuracy_loss,
            max_escalation=args.max_escalation,
            objective=args.objective,
            progress=bar.update,
        )
    chosen = summary["chosen"]
    written = calibration_report.write(args.out, summary, rules, yaml_text)
    print((args.out / "calibration.md").read_text())
    if summary["precision_note"]:
        print(f"mai-eval: {summary['precision_note']}", file=sys.stderr)
    if missing:
        print(
            f"mai-eval: {len(missing)} questions left out (a run failed); run again to retry them",
            file=sys.stderr,
        )
    print("written: " + ", ".join(str(path) for path in written), file=sys.stderr)
    return 0 if chosen is not None else 1


def command_report(args: argparse.Namespace) -> int:
    meta_path = args.out / "run.json"
    if not meta_path.exists():
        raise SystemExit(f"mai-eval: {args.out} has no run.json; is it an output folder of `mai-eval run`?")
    meta = json.loads(meta_path.read_text())
    records = load_records(Path(meta["dataset"]))[: meta.get("limit")]
    baseline = args.baseline or meta["baseline"]
    if baseline not in meta["policies"]:
        raise SystemExit(f"mai-eval: --baseline {baseline} was not run (ran {','.join(meta['policies'])})")
    return _report(args.out, records, meta["policies"], baseline, meta | {"baseline": baseline})


def command_convert(args: argparse.Namespace) -> int:
    from . import converters

    if args.source == "lmms-eval":
        if not args.task or not args.files:
            raise SystemExit(
                "mai-eval convert lmms-eval needs a task and its parquet files, e.g. "
                "`mai-eval convert lmms-eval chartqa test-00000-of-00001.parquet --out chartqa.jsonl`"
            )
        count, skipped = converters.convert_lmms_eval(args.task, args.files, args.out, limit=args.limit)
    elif args.source == "easy-vqa":
        count, skipped = converters.convert_easy_vqa(args.out, limit=args.limit, split=args.split), 0
    elif args.source == "easy-vqa-balanced":
        if args.split == "train":
            raise SystemExit("easy-vqa-balanced has a test and a validation split, not train")
        count = converters.convert_easy_vqa_balanced(args.out, limit=args.limit, split=args.split)
        skipped = 0
    else:
        count, skipped = converters.convert_charts(args.out, limit=args.limit), 0
    print(
        f"{args.out}: {count} records" + (f" ({skipped} skipped: more than one image)" if skipped else ""),
        file=sys.stderr,
    )
    return 0


def command_stats(args: argparse.Namespace) -> int:
    import httpx

    from evaluation.live_stats import stats_table

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        reply = httpx.get(f"{args.url.rstrip('/')}/v1/mai/stats", headers=headers, timeout=30)
    except httpx.HTTPError as exc:
        raise ConnectionError(f"cannot reach {args.url}: {exc}") from None
    if reply.status_code != 200:
        print(f"mai-eval: {args.url} answered {reply.status_code}: {reply.text}", file=sys.stderr)
        return 2
    print(json.dumps(reply.json(), indent=2) if args.json else stats_table(reply.json()))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return command_run(args)
        if args.command == "report":
            return command_report(args)
        if args.command == "calibrate":
            return command_calibrate(args)
        if args.command == "stats":
            return command_stats(args)
        return command_convert(args)
    except (DatasetError, OutputMismatchError, ConnectionError) as exc:
        print(f"mai-eval: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "mai-eval: interrupted; the predictions so far are saved, run the same command to resume",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
