"""tracing: what OpenTelemetry tracing costs a request (loadtest/bench/tracing_cost.py says how).

python -m loadtest.bench --only tracing                     # bench/results/tracing.json
python -m loadtest.bench --only tracing --param stack=false # the in-process part alone
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cells import cell
from ..scenario import Bench, Scenario

LOG = Path(tempfile.gettempdir()) / "mai-bench-tracing.log"


@dataclass(frozen=True)
class Parameters:
    requests: int = 1000  # in process: requests per block
    rounds: int = 6  # in process: blocks per arm, interleaved
    stack: bool = True  # also the real stack's arms
    stack_requests: int = 200  # seeded easy-vqa validation questions per stack run
    concurrency: int = 8
    repetitions: int = 2  # stack runs per arm, interleaved


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    from harness.datasets import easy_vqa_records

    from ..load import bodies
    from ..tracing_cost import in_process, on_stack

    result: dict[str, Any] = {
        "in_process": in_process(parameters.requests, parameters.rounds, warm_up=200, log_dir=LOG.parent)
    }
    if parameters.stack:
        records = list(easy_vqa_records("validation", parameters.stack_requests))
        # Each asked afresh (the warm-up asks the first of them, every run all of them): no answer reused.
        payloads = bodies(records, parameters.stack_requests, cache="off")
        result["stack"] = on_stack(payloads, parameters.concurrency, parameters.repetitions, 16, LOG)
    return result


def _spread(value: dict[str, Any] | None) -> str:
    return "–" if value is None else cell(value)


def table(result: dict[str, Any]) -> list[str]:
    part = result["in_process"]
    lines = [
        f"In process: the request_path scenario's `mai` request (three stage calls, scripted models "
        f"answering at once) through one ingress, {part['requests_per_block']} requests a block, "
        f"{part['rounds']} blocks per arm, the arms' order rotated each round; tracing on is the package's "
        "OTLP exporter to a receiver on loopback behind a parent-based ratio sampler, as a Serve replica "
        "has it. Per-request median and p90 in µs: the median [min–max] over blocks.",
        "",
        "| tracing | median µs | p90 µs | median / off | p90 / off | spans per request |",
        "|---|---|---|---|---|---|",
    ]
    for arm, label in (("off", "off"), ("0.01", "on, ratio 0.01"), ("1.0", "on, ratio 1.0")):
        row = part[arm]
        over = row.get("over_off", {"median_us": 1.0, "p90_us": 1.0})
        lines.append(
            f"| {label} | {_spread(row['median_us'])} | {_spread(row['p90_us'])} | "
            f"{over['median_us']}× | {over['p90_us']}× | {row['spans_per_request']} |"
        )
    lines += [
        "",
        f"The SDK's floor: a sampled span's start and end alone (no attribute, the same exporter) takes "
        f"{part['bare_span_us']} µs on this machine, so a request's {part['1.0']['spans_per_request']} "
        f"spans cost at least {part['bare_spans_over_off']:.1%} of the path's median with tracing off "
        "before any attribute is set or span exported.",
    ]
    made = round(part["1.0"]["spans_per_request"] * part["requests_per_block"] * part["rounds"])
    rate = round(part["1.0"]["spans_per_request"] / (part["1.0"]["median_us"]["median"] / 1e6), -2)
    if "spans_dropped" in part:
        lines += [
            "",
            f"At ratio 1.0 this path makes about {rate:,.0f} spans a second, more than one exporter thread "
            f"sends on this machine: of the {made} made, {part['spans_dropped']} found the queue "
            "full and were dropped (counted, as a collector that cannot keep up would have them), so "
            "the 1.0 row holds only part of the export's cost. A served request, whose engines take "
            "milliseconds to seconds, makes a few dozen spans a second per replica.",
        ]
    stack = result.get("stack")
    if stack:
        lines += [
            "",
            f"On the real stack (`configs/mai-cpu.yaml` served by `serve run` afresh per run): "
            f"{stack['requests_per_run']} seeded easy-vqa validation questions (`/v1/mai/answer`, `mai`) "
            f"at concurrency {stack['concurrency']} per run, after a warm-up; tracing off, on at ratio 1.0 "
            "into a receiver on loopback, and on at 1.0 with the collector unreachable (nothing listens "
            "on its port); the arms' order rotated per repetition. Median [min–max] over runs.",
            "",
            "| tracing | runs | requests/s | p50 s | p99 s | requests/s / off | errors |",
            "|---|---|---|---|---|---|---|",
        ]
        labels = {"off": "off", "on": "on, ratio 1.0", "unreachable": "on, collector unreachable"}
        for arm, label in labels.items():
            row = stack[arm]
            runs = row["requests_per_s"]["n"] if row["requests_per_s"] else 0
            lines.append(
                f"| {label} | {runs} | {_spread(row['requests_per_s'])} | {_spread(row['p50_s'])} | "
                f"{_spread(row['p99_s'])} | {row.get('throughput_over_off', 1.0)}× | {row['errors']} |"
            )
        on_runs = [run for run in stack["runs"] if run["arm"] == "on"]
        if on_runs:
            per_request = [run["spans_received_per_request"] for run in on_runs]
            lines += ["", f"Spans the receiver got per request at ratio 1.0 (each run): {per_request}."]
    return lines


SCENARIO = Scenario(
    name="tracing",
    title="What tracing costs",
    result="tracing.json",
    config="mai-cpu.yaml",  # what its stack part serves, with `serve run` of its own
    run=run,
    table=table,
    parameters=Parameters(),
    needs_ray=False,  # its own `serve run` per stack run; the in-process part shares no Ray
)
