"""The audit against the truth: does the online audit find the early exits that are wrong?

The CPU default (configs/mai-cpu.yaml) with every early exit audited (``cascade.audit.rate: 1.0``),
on seeded easy-vqa test questions, under the paper's rule (``min_confidence: 0``, no
``confident_large``) and the calibrated rule of the config, each run tagged with its rule as the
``task`` (so the server's statistics keep them apart). The reference policy (Full RT) is also asked
directly, so each audited class and route has three figures side by side: the audit's disagreement
rate (from ``GET /v1/mai/stats``, no labels), and the labelled error of the served answer and of the
reference answer. Writes ``bench/results/audit/audit-truth.json`` (``meta``: the command's provenance
record, with the config's overrides).

    python -m evaluation.audit_truth [--questions 500] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from evaluation.rules import PAPER_RULE
from harness.paths import RESULTS
from harness.provenance import provenance
from harness.results import write_result
from serve_app.core.routes import EARLY_EXITS

COMMAND = "python -m evaluation.audit_truth"
OUT = RESULTS / "audit" / "audit-truth.json"
RULES: dict[str, dict[str, Any]] = {
    "paper": PAPER_RULE,
    "calibrated": {},  # the config's calibrated thresholds
}


async def answers(url: str, records: Sequence[Mapping[str, Any]], body_of, concurrency: int) -> list[dict]:
    """Each record's reply (answer, route, kind) from ``POST /v1/mai/answer``, in record order."""
    from harness.driver import closed_loop

    async def send(http: httpx.AsyncClient, index: int, record: Mapping[str, Any]) -> dict:
        reply = await http.post("/v1/mai/answer", json=body_of(record), headers={"x-request-id": f"q{index}"})
        reply.raise_for_status()
        data = reply.json()
        return {"index": index, "answer": data["answer"], "route": data["route"], "kind": data["kind"]}

    results, _ = await closed_loop(url, records, send, concurrency=concurrency)
    return sorted(results, key=lambda result: result["index"])


def summarise(
    records: Sequence[Mapping[str, Any]],
    served: Sequence[Mapping[str, Any]],
    reference: Sequence[Mapping[str, Any]],
    stats: Mapping[str, Any],
    rule: str,
) -> dict[str, Any]:
    """Per class (answer kind) and early-exit route: questions, the audit's disagreement (the server's
    count), and the labelled error of the served and of the reference answers on the same questions."""
    from evaluation.scoring import score
    from serve_app.core.intervals import wilson_interval

    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, reply in enumerate(served):
        groups[(reply["kind"], reply["route"])].append(index)
    table: dict[str, dict[str, Any]] = {}
    for (kind, route), indices in sorted(groups.items()):
        served_wrong = sum(1 - score(served[i]["answer"], records[i]) for i in indices)
        reference_wrong = sum(1 - score(reference[i]["answer"], records[i]) for i in indices)
        entry: dict[str, Any] = {
            "questions": len(indices),
            "served_error": round(served_wrong / len(indices), 4),
            "reference_error": round(reference_wrong / len(indices), 4),
        }
        if route in EARLY_EXITS:
            counted = stats["classes"].get(f"{kind}/{rule}", {}).get("audit", {}).get("by_route", {})
            audit = counted.get(route, {"audited": 0, "disagreed": 0})
            entry["audited"], entry["disagreed"] = audit["audited"], audit["disagreed"]
            if audit["audited"]:
                entry["disagreement"] = round(audit["disagreed"] / audit["audited"], 4)
                entry["disagreement_ci95"] = [
                    round(bound, 4) for bound in wilson_interval(audit["disagreed"], audit["audited"])
                ]
            # Early exits whose answer is wrong, and how many of them the audit flagged (the reference
            # asked directly gives the same answer the audit got, at temperature 0).
            wrong = [i for i in indices if score(served[i]["answer"], records[i]) < 1]
            flagged = [i for i in wrong if _differ(served[i], reference[i])]
            entry["wrong"], entry["wrong_flagged"] = len(wrong), len(flagged)
        table[f"{kind}/{route}"] = entry
    return table


def _differ(served: Mapping[str, Any], reference: Mapping[str, Any]) -> bool:
    from serve_app.core.verification import agree

    return not agree(served["answer"], reference["answer"], served["kind"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    started_run = time.time()

    from harness.datasets import easy_vqa_records
    from harness.local_server import config_args, deploy, local_ray

    records = list(easy_vqa_records("test", args.questions))
    # Every early exit audited, none shed: the measurement needs them all.
    overrides = {"cascade": {"audit": {"rate": 1.0, "report_interval_s": 1.0, "max_large_queue": 10_000}}}
    with local_ray(num_cpus=2) as url:
        print("deploying configs/mai-cpu.yaml with every early exit audited ...", file=sys.stderr)
        deploy(config_args("mai-cpu.yaml", overrides))
        served: dict[str, list[dict]] = {}
        for rule, options in RULES.items():
            started = time.monotonic()

            def cascade_body(record: Mapping[str, Any], rule: str = rule, options: dict = options) -> dict:
                return {
                    "image": record["image"],
                    "question": record["question"],
                    "answer_type": record["answer_type"],
                    "options": options,
                    "task": rule,
                }

            served[rule] = asyncio.run(answers(url, records, cascade_body, args.concurrency))
            print(f"  {rule}: {time.monotonic() - started:.0f} s", file=sys.stderr)

        def reference_body(record: Mapping[str, Any]) -> dict:
            body = {key: record[key] for key in ("image", "question", "answer_type")}
            return body | {"policy": "transfer"}

        reference = asyncio.run(answers(url, records, reference_body, args.concurrency))
        early = sum(reply["route"] in EARLY_EXITS for replies in served.values() for reply in replies)
        deadline = time.monotonic() + 600
        while True:  # the audits run after the replies: wait until every one is counted
            stats = httpx.get(f"{url}/v1/mai/stats", timeout=60).json()
            done = sum(entry["audit"]["audited"] for entry in stats["classes"].values())
            not_run = sum(stats["audit"]["not_run"].values())
            if done + not_run >= early or time.monotonic() > deadline:
                break
            time.sleep(2)
    command = COMMAND + (f" --questions {args.questions}" if args.questions != 500 else "")
    meta = provenance(
        command,
        config="mai-cpu.yaml",
        started=started_run,
        overrides=overrides,
        questions=f"{args.questions} easy-vqa test questions (seeded sample, seed 0)",
        rules=RULES,
        early_exits=early,
        audits_counted=done,
        audits_not_run=stats["audit"]["not_run"],
        extra_token_share=stats["audit"]["extra_token_share"],
        note="disagreement is with the reference policy (Full RT), not error against the truth",
    )
    result = {
        "rules": {rule: summarise(records, served[rule], reference, stats, rule) for rule in RULES},
        "stats": stats,
    }
    write_result(args.out, result, meta)
    print(json.dumps(result["rules"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
