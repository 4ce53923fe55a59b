"""Sections of bench/RESULTS.md whose result files other commands write: the fault drills, the fuzzer,
mai-eval's check of the audit signal, the stats holder's scaling simulation, and the replica start
times read from Ray's logs. Each is a scenario without a run: its table here, its command named."""

from __future__ import annotations

import datetime
import statistics
from typing import Any

from .cells import cell, percent, percent_cell
from .scenario import Scenario

FAULTS = {
    "kill_small": "small-model replica killed",
    "kill_large": "large-model replica killed",
    "kill_ingress": "ingress replica killed",
}


def faults_table(result: dict[str, Any]) -> list[str]:
    settings = result["settings"]
    stages = ", ".join(f"{stage} {seconds} s" for stage, seconds in settings["stage_timeouts_s"].items())
    lines = [
        f"Per fault, a fresh deployment of the emulated config with {settings['replicas_per_deployment']} "
        f"replicas of every deployment (stage timeouts {stages}; request timeout "
        f"{settings['request_timeout_s']} s), {settings['users']} locust VQA users for "
        f"{settings['run_time_s']} s, the fault injected {settings['fault_at_s']} s in. Hung: no answer "
        "within the request timeout + 30 s; mislabelled: a route that contradicts its trace; recovered: "
        "after the load, 20 requests in a row answered on a normal route with no restart by hand.",
        "",
        "| fault | sent | answered | answered degraded | 503 + Retry-After | failed otherwise | hung | "
        "mislabelled | recovered | replicas gone / new |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for fault in result["faults"]:
        statuses = fault.get("failed_statuses") or {}
        failed = str(fault["failed"]) + (
            f" (HTTP {', '.join(f'{status}: {count}' for status, count in statuses.items())})"
            if statuses
            else ""
        )
        gone = sum(len(ids) for ids in (fault.get("replicas_gone") or {}).values())
        new = sum(len(ids) for ids in (fault.get("replicas_new") or {}).values())
        lines.append(
            f"| {FAULTS.get(fault['fault'], fault['what'])} | {fault['sent']} | {fault['answered']} | "
            f"{fault['degraded']} | {fault['rejected_503']} | {failed} | {fault['hung']} | "
            f"{fault['mislabelled']} | {'yes' if fault['recovered'] else 'no'} | {gone} / {new} |"
        )
    return lines


def fuzz_table(result: dict[str, Any]) -> list[str]:
    rows = result["rows"]
    restarted = "some replica died or was replaced" if result["replicas_restarted"] else "none died"
    lines = [
        f"{sum(row['count'] for row in rows)} requests, {result['examples_per_operation_and_mode']} "
        f"examples per operation and input mode; {len(result['violations'])} violations, "
        f"{len(result.get('server_errors') or [])} server errors; replicas: {restarted}. Checked: "
        + "; ".join(result["checked"])
        + ".",
        "",
        "| operation | input | status | error code | answers | example input |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        example = row["example"] if len(row["example"]) <= 70 else row["example"][:67] + "..."
        example = example.replace("|", "\\|").replace("`", "'")
        lines.append(
            f"| `{row['operation']}` | {row['mode']} | {row['status']} | {row['code'] or '–'} | "
            f"{row['count']} | `{example}` |"
        )
    return lines


def audit_truth_table(result: dict[str, Any]) -> list[str]:
    rules = result["rules"]
    totals = sorted({sum(entry["questions"] for entry in rows.values()) for rows in rules.values()})
    described = {
        "paper": "the paper's rule (`min_confidence` 0, no `confident_large`)",
        "calibrated": "the config's calibrated rule",
    }
    lines = [
        f"{' / '.join(str(total) for total in totals)} seeded easy-vqa test questions on "
        "`configs/mai-cpu.yaml` with every early exit audited, under "
        + " and ".join(described.get(rule, f"the rule `{rule}`") for rule in rules)
        + "; Full RT (the audit's reference) also asked directly. Per rule, class and route: the labelled "
        "error of the answer served and of Full RT's on the same questions, the audit's disagreement with "
        "Full RT (no labels; 95 % Wilson interval), and how many of the wrong early exits it flagged.",
        "",
        "| rule | class / route | questions | served error | Full RT's error | audited | disagreement "
        "[95 % CI] | wrong early exits, flagged |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rule, rows in rules.items():
        for group, entry in rows.items():
            if "audited" in entry:
                interval = entry.get("disagreement_ci95")
                disagreement = (
                    f"{percent(entry['disagreement'])} [{interval[0] * 100:.1f}–{interval[1] * 100:.1f}]"
                    if interval
                    else percent(entry.get("disagreement"))
                )
                audit = f"{entry['audited']} | {disagreement} | {entry['wrong']}, {entry['wrong_flagged']}"
            else:
                audit = "– | – | –"
            lines.append(
                f"| {rule} | {group} | {entry['questions']} | {percent(entry['served_error'])} | "
                f"{percent(entry['reference_error'])} | {audit} |"
            )
    lines += [
        "",
        "A route without audit figures is not an early exit (Full RT's own answer). The audit measures "
        "disagreement with Full RT, not error against the truth.",
    ]
    return lines


def _scaled(spread: dict[str, float], factor: float) -> dict[str, float]:
    return {key: spread[key] * factor for key in ("median", "min", "max")}


def stats_holder_table(result: dict[str, Any]) -> list[str]:
    settings = result["settings"]
    lines = [
        f"One process, a virtual clock, no Ray: R ingress replicas record {settings['classes']} question "
        f"classes (Zipf shares) at about {settings['requests_per_s_per_replica']:g} requests/s each into "
        f"real books, early exits audited at rate {settings['audit_rate']:g}, windows of "
        f"{settings['audit_window']} audits and {settings['plan_window']} plan observations full from the "
        f"start, and each reports every {settings['report_interval_s']:g} s to one holder. Before: the "
        "holder that kept every replica's whole books and merged them all on every report and snapshot; "
        "after: the merged view kept up to date from reports of what changed. Holder CPU per report "
        "(unpickle it, apply it, pickle the reply) and per interval, median [min–max] over "
        f"{settings['intervals']} intervals; *sampled*: {settings['before_reports_per_interval']} reports "
        "of each interval timed, the interval extrapolated.",
        "",
        "| replicas | holder | CPU per report, ms | CPU per interval, s | share of the interval | "
        "report, KB | reply, KB | snapshot, ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for replicas, run in result["runs"].items():
        for arm in ("before", "after"):
            figures = run[arm]
            label = arm + (" (*sampled*)" if figures["sampled"] else "")
            report_kb, reply_kb = (figures[key]["median"] / 1000 for key in ("report_bytes", "reply_bytes"))
            lines.append(
                f"| {replicas} | {label} | {cell(_scaled(figures['cpu_per_report_s'], 1000), 2)} | "
                f"{cell(figures['cpu_per_interval_s'], 3)} | {percent_cell(figures['interval_share'])} | "
                f"{report_kb:.1f} | {reply_kb:.1f} | {cell(_scaled(figures['snapshot_cpu_s'], 1000), 2)} |"
            )
    restarts = ", ".join(
        f"{replicas} replicas {run['after']['full_report']['all_replicas_cpu_s']:g} s"
        for replicas, run in result["runs"].items()
    )
    exact = all(run["after"]["matches_exact_merge"] for run in result["runs"].values())
    lines += [
        "",
        "After a holder restart every replica reports its whole books once (about "
        f"{next(iter(result['runs'].values()))['after']['full_report']['bytes']['median'] / 1000:.0f} KB "
        f"each): holder CPU over all of them {restarts}. At the end of each run the holder's "
        f"`GET /v1/mai/stats` body {'equalled' if exact else 'differed from'} the exact merge of the "
        "replicas' books.",
    ]
    return lines


def replica_starts_table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"From Ray session `{result['session']}`, Serve's controller log: seconds from \"Starting "
        'Replica" to "started successfully", per deployment, median [min–max] over its starts.',
        "",
        "| deployment | starts | seconds to start |",
        "|---|---|---|",
    ]
    for deployment, spread in result["seconds"].items():
        lines.append(f"| {deployment} | {spread['starts']} | {cell(spread, 1)} |")
    if "upscales" not in result:
        return [*lines, "", "Scale-up decisions: not in this file."]
    if not result["upscales"]:
        return [*lines, "", "Serve's controller decided no scale-up in this session."]

    def at(stamp: str) -> datetime.datetime:
        return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")

    decisions: dict[str, list[dict[str, Any]]] = {}
    for decision in result["upscales"]:
        decisions.setdefault(decision["deployment"], []).append(decision)
    lines += [
        "",
        f"{len(result['upscales'])} scale-ups decided; per deployment, the seconds from a decision to the "
        "deployment's next replica running:",
        "",
        "| deployment | scale-ups decided | replicas, from → to | decision to a new replica running, s |",
        "|---|---|---|---|",
    ]
    for deployment, made in sorted(decisions.items()):
        steps = ", ".join(dict.fromkeys(f"{d['from']} → {d['to']}" for d in made))
        waits = [
            (at(d["first_running"]) - at(d["at"])).total_seconds() for d in made if d.get("first_running")
        ]
        if len(waits) > 1:
            waited = f"{statistics.median(waits):.1f} [{min(waits):.1f}–{max(waits):.1f}]"
        else:
            waited = f"{waits[0]:.1f}" if waits else "–"
        if len(made) > len(waits):
            waited += f" ({len(made) - len(waits)} with none running after it)"
        lines.append(f"| {deployment} | {len(made)} | {steps} | {waited} |")
    return lines


FAULTS_SECTION = Scenario(
    name="faults",
    title="Faults under load",
    result="faults.json",
    table=faults_table,
    command="python -m loadtest.faults",
)
FUZZ_SECTION = Scenario(
    name="fuzz",
    title="Fuzzing the emulated app",
    result="fuzz.json",
    table=fuzz_table,
    command="python -m loadtest.fuzz --local --examples 150",
)
FUZZ_CPU_SECTION = Scenario(
    name="fuzz-cpu",
    title="Fuzzing the CPU stack",
    result="fuzz-cpu.json",
    table=fuzz_table,
    command="python -m loadtest.fuzz --local --config mai-cpu.yaml --examples 40 "
    "--out bench/results/fuzz-cpu.json",
)
AUDIT_TRUTH_SECTION = Scenario(
    name="audit-truth",
    title="Does the audit signal track errors (mai-eval, the CPU stack)",
    result="audit/audit-truth.json",
    table=audit_truth_table,
    command="python -m evaluation.audit_truth",
)
STATS_HOLDER_SECTION = Scenario(
    name="stats-holder-scale",
    title="The stats holder with 8 to 256 ingress replicas (simulated)",
    result="stats-holder-scale.json",
    table=stats_holder_table,
    command="python -m loadtest.stats_scale",
)
REPLICA_STARTS_SECTION = Scenario(
    name="replica-starts",
    title="How long Serve took to start a replica (the coupled bench's session)",
    result="autoscaling/replica-starts.json",
    table=replica_starts_table,
    command="python -m loadtest.replica_starts <ray session> "
    "--out bench/results/autoscaling/replica-starts.json",
)
REPLICA_STARTS_SHIPPED_SECTION = Scenario(
    name="replica-starts-shipped",
    title="How long Serve took to start a replica (the shipped config's session)",
    result="autoscaling/replica-starts-shipped.json",
    table=replica_starts_table,
    command="python -m loadtest.replica_starts <ray session> "
    "--out bench/results/autoscaling/replica-starts-shipped.json",
)
