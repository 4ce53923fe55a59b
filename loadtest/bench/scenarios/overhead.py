"""overhead: what the cascade's agree path adds over one direct call to an LLMServer-compatible
deployment through the same proxy, on emulated engines answering at once (time scale 0); single
requests alternating, then peak requests/s under load."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from evaluation.requests import user_message
from harness.driver import percentile
from harness.local_server import deploy

from ..load import ANSWER, bodies, emulated_args, progress, run_load, warm_up
from ..scenario import Bench, Scenario
from ..summary import summarize


@dataclass(frozen=True)
class Parameters:
    requests: int = 3000
    concurrency: int = 32
    single_requests: int = 300  # one at a time, the two paths alternating
    warm_up_requests: int = 50


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """The cascade's agree path against one direct engine call, both through the same proxy."""
    url, records = bench.url, bench.records
    requests, concurrency = parameters.requests, parameters.concurrency
    from ray import serve

    from ..direct import build_direct_app

    deploy(emulated_args("pope", 0.0))
    serve.run(build_direct_app(), name="direct", route_prefix="/direct")
    cascade_payloads = bodies(records, requests, policy="cascade")
    direct_payloads = [
        {
            "model": "direct",
            "max_tokens": 8,
            "messages": [user_message(record["image"], record["question"])],
        }
        for record in (records[i % len(records)] for i in range(requests))
    ]
    # Warm both paths, then interleave single requests so that drift hits both alike.
    warm_up(url, cascade_payloads[: parameters.warm_up_requests])
    warm_up(url, direct_payloads[: parameters.warm_up_requests], path="/direct/v1/chat/completions")
    cascade_single, direct_single = [], []
    for cascade_body, direct_body in zip(
        cascade_payloads[: parameters.single_requests],
        direct_payloads[: parameters.single_requests],
        strict=True,
    ):
        outcome, _ = run_load(url, ANSWER, [cascade_body], 1)
        if outcome[0].route == "agree_short":
            cascade_single.append(outcome[0].latency_s)
        outcome, _ = run_load(url, "/direct/v1/chat/completions", [direct_body], 1)
        direct_single.append(outcome[0].latency_s)
    cascade_load = summarize(
        *run_load(
            url,
            ANSWER,
            cascade_payloads,
            concurrency,
            on_tick=progress("overhead cascade", requests),
        )
    )
    direct_load = summarize(
        *run_load(
            url,
            "/direct/v1/chat/completions",
            direct_payloads,
            concurrency,
            on_tick=progress("overhead direct", requests),
        )
    )
    serve.delete("direct")
    added_p50_ms = (percentile(cascade_single, 0.5) - percentile(direct_single, 0.5)) * 1000
    return {
        "sequential": {
            "cascade_agree_p50_ms": round(percentile(cascade_single, 0.5) * 1000, 2),
            "cascade_agree_p99_ms": round(percentile(cascade_single, 0.99) * 1000, 2),
            "direct_p50_ms": round(percentile(direct_single, 0.5) * 1000, 2),
            "direct_p99_ms": round(percentile(direct_single, 0.99) * 1000, 2),
            "added_p50_ms": round(added_p50_ms, 2),
            "samples": len(cascade_single),
        },
        "loaded": {"concurrency": concurrency, "cascade": cascade_load, "direct": direct_load},
        "targets": {"added_p50_ms_at_most": 5, "cascade_requests_per_s_at_least": 150},
    }


def table(result: dict[str, Any]) -> list[str]:
    seq, loaded = result["sequential"], result["loaded"]
    return [
        "Emulated engines answering at once (time scale 0). One client, the cascade's agree path and a "
        "direct "
        "call alternating, through the same Serve proxy:",
        "",
        "| | p50 ms | p99 ms |",
        "|---|---|---|",
        f"| cascade, agree path (2 engine calls in parallel) | {seq['cascade_agree_p50_ms']} | "
        f"{seq['cascade_agree_p99_ms']} |",
        f"| one direct engine call | {seq['direct_p50_ms']} | {seq['direct_p99_ms']} |",
        f"| **added by MAI** | **{seq['added_p50_ms']}** (target ≤ "
        f"{result['targets']['added_p50_ms_at_most']}) | |",
        "",
        f"Under load (concurrency {loaded['concurrency']}): cascade "
        f"**{loaded['cascade']['requests_per_s']} requests/s** "
        f"(target ≥ {result['targets']['cascade_requests_per_s_at_least']}), p50 "
        f"{loaded['cascade']['p50_s']} s, "
        f"p99 {loaded['cascade']['p99_s']} s; direct {loaded['direct']['requests_per_s']} requests/s.",
    ]


SCENARIO = Scenario(
    name="overhead",
    title="Orchestration overhead",
    result="overhead.json",
    config="mai-emulated.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
