"""What audits cost served traffic, and how they give way under load.

- ``cost`` (the real CPU stack, configs/mai-cpu.yaml): ``mai`` at concurrency 8 with audits off
  (rate 0) and at rate 0.1, interleaved and repeated, each run on a fresh deployment and ended once its
  audits have: p50, p99 and throughput per run, with the audits run and not run.
- ``shed`` (the emulated tier, configs/mai-emulated.yaml, one replica per model): concurrency far past
  the large model's capacity, audits off and at rate 0.5, interleaved: served errors and latency, and
  the audits started, shed and cancelled.

Writes ``bench/results/audit/audit-cost.json`` and ``audit-shed.json``.

    python -m loadtest.audit_bench [--only cost,shed] [--repetitions 3]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import httpx

from harness.datasets import easy_vqa_records
from harness.local_server import config_args, deploy, local_ray
from harness.paths import RESULTS
from loadtest.bench import bodies, emulated_args, run_load, summarize
from loadtest.provenance import provenance

OUT = RESULTS / "audit"


def _stats(url: str) -> dict[str, Any]:
    return httpx.get(f"{url}/v1/mai/stats", timeout=60).json()


def _audit_counts(stats: dict[str, Any]) -> dict[str, int]:
    counts = {"audited": sum(entry["audit"]["audited"] for entry in stats["classes"].values())}
    return counts | {f"not_run_{reason}": count for reason, count in stats["audit"]["not_run"].items()}


def _settled(url: str, timeout_s: float = 120.0) -> dict[str, int]:
    """The audit counts once they stop changing (the run's audits finished and were reported)."""
    previous, deadline = None, time.monotonic() + timeout_s
    while True:
        counts = _audit_counts(_stats(url))
        if counts == previous or time.monotonic() > deadline:
            return counts
        previous = counts
        time.sleep(3)


def _counts_text(result: dict[str, Any]) -> str:
    return ", ".join(
        f"{key} {value}" for key, value in result.items() if key.startswith(("audited", "not_run"))
    )


def _run(url: str, args: dict[str, Any], payloads: list[dict], concurrency: int, ids: str) -> dict[str, Any]:
    """One run on a fresh deployment: the audits it started counted as the change in the statistics
    (a replaced replica may still report its last counts to the new holder), and none still running
    when it ends."""
    deploy(args)  # every deployment is replaced, the engines too
    before = _settled(url)
    outcomes, wall_s = run_load(url, "/v1/mai/answer", payloads, concurrency, request_ids=ids)
    after = _settled(url)
    counts = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    return summarize(outcomes, wall_s) | counts


def _interleaved(
    url: str,
    rates: tuple[str, str],
    args_of: Callable[[float], dict[str, Any]],
    payloads: list[dict],
    concurrency: int,
    repetitions: int,
    name: str,
) -> dict[str, Any]:
    """Audits off and on (``rates``), alternating, ``repetitions`` runs each; ``args_of(rate)`` is the
    application's arguments at a rate."""
    runs: dict[str, list[dict[str, Any]]] = {rate: [] for rate in rates}
    for repetition in range(repetitions):
        for rate in rates:
            result = _run(url, args_of(float(rate)), payloads, concurrency, f"{name}{repetition}-{rate}-")
            runs[rate].append(result)
            print(
                f"  rate {rate}, repetition {repetition}: errors {result['errors']}, "
                f"p50 {result['p50_s']} s, p99 {result['p99_s']} s, audits {_counts_text(result)}",
                file=sys.stderr,
            )
    return {
        "concurrency": concurrency,
        "requests_per_run": len(payloads),
        "runs": runs,
        "summary": _compare(runs, *rates),
    }


def bench_cost(url: str, repetitions: int, requests: int) -> dict[str, Any]:
    payloads = bodies(list(easy_vqa_records("test", requests)), requests)

    def args_of(rate: float) -> dict[str, Any]:
        return config_args("mai-cpu.yaml", {"cascade": {"audit": {"rate": rate, "report_interval_s": 1.0}}})

    return _interleaved(url, ("0", "0.1"), args_of, payloads, 8, repetitions, "cost")


def bench_shed(url: str, repetitions: int, requests: int) -> dict[str, Any]:
    from harness.datasets import ensure_datasets
    from harness.jsonl import read_jsonl

    records = [record for path in ensure_datasets().values() for record in read_jsonl(path)]

    def args_of(rate: float) -> dict[str, Any]:
        return emulated_args("chartqa", 1.0, cascade={"audit": {"rate": rate, "report_interval_s": 1.0}})

    return _interleaved(url, ("0", "0.5"), args_of, bodies(records, requests), 256, repetitions, "shed")


def _compare(runs: dict[str, list[dict[str, Any]]], off: str, on: str) -> dict[str, Any]:
    """Medians over the repetitions with their spread (min, max), and on/off ratios of the medians."""
    summary: dict[str, Any] = {}
    for rate, results in runs.items():
        summary[rate] = {
            metric: {
                "median": round(statistics.median(r[metric] for r in results), 4),
                "min": min(r[metric] for r in results),
                "max": max(r[metric] for r in results),
            }
            for metric in ("p50_s", "p99_s", "requests_per_s", "errors")
        }
    summary["ratios"] = {
        metric: round(summary[on][metric]["median"] / summary[off][metric]["median"], 3)
        for metric in ("p50_s", "p99_s", "requests_per_s")
        if summary[off][metric]["median"]
    }
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="cost,shed")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--cost-requests", type=int, default=150)
    parser.add_argument("--shed-requests", type=int, default=1500)
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in args.only.split(","):
        with local_ray(num_cpus=2, metrics_push_interval_s=1.0) as url:
            logging.getLogger("httpx").setLevel(logging.WARNING)
            started = time.time()
            if name == "cost":
                result = bench_cost(url, args.repetitions, args.cost_requests)
                config = "mai-cpu.yaml"
            else:
                result = bench_shed(url, args.repetitions, args.shed_requests)
                config = "mai-emulated.yaml"
            result["meta"] = provenance(config) | {
                "command": f"python -m loadtest.audit_bench --only {name}",
                "duration_s": round(time.time() - started, 1),
            }
        path = OUT / f"audit-{name}.json"
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
