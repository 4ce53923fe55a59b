"""``mai-batch``: a dataset through the cascade on Ray Data (docs/batch.md).

    mai-batch INPUT --output OUT [--config configs/mai-cpu.yaml] [--policy mai] [--attach APP] ...

INPUT is an OpenAI Batch API request file (OUT: its output file) or mai-eval dataset records (OUT: a
folder ``mai-eval report OUT`` scores), from a local path or any filesystem Ray Data reads. With
``RAY_ADDRESS`` set it runs on that cluster. Everything the job needs is checked before an engine
starts: a bad config, an unreadable input or output is one line on stderr and exit code 2. The same
command after a crash or Ctrl-C resumes where the output stops.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from evaluation.predictions import DatasetMismatchError
from serve_app.config import AppConfig, check_application

from .inputs import InputFormat, InputFormatError, OutputMismatchError, RecordSettings
from .interrupts import graceful_interrupt
from .model_tier import AttachError
from .output_store import fetch, is_uri, staged, upload
from .runner import BatchJob, Prepared, prepare, run
from .settings import MAX_LINE_BYTES, BatchSettings
from .tally import Tally, summary_text

BUILD_APP = "serve_app.app:build_app"
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(ValueError):
    """What the job cannot start with: said in one line, exit code 2."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mai-batch", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "input",
        help="OpenAI batch requests or mai-eval records (JSONL): a file, a folder of .jsonl shards or a "
        "glob of them, a path or a filesystem URI (s3://, gs://, file://)",
    )
    p.add_argument(
        "--output",
        "-o",
        required=True,
        help="output file (OpenAI) or folder (records); a URI (s3://, gs://, file://) is written locally "
        "and uploaded when the job ends",
    )
    p.add_argument("--config", default="configs/mai-cpu.yaml", help="the Serve config whose models answer")
    p.add_argument("--app-name", help="the config's application (default: the one of serve_app.app)")
    p.add_argument("--format", choices=[f.value for f in InputFormat], help="default: read from line 1")
    p.add_argument("--policy", help="records only: the policy each record is asked under (default mai)")
    p.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="records only: a mai option"
    )
    p.add_argument("--max-tokens", type=int, help="records only: the requests' max_tokens")
    p.add_argument(
        "--image-root",
        type=Path,
        help="records only: the folder image paths must resolve under (default: the input's folder)",
    )
    p.add_argument("--attach", metavar="APP", help="use the model deployments of this running Serve app")
    p.add_argument("--actors", type=int, default=1, help="Ray Data actors answering rows (default 1)")
    p.add_argument("--rows-in-flight", type=int, help="rows answered at once (default: the models' capacity)")
    p.add_argument("--row-timeout", type=float, default=900.0, help="seconds per attempt at a row")
    p.add_argument("--attempts", type=int, default=6, help="tries of a row whose model failed")
    p.add_argument(
        "--key-name",
        help="the configured API key (security.keys_file) the rows count against: its models, quotas and "
        "usage (default: mai-batch, unlimited)",
    )
    p.add_argument(
        "--max-line-bytes",
        type=int,
        default=MAX_LINE_BYTES,
        help=f"longest input line; a longer one is an error line (default {MAX_LINE_BYTES})",
    )
    p.add_argument(
        "--retry-errors",
        action="store_true",
        help="answer again the rows whose output line is a server-side failure (5xx, 408, 429), "
        "replacing their lines",
    )
    p.add_argument(
        "--retry-client-errors",
        action="store_true",
        help="with --retry-errors: the rows the server refused (4xx) too",
    )
    p.add_argument(
        "--cache",
        metavar="URL",
        help="the answer cache rows read and fill: a Redis URL (redis://host:6379/0, the one the servers "
        "share, so that a re-run costs only its misses), or off (default: the config's cache section)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def with_cache(config: AppConfig, cache: str | None) -> AppConfig:
    """The config with the answer cache ``--cache`` names: off, or a Redis (checked once now: one that
    does not answer is said, and the rows run without it until it does)."""
    from serve_app.cache.settings import CacheSettings
    from serve_app.cache.stores import RedisStore

    if cache is None:
        return config
    if cache == "off":
        settings = config.cache.model_copy(update={"enabled": False})
    else:
        try:
            settings = CacheSettings(**(config.cache.model_dump() | {"url": cache, "enabled": True}))
        except ValidationError as exc:
            raise UsageError(f"--cache: {exc.errors()[0]['msg'].removeprefix('Value error, ')}") from None
        store = RedisStore(settings)
        if not store.check_at_start():
            print(
                f"mai-batch: --cache {store.where} does not answer ({store.last_error}); the rows run "
                "without it until it does",
                file=sys.stderr,
            )
    return config.model_copy(update={"cache": settings})


def read_config(path: str, app_name: str | None) -> AppConfig:
    """The application of a Serve config file, validated as ``serve run`` validates it, its limits
    completed from its models (``with_model_limits``)."""
    from serve_app.engine_config.model_limits import with_model_limits

    try:
        document = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"config {path} is not YAML: {' '.join(str(exc).split())}") from None
    applications = (document or {}).get("applications") if isinstance(document, dict) else None
    if not isinstance(applications, list):
        raise UsageError(f"config {path} has no applications list (a Serve config file is expected)")
    ours = [a for a in applications if isinstance(a, dict) and a.get("import_path") == BUILD_APP]
    if app_name is not None:
        ours = [a for a in ours if a.get("name") == app_name]
    if len(ours) != 1:
        names = [a.get("name") for a in applications if isinstance(a, dict)]
        raise UsageError(
            f"config {path}: {len(ours)} applications of {BUILD_APP}"
            + (f" named {app_name!r}" if app_name else "")
            + f" (it has {names}); name one with --app-name"
        )
    try:
        return with_model_limits(check_application(ours[0]))
    except (ValidationError, ValueError, OSError) as exc:
        raise UsageError(f"config {path}: {' '.join(str(exc).split())}") from None


