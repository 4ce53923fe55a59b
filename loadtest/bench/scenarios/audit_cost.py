"""audit_cost: what audits cost served traffic on the real CPU stack (configs/mai-cpu.yaml): ``mai`` at
concurrency 8 with audits off (rate 0) and at rate 0.1, interleaved and repeated, each run on a fresh
deployment and ended once its audits have: p50, p99 and throughput per run, the audits run and not run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.datasets import easy_vqa_records
from harness.local_server import config_args

from ..audits import interleaved, off_on_table
from ..load import bodies
from ..scenario import Bench, Scenario


@dataclass(frozen=True)
class Parameters:
    requests: int = 150  # seeded easy-vqa test questions per run
    repetitions: int = 3
    concurrency: int = 8
    rate: float = 0.1


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    payloads = bodies(list(easy_vqa_records("test", parameters.requests)), parameters.requests)

    def args_of(rate: float) -> dict[str, Any]:
        return config_args("mai-cpu.yaml", {"cascade": {"audit": {"rate": rate, "report_interval_s": 1.0}}})

    rates = ("0", f"{parameters.rate:g}")
    return interleaved(
        bench.url, rates, args_of, payloads, parameters.concurrency, parameters.repetitions, "cost"
    )


def table(result: dict[str, Any]) -> list[str]:
    return off_on_table(
        result,
        f"`configs/mai-cpu.yaml`, `mai` on {result['requests_per_run']} seeded easy-vqa test questions per "
        f"run at concurrency {result['concurrency']}, audits off and on interleaved, each run on a fresh "
        "deployment and ended once its audits had: median [min–max] over the runs; audits counted as the "
        "change in the server's statistics.",
    )


SCENARIO = Scenario(
    name="audit_cost",
    title="What audits cost served traffic",
    result="audit/audit-cost.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
