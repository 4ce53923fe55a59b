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
import json
import os
import sys
from pathlib import Path

from .passes import calibrate_pass, command_line, guarded, report_folder, run_eval
from .run import POLICIES, DriveSettings, RunSpec


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


def command_run(args: argparse.Namespace, command: str) -> int:
    settings = DriveSettings(
        concurrency=args.concurrency,
        timeout_s=args.timeout,
        retries=args.retries,
        max_tokens=args.max_tokens,
        api_key=args.api_key,
        transfer_selector=args.transfer_selector,
    )
    return run_eval(
        args.data,
        args.out,
        args.policies,
        url=args.url,
        command=command,
        settings=settings,
        baseline=args.baseline,
        limit=args.limit,
        fresh=args.fresh,
        progress=not args.no_progress,
    )


def command_calibrate(args: argparse.Namespace, command: str) -> int:
    if args.max_escalation is not None and not 0 <= args.max_escalation <= 1:
        raise SystemExit("mai-eval: --max-escalation is a share between 0 and 1")
    if args.max_accuracy_loss is not None and args.max_accuracy_loss < 0:
        raise SystemExit("mai-eval: --max-accuracy-loss is a number of points, at least 0")
    return calibrate_pass(
        args.data,
        args.out,
        command=command,
        settings=DriveSettings(concurrency=args.concurrency, timeout_s=args.timeout, api_key=args.api_key),
        url=args.url,
        limit=args.limit,
        fresh=args.fresh,
        replay_only=args.replay_only,
        max_accuracy_loss=args.max_accuracy_loss,
        max_escalation=args.max_escalation,
        objective=args.objective,
        progress=not args.no_progress,
    )


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
    command = command_line("mai-eval", sys.argv[1:] if argv is None else argv)

    def dispatch() -> int:
        if args.command == "run":
            return command_run(args, command)
        if args.command == "report":
            return report_folder(args.out, command=command, baseline=args.baseline)
        if args.command == "calibrate":
            return command_calibrate(args, command)
        if args.command == "stats":
            return command_stats(args)
        return command_convert(args)

    return guarded(dispatch)


if __name__ == "__main__":
    raise SystemExit(main())
