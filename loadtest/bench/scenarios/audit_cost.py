"""audit_cost: what audits cost served traffic on the real CPU stack (configs/mai-cpu.yaml): ``mai`` at
concurrency 8 with audits off (rate 0) and at rate 0.1, interleaved and repeated, each run on a fresh
deployment and ended once its audits have: p50, p99 and throughput per run, the audits run and not run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.datasets import easy_vqa_records
from harness.local_server import config_args

from ..audits import interleaved
from ..cells import cell
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
    lines = [
        f"`configs/mai-cpu.yaml`, `mai` on {result['requests_per_run']} seeded easy-vqa test questions per "
        f"run at concurrency {result['concurrency']}, audits off and on interleaved, each run on a fresh "
        "deployment and ended once its audits had: median [min–max] over the runs; audits counted as the "
        "change in the server's statistics.",
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
    name="audit_cost",
    title="What audits cost served traffic",
    result="audit/audit-cost.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
