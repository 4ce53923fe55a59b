"""audit_shed: how audits give way under load on the emulated tier (configs/mai-emulated.yaml, one
replica per model): concurrency far past the large model's capacity, audits off and at rate 0.5,
interleaved: served errors and latency, and the audits started, shed and cancelled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..audits import interleaved
from ..cells import cell
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
    lines = [
        "The emulated tier (ChartQA profile, one replica per model) at concurrency "
        f"{result['concurrency']}, far past the large model's capacity: {result['requests_per_run']} "
        "requests per run, audits off and on interleaved, each run on a fresh deployment: median [min–max] "
        "over the runs; audits counted as the change in the server's statistics, those not run by the "
        "reason it gives.",
    ]
    runs, summary = result["runs"], result["summary"]
    off, on = list(runs)
    label = {off: f"off (rate {off})", on: f"rate {on}"}
    lines += [
        "",
        "| audits | runs | p50 s | p99 s | requests/s | errors | audits run, per run | audits not run, per "
        "run |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate, results in runs.items():
        reasons = sorted({key for run in results for key in run if key.startswith("not_run_")})
        not_run = "; ".join(
            f"{key.removeprefix('not_run_')} {', '.join(str(run.get(key, 0)) for run in results)}"
            for key in reasons
        )
        errors = sum(run["errors"] for run in results)
        lines.append(
            f"| {label[rate]} | {len(results)} | {cell(summary[rate]['p50_s'], 2)} | "
            f"{cell(summary[rate]['p99_s'], 2)} | {cell(summary[rate]['requests_per_s'], 2)} | "
            f"{errors} of {sum(run['requests'] for run in results)} | "
            f"{', '.join(str(run.get('audited', 0)) for run in results)} | {not_run or '–'} |"
        )
    ratios = summary.get("ratios", {})
    names = {"p50_s": "p50", "p99_s": "p99", "requests_per_s": "requests/s"}
    ratio_text = ", ".join(f"{names[key]} **{ratios[key]}×**" for key in names if key in ratios)
    audited = sum(run.get("audited", 0) for run in runs[on])
    skipped = sum(value for run in runs[on] for key, value in run.items() if key.startswith("not_run_"))
    lines += [
        "",
        f"Rate {on} against off, the ratio of the medians: {ratio_text or '–'}. Of the {audited + skipped} "
        f"audits sampled at rate {on}, {audited} ran and {skipped} did not.",
    ]
    return lines


SCENARIO = Scenario(
    name="audit_shed",
    title="Audits under overload",
    result="audit/audit-shed.json",
    config="mai-emulated.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
