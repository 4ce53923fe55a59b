"""audit: audits and served traffic, one scenario with three variants (``--param variant=...``), each its
own deployment, load and result file; each run on a fresh deployment, audits off and on interleaved.

``cost``: what audits cost served traffic on the real CPU stack (configs/mai-cpu.yaml): ``mai`` at
concurrency 8 with audits off (rate 0) and at rate 0.1, interleaved and repeated, each run ended once
its audits have: p50, p99 and throughput per run, the audits run and not run.

``shed``: how audits give way under load on the emulated tier (configs/mai-emulated.yaml, one replica
per model): concurrency far past the large model's capacity, audits off and at rate 0.5, interleaved:
served errors and latency, and the audits started, shed and cancelled.

``load``: audits under load on the real CPU stack (configs/mai-cpu.yaml, its engines scheduling by
priority and audits at priority 1): ``mai`` under the paper's rule and plan (every agreement counts,
``sequential``), 4 closed-loop clients, audits at rate 1.0 against rate 0, interleaved and repeated,
each run ended once its audits have: the share of early exits audited, and served p50/p99 with audits
against without."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evaluation.rules import PAPER_RULE_AND_PLAN
from harness.datasets import easy_vqa_records
from harness.local_server import config_args

from ..audits import interleaved, off_on_table
from ..cells import cell
from ..load import bodies, emulated_args
from ..scenario import Bench, Scenario, family


@dataclass(frozen=True)
class CostParameters:
    requests: int = 150  # seeded easy-vqa test questions per run
    repetitions: int = 3
    concurrency: int = 8
    rate: float = 0.1


def run_cost(bench: Bench, parameters: CostParameters) -> dict[str, Any]:
    payloads = bodies(list(easy_vqa_records("test", parameters.requests)), parameters.requests)

    def args_of(rate: float) -> dict[str, Any]:
        audit = {"rate": rate, "report_interval_s": 1.0}
        # The cascade's runs are what this measures (every run asks the same questions): no answer reused.
        return config_args("mai-cpu.yaml", {"cascade": {"audit": audit}, "cache": {"enabled": False}})

    rates = ("0", f"{parameters.rate:g}")
    return interleaved(
        bench.url, rates, args_of, payloads, parameters.concurrency, parameters.repetitions, "cost"
    )


def cost_table(result: dict[str, Any]) -> list[str]:
    return off_on_table(
        result,
        f"`configs/mai-cpu.yaml`, `mai` on {result['requests_per_run']} seeded easy-vqa test questions per "
        f"run at concurrency {result['concurrency']}, audits off and on interleaved, each run on a fresh "
        "deployment and ended once its audits had: median [min–max] over the runs; audits counted as the "
        "change in the server's statistics.",
    )


@dataclass(frozen=True)
class ShedParameters:
    requests: int = 1500  # per run
    repetitions: int = 3
    concurrency: int = 256
    rate: float = 0.5


def run_shed(bench: Bench, parameters: ShedParameters) -> dict[str, Any]:
    def args_of(rate: float) -> dict[str, Any]:
        return emulated_args("chartqa", 1.0, cascade={"audit": {"rate": rate, "report_interval_s": 1.0}})

    payloads = bodies(bench.records, parameters.requests)
    rates = ("0", f"{parameters.rate:g}")
    return interleaved(
        bench.url, rates, args_of, payloads, parameters.concurrency, parameters.repetitions, "shed"
    )


def shed_table(result: dict[str, Any]) -> list[str]:
    return off_on_table(
        result,
        "The emulated tier (ChartQA profile, one replica per model) at concurrency "
        f"{result['concurrency']}, far past the large model's capacity: {result['requests_per_run']} "
        "requests per run, audits off and on interleaved, each run on a fresh deployment: median [min–max] "
        "over the runs; audits counted as the change in the server's statistics, those not run by the "
        "reason it gives.",
    )


GOALS = {"audited_share_at_least": 0.8, "p50_ratio_at_most": 1.15}


@dataclass(frozen=True)
class LoadParameters:
    requests: int = 300  # seeded easy-vqa test questions per run
    repetitions: int = 3
    concurrency: int = 4
    rate: float = 1.0


def audited_share(run: dict[str, Any]) -> float | None:
    """Of the early exits a run sampled, the share whose audit ran to its end."""
    not_run = sum(value for key, value in run.items() if key.startswith("not_run_"))
    sampled = run.get("audited", 0) + not_run
    return round(run.get("audited", 0) / sampled, 4) if sampled else None


def run_load(bench: Bench, parameters: LoadParameters) -> dict[str, Any]:
    records = list(easy_vqa_records("test", parameters.requests))
    # The paper's rule and order: every agreement settles the question, so early exits are many.
    payloads = bodies(records, parameters.requests, options=PAPER_RULE_AND_PLAN)

    def args_of(rate: float) -> dict[str, Any]:
        audit = {"rate": rate, "report_interval_s": 1.0}
        # The cascade's runs are what this measures (every run asks the same questions): no answer reused.
        return config_args("mai-cpu.yaml", {"cascade": {"audit": audit}, "cache": {"enabled": False}})

    on = f"{parameters.rate:g}"
    result = interleaved(
        bench.url, ("0", on), args_of, payloads, parameters.concurrency, parameters.repetitions, "load"
    )
    shares = [audited_share(run) for run in result["runs"][on]]
    audited = sum(run.get("audited", 0) for run in result["runs"][on])
    sampled = audited + sum(
        value for run in result["runs"][on] for key, value in run.items() if key.startswith("not_run_")
    )
    p50_ratio = result["summary"]["ratios"].get("p50_s")
    return result | {
        "options": PAPER_RULE_AND_PLAN,
        "audited_share": round(audited / sampled, 4) if sampled else None,
        "audited_share_per_run": shares,
        "goals": GOALS,
        "met": {
            "audited_share": bool(sampled) and audited / sampled >= GOALS["audited_share_at_least"],
            "p50_ratio": p50_ratio is not None and p50_ratio <= GOALS["p50_ratio_at_most"],
        },
    }


def load_table(result: dict[str, Any]) -> list[str]:
    runs, summary = result["runs"], result["summary"]
    off, on = list(runs)
    lines = [
        f"`configs/mai-cpu.yaml` (engines scheduling by priority, audits at priority 1), `mai` under the "
        f"paper's rule and plan on {result['requests_per_run']} seeded easy-vqa test questions per run, "
        f"{result['concurrency']} closed-loop clients, audits at rate {on} against none, interleaved, each "
        "run on a fresh deployment and ended once its audits had: median [min–max] over the runs.",
        "",
        "| audits | runs | p50 s | p99 s | requests/s | errors | early exits audited, per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for rate, results in runs.items():
        audited = (
            ", ".join(
                f"{run.get('audited', 0)} of {run.get('audited', 0) + _not_run(run)}" for run in results
            )
            if rate == on
            else "–"
        )
        label = "off" if rate == off else f"rate {rate}"
        lines.append(
            f"| {label} | {len(results)} | {cell(summary[rate]['p50_s'], 2)} | "
            f"{cell(summary[rate]['p99_s'], 2)} | {cell(summary[rate]['requests_per_s'], 2)} | "
            f"{sum(run['errors'] for run in results)} | {audited} |"
        )
    ratios, goals, met = summary["ratios"], result["goals"], result["met"]
    lines += [
        "",
        f"Early exits audited: **{result['audited_share'] * 100:.1f}%** (goal ≥ "
        f"{goals['audited_share_at_least'] * 100:.0f}%: {'met' if met['audited_share'] else 'missed'}). "
        f"With audits, served p50 **{ratios.get('p50_s')}×** (goal ≤ {goals['p50_ratio_at_most']}×: "
        f"{'met' if met['p50_ratio'] else 'missed'}), p99 {ratios.get('p99_s')}×, requests/s "
        f"{ratios.get('requests_per_s')}× the runs without.",
    ]
    return lines


def _not_run(run: dict[str, Any]) -> int:
    return sum(value for key, value in run.items() if key.startswith("not_run_"))


SCENARIO = family(
    "audit",
    Scenario(
        name="audit",
        variant="cost",
        title="What audits cost served traffic",
        result="audit/audit-cost.json",
        config="mai-cpu.yaml",
        run=run_cost,
        table=cost_table,
        parameters=CostParameters(),
    ),
    Scenario(
        name="audit",
        variant="shed",
        title="Audits under overload",
        result="audit/audit-shed.json",
        config="mai-emulated.yaml",
        run=run_shed,
        table=shed_table,
        parameters=ShedParameters(),
    ),
    Scenario(
        name="audit",
        variant="load",
        title="Audits under load on the real stack",
        result="audit/audit-load.json",
        config="mai-cpu.yaml",
        run=run_load,
        table=load_table,
        parameters=LoadParameters(),
    ),
)
