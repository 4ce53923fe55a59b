"""Sections of bench/RESULTS.md whose result files other commands write: the fault drills, the fuzzer,
mai-eval's check of the audit signal and a body's JSON pre-check. Each is a scenario without a run: its
table here, its command named."""

from __future__ import annotations

from typing import Any

from .cells import percent
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


def body_precheck_table(result: dict[str, Any]) -> list[str]:
    sizes = list(result["results"])
    last = result["results"][sizes[-1]]
    codes = [code for code in ("before", "after") if code in next(iter(last.values()))]
    parameters = result["meta"].get("parameters", {})
    before = parameters.get("before_commit")
    shown = {size: size.replace("MiB", " MiB") for size in sizes}
    lines = [
        "What a body's JSON costs before any model runs: the pre-check (nesting, keys, values, numbers "
        "read off the bytes; `parse_json` with the parser left out) and the whole `parse_json` "
        + (f"as at commit {before[:10]} → today's" if before and len(codes) == 2 else "today")
        + ", beside `json.loads` of the same body; CPU milliseconds of the measuring thread, medians of "
        f"{parameters.get('repeats', '?')} interleaved rounds.",
        "",
        "| body | "
        + " | ".join(f"pre-check, {shown[size]}" for size in sizes)
        + f" | parse_json, {shown[sizes[-1]]} | json.loads, {shown[sizes[-1]]} |",
        "|---|" + "---|" * (len(sizes) + 2),
    ]
    for name, about in result["bodies"].items():
        cells = [
            " → ".join(_ms(result["results"][size][name][code]["precheck"]["cpu_seconds"]) for code in codes)
            for size in sizes
        ]
        cells.append(" → ".join(_ms(last[name][code]["parse_json"]["cpu_seconds"]) for code in codes))
        cells.append(
            f"{_ms(last[name]['json_loads']['cpu_seconds'])} ({last[name]['json_loads']['outcome']})"
        )
        lines.append(f"| {about} | " + " | ".join(cells) + " |")
    return lines


def grammar_limits_table(result: dict[str, Any]) -> list[str]:
    """Per ``limits.grammar`` bound: its default, and the compile time and memory of the worst request
    it admits (and of one past it) on each tokenizer measured."""
    tokenizers = list(result["worst_admitted"])
    lines = [
        "| limit | default | " + " | ".join(f"{name}: admitted · past" for name in tokenizers) + " |",
        "|---|---|" + "---|" * len(tokenizers),
    ]
    for limit, runs in result["by_limit"].items():
        cells = []
        for name in tokenizers:
            run = runs.get(name, {})
            shown = [
                f"{run[side]['compile_s']:.3f} s, {run[side]['peak_rss_delta_mb']:.1f} MB"
                if side in run
                else "–"
                for side in ("admitted", "past")
            ]
            cells.append(" · ".join(shown))
        lines.append(f"| `{limit}` | {result['limits'].get(limit, '–')} | " + " | ".join(cells) + " |")
    return lines


def _ms(spread: dict[str, float]) -> str:
    return f"{spread['median'] * 1000:.1f}"


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
BODY_PRECHECK_SECTION = Scenario(
    name="body-precheck",
    title="A body's JSON before the parser",
    result="body-precheck.json",
    table=body_precheck_table,
    command="python -m loadtest.body_precheck --before <commit> --out bench/results/body-precheck.json",
)
GRAMMAR_LIMITS_SECTION = Scenario(
    name="grammar-limits",
    title="What limits.grammar admits: compile time and memory (xgrammar, in process)",
    result="grammar-limits.json",
    table=grammar_limits_table,
    command="python -m loadtest.grammar_cost",
)
AUDIT_TRUTH_SECTION = Scenario(
    name="audit-truth",
    title="Does the audit signal track errors (mai-eval, the CPU stack)",
    result="audit/audit-truth.json",
    table=audit_truth_table,
    command="python -m evaluation.audit_truth",
)
