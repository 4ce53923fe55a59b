"""affinity_cache: what stage affinity keeps of the prefix cache on the real CPU stack with two
replicas of each model (configs/mai-cpu.yaml with smaller CPU bundles, no core binding, half a GiB of
KV cache per engine): ``mai`` forced to the paper's ``sequential`` plan on balanced yes/no questions
(which escalate on the demo pair), the prompt tokens the reasoning and transfer stages are served
from cache, under stage affinity, under Serve's default router, and with one
replica per model, interleaved in a rotated order; then 160 eager requests at concurrency 8 under
stage affinity at two replicas (the load that stalled the prefix-cache router)."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass
from typing import Any

import httpx

from harness.datasets import easy_vqa_balanced_records
from harness.local_server import config_args, deploy

from ..cells import percent
from ..load import ANSWER, answer_body, run_load
from ..scenario import Bench, Scenario
from ..schedule import run_order

ARMS = ("affinity", "default", "one")
STAGES = ("reason_small", "transfer_large")
HALF_GIB = 512 * 1024 * 1024


@dataclass(frozen=True)
class Parameters:
    questions: int = 48  # balanced easy-vqa validation yes/no questions per run
    concurrency: int = 4
    repetitions: int = 2
    eager_requests: int = 160
    eager_concurrency: int = 8


def _args(arm: str) -> dict[str, Any]:
    replicas = 1 if arm == "one" else 2
    model = {
        "bundle": {"CPU": 0.25},
        "actor_num_cpus": 0.1,
        "engine_kwargs": {"kv_cache_memory_bytes": HALF_GIB},
        "autoscaling": {"min_replicas": replicas, "max_replicas": replicas, "target_ongoing_requests": 4},
        "stage_affinity": {"enabled": arm != "default"},
    }
    args = config_args("mai-cpu.yaml", {"small": model, "large": model})
    for role in ("small", "large"):
        # VLLM_CPU_KVCACHE_SPACE takes whole GiB and overrides kv_cache_memory_bytes: left out.
        args[role]["env"] = {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    return args


async def _ask(url: str, payloads: list[dict[str, Any]], concurrency: int) -> list[dict[str, Any]]:
    limit = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=300) as http:

        async def one(body: dict[str, Any]) -> dict[str, Any]:
            async with limit:
                reply = await http.post(ANSWER, json=body)
            return reply.json() if reply.status_code == 200 else {"error": reply.status_code}

        return await asyncio.gather(*(one(body) for body in payloads))


def cached_shares(replies: list[dict[str, Any]]) -> dict[str, Any]:
    """Per later stage: its calls, the prompt and cached tokens per call, and the cached share."""
    totals = {stage: [0, 0, 0] for stage in STAGES}  # cached, prompt, calls
    for reply in replies:
        for stage in reply.get("trace", {}).get("stages", []):
            if stage["name"] in totals and stage["status"] == "ok" and stage.get("cached_tokens") is not None:
                counts = totals[stage["name"]]
                counts[0] += stage["cached_tokens"]
                counts[1] += stage["prompt_tokens"]
                counts[2] += 1
    return {
        stage: {
            "calls": calls,
            "cached_tokens_per_call": round(cached / calls, 2) if calls else None,
            "prompt_tokens_per_call": round(prompt / calls, 2) if calls else None,
            "cached_share_of_prompt": round(cached / prompt, 4) if prompt else None,
        }
        for stage, (cached, prompt, calls) in totals.items()
    }


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url = bench.url
    records = list(easy_vqa_balanced_records("validation", parameters.questions))
    payloads = [answer_body(record, options={"plan": "sequential"}) for record in records]
    runs = []
    for repetition, _, arm in run_order(ARMS, (parameters.concurrency,), parameters.repetitions):
        started = time.monotonic()
        deploy(_args(arm))
        deployed_s = time.monotonic() - started
        replies = asyncio.run(_ask(url, payloads, parameters.concurrency))
        runs.append(
            {
                "arm": arm,
                "repetition": repetition,
                "deploy_s": round(deployed_s, 1),
                "errors": sum("error" in reply for reply in replies),
                "stages": cached_shares(replies),
            }
        )
        print(f"  affinity_cache {arm} #{repetition + 1}: {runs[-1]['stages']}", file=sys.stderr, flush=True)
    deploy(_args("affinity"))
    eager = [answer_body(r, options={"plan": "eager"}) for r in records] * (
        parameters.eager_requests // len(records) + 1
    )
    outcomes, wall = run_load(url, ANSWER, eager[: parameters.eager_requests], parameters.eager_concurrency)
    return {
        "questions": parameters.questions,
        "concurrency": parameters.concurrency,
        "repetitions": parameters.repetitions,
        "runs": runs,
        "summary": _summary(runs),
        "eager": {
            "requests": len(outcomes),
            "answered": sum(o.status == 200 for o in outcomes),
            "concurrency": parameters.eager_concurrency,
            "wall_s": round(wall, 1),
        },
        "goal": {"affinity_over_one_replica_at_least": 0.9},
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [run for run in runs if run["arm"] == arm]
        out[arm] = {}
        for stage in STAGES:
            shares = [run["stages"][stage]["cached_tokens_per_call"] for run in mine]
            present = [share for share in shares if share is not None]
            out[arm][stage] = round(sum(present) / len(present), 4) if present else None
    out["affinity_over_one"] = {
        stage: round(out["affinity"][stage] / out["one"][stage], 3)
        if out["affinity"][stage] is not None and out["one"][stage]
        else None
        for stage in STAGES
    }
    return out


def table(result: dict[str, Any]) -> list[str]:
    summary, eager = result["summary"], result["eager"]
    names = {
        "affinity": "2 replicas, stage affinity",
        "default": "2 replicas, Serve default",
        "one": "1 replica",
    }
    lines = [
        f"`configs/mai-cpu.yaml` with two replicas per model (CPU bundles of 0.25, no core binding, half a "
        f"GiB of KV cache per engine), `mai` with `plan: sequential` on {result['questions']} balanced "
        f"yes/no validation questions at concurrency {result['concurrency']}, the arms in a rotated order, "
        f"{result['repetitions']} repetitions: the prompt tokens per call each later stage was served from "
        "the prefix cache (mean over the repetitions), and the share of its prompt that is.",
        "",
        "| routing | reasoning (small): cached tokens / call | share of prompt | transfer (large): cached "
        "tokens / call | share of prompt |",
        "|---|---|---|---|---|",
    ]
    for arm, name in names.items():
        cells = []
        for stage in STAGES:
            shares = [
                run["stages"][stage]["cached_share_of_prompt"]
                for run in result["runs"]
                if run["arm"] == arm and run["stages"][stage]["cached_share_of_prompt"] is not None
            ]
            cells += [str(summary[arm][stage]), percent(sum(shares) / len(shares) if shares else None)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ratio, goal = summary["affinity_over_one"], result["goal"]["affinity_over_one_replica_at_least"]
    lines += [
        "",
        f"Stage affinity over one replica, cached tokens per call: reasoning {ratio['reason_small']}×, "
        f"transfer {ratio['transfer_large']}× (goal ≥ {goal}×). "
        f"{eager['requests']} eager requests at concurrency {eager['concurrency']} under stage affinity: "
        f"{eager['answered']} answered in {eager['wall_s']} s.",
    ]
    return lines


SCENARIO = Scenario(
    name="affinity_cache",
    title="Stage affinity on the real stack: the prefix cache at two replicas",
    result="affinity-cache.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
