"""audit_shed: how audits give way under load on the emulated tier (configs/mai-emulated.yaml, one
replica per model): concurrency far past the large model's capacity, audits off and at rate 0.5,
interleaved: served errors and latency, and the audits started, shed and cancelled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..audits import interleaved, off_on_table
from ..load import bodies, emulated_args
from ..scenario import Bench, Scenario


@dataclass(frozen=True)
class Parameters:
    requests: int = 1500  # per run
    repetitions: int = 3
    concurrency: int = 256
    rate: float = 0.5


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    def args_of(rate: float) -> dict[str, Any]:
        return emulated_args("chartqa", 1.0, cascade={"audit": {"rate": rate, "report_interval_s": 1.0}})

    payloads = bodies(bench.records, parameters.requests)
    rates = ("0", f"{parameters.rate:g}")
    return interleaved(
        bench.url, rates, args_of, payloads, parameters.concurrency, parameters.repetitions, "shed"
    )


def table(result: dict[str, Any]) -> list[str]:
    return off_on_table(
        result,
        "The emulated tier (ChartQA profile, one replica per model) at concurrency "
        f"{result['concurrency']}, far past the large model's capacity: {result['requests_per_run']} "
        "requests per run, audits off and on interleaved, each run on a fresh deployment: median [min–max] "
        "over the runs; audits counted as the change in the server's statistics, those not run by the "
        "reason it gives.",
    )


SCENARIO = Scenario(
    name="audit_shed",
    title="Audits under overload",
    result="audit/audit-shed.json",
    config="mai-emulated.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