def job_of(args: argparse.Namespace) -> BatchJob:
    try:
        settings = BatchSettings(
            actors=args.actors,
            rows_in_flight=args.rows_in_flight,
            row_timeout_s=args.row_timeout,
            attempts=args.attempts,
            max_line_bytes=args.max_line_bytes,
            key_name=args.key_name,
        )
    except ValidationError as exc:
        raise UsageError(" ".join(str(exc).split())) from None
    config = with_cache(read_config(args.config, args.app_name), args.cache)
    if args.key_name is not None:
        from serve_app.edge.keys import KeyRing

        try:
            KeyRing(config.security).caller_named(args.key_name)
        except ValueError as exc:
            raise UsageError(f"--key-name: {exc}") from None
    if args.retry_client_errors and not args.retry_errors:
        raise UsageError("--retry-client-errors goes with --retry-errors")
    options = []
    for pair in args.option:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise UsageError(f"--option {pair!r} is not KEY=VALUE")
        options.append((key, _value(value)))
    image_root = None
    if args.image_root is not None:
        if not args.image_root.is_dir():
            raise UsageError(f"--image-root {args.image_root} is not a folder")
        image_root = str(args.image_root.resolve())  # the actors' working folder may differ
    records = RecordSettings(
        policy=args.policy or "mai",
        options=tuple(options),
        max_tokens=args.max_tokens,
        image_root=image_root,
    )
    output_uri = args.output if is_uri(args.output) else None
    output = Path(args.output)
    if output_uri is not None:
        place = staged(output_uri)
        try:
            fetch(place)  # a job that resumes where no staging copy is starts from the URI's
        except OSError as exc:
            raise UsageError(f"--output {exc}") from None
        output = place.local
    return BatchJob(
        input=args.input,
        output=output,
        output_uri=output_uri,
        config=config,
        settings=settings,
        records=records,
        fmt=InputFormat(args.format) if args.format else None,
        attach=args.attach,
        retry_errors=("all" if args.retry_client_errors else "server") if args.retry_errors else None,
    )


def checked(job: BatchJob, args: argparse.Namespace) -> Prepared:
    """The input and output, read before any engine starts."""
    try:
        prepared = prepare(job)
    except OutputMismatchError as exc:
        raise UsageError(f"--output {job.output} {exc}") from None
    except DatasetMismatchError as exc:
        raise UsageError(f"--output: {exc}") from None
    except OSError as exc:
        raise UsageError(f"input {job.input}: {exc.strerror or exc}") from None
    except (InputFormatError, ValueError) as exc:
        raise UsageError(f"input {job.input}: {exc}") from None
    if prepared.scan.fmt is InputFormat.OPENAI and (
        args.policy or args.option or args.max_tokens or args.image_root
    ):
        raise UsageError(
            "--policy, --option, --max-tokens and --image-root apply to mai-eval records; an OpenAI batch "
            "line names its model and parameters in its body, and carries its images"
        )
    return prepared


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        job = job_of(args)
        prepared = checked(job, args)
    except UsageError as exc:
        print(f"mai-batch: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if prepared.todo == 0:
        where = job.output_uri or prepared.path
        print(f"mai-batch: every one of the {prepared.scan.rows} rows is in {where} already")
        return 0
    print(
        f"mai-batch: job {job.job_id}: {prepared.todo} rows to answer ({prepared.scan.fmt.value}"
        + (f", {len(prepared.done)} done before" if prepared.done else "")
        + (f", {prepared.retried} errors asked again" if prepared.retried else "")
        + f") -> {prepared.path}",
        file=sys.stderr,
    )
    import ray

    ray.init(log_to_driver=False)  # RAY_ADDRESS, when set, names the cluster to join
    bar = _progress_bar(prepared.todo, args.no_progress)
    try:
        with graceful_interrupt():  # a first Ctrl-C lets the rows already answered reach the output
            summary = run(job, prepared, on_progress=bar)
    except KeyboardInterrupt:
        print(
            f"\nmai-batch: interrupted; the rows written are kept in {job.output_uri or prepared.path}: run "
            "the same command to answer the rest",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    except AttachError as exc:  # --attach to an application that is not running (or not MAI's)
        print(f"mai-batch: --attach: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        close = getattr(bar, "close", None)
        if close is not None:
            close()
        if job.output_uri is not None:  # done, interrupted or failed: what was written goes up
            uploaded(job)
    print(summary_text(summary))
    return 0


def uploaded(job: BatchJob) -> None:
    """The staging copy of an output at a URI uploaded (batch/output_store.py); a failure is said, and
    the staging copy named: the next run resumes from it."""
    assert job.output_uri is not None
    place = staged(job.output_uri)
    try:
        upload(place)
        print(f"mai-batch: uploaded to {job.output_uri}", file=sys.stderr)
    except OSError as exc:
        print(
            f"mai-batch: {exc}; the lines are in {place.local}, and the same command resumes from there",
            file=sys.stderr,
        )


def _progress_bar(total: int, off: bool):
    """rows done of total, rows/s and time left (tqdm's), and the route shares so far."""
    if off:
        return None
    from tqdm import tqdm

    bar = tqdm(total=total, unit="row", dynamic_ncols=True, file=sys.stderr)

    def advance(rows: int, tally: Tally) -> None:
        bar.update(rows)
        bar.set_postfix_str(tally.route_shares()[:80], refresh=False)

    advance.close = bar.close  # type: ignore[attr-defined]
    return advance


if __name__ == "__main__":
    sys.exit(main())
