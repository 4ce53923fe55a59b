"""affinity: stage affinity, one scenario with two variants (``--param variant=emulated|cache``).

``emulated``: on the emulated tier (a capacity model: routing and latency, never accuracy) with 4 and 8
replicas per model: the share of a request's follow-up calls to a model that reach the replica its first
call to that model reached, and served p50/p99, under stage affinity and under Serve's default router
(``stage_affinity.enabled: false``), the two interleaved in a rotated order; each under an even load and
a skewed one (one replica of each model slowed down).

``cache``: what stage affinity keeps of the prefix cache on the real CPU stack with two replicas of each
model (configs/mai-cpu.yaml with smaller CPU bundles, no core binding, half a GiB of KV cache per
engine): ``mai`` forced to the paper's ``sequential`` plan on balanced yes/no questions (which escalate
on the demo pair), the prompt tokens the reasoning and transfer stages are served from cache, under
stage affinity, under Serve's default router, and with one replica per model, interleaved in a rotated
order; then 160 eager requests at concurrency 8 under stage affinity at two replicas (the load that
stalled the prefix-cache router)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import httpx

from harness.datasets import easy_vqa_balanced_records
from harness.local_server import config_args, deploy, deployment_handle, replica_counts

from ..cells import cell, percent
from ..load import ANSWER, EMULATED_LARGE, EMULATED_SMALL, answer_body, bodies, emulated_args, run_load
from ..scenario import Bench, Scenario, family
from ..schedule import run_order
from ..summary import spread, summarize

ROUTERS = ("affinity", "default")
LOADS = ("even", "skewed")


@dataclass(frozen=True)
class Parameters:
    replicas: tuple[int, ...] = (4, 8)
    requests: int = 160  # per run
    concurrency: int = 16
    repetitions: int = 2
    dataset: str = "mmmu"  # long reasoning: most requests escalate
    time_scale: float = 0.05
    skew_delay_s: float = 0.5  # added to every call of one replica per model under the skewed load


def _args(replicas: int, router: str, parameters: Parameters) -> dict[str, Any]:
    fixed = {"min_replicas": replicas, "max_replicas": replicas, "target_ongoing_requests": 16}
    model = {"stage_affinity": {"enabled": router == "affinity"}}
    args = emulated_args(parameters.dataset, parameters.time_scale, autoscaling=fixed)
    for role in ("small", "large"):
        args[role] |= model
    return args


def _served(deployment: str, replicas: int) -> dict[str, list[tuple[float, str]]]:
    """Every replica's calls since it was last asked, by replica (asked until all have answered)."""
    handle = deployment_handle(deployment)
    calls: dict[str, list[tuple[float, str]]] = {}
    deadline = time.monotonic() + 60
    while len(calls) < replicas and time.monotonic() < deadline:
        replica, served = handle.calls_served.remote().result()
        calls.setdefault(replica, []).extend(served)
    return calls


def follow_up_share(calls_by_replica: dict[str, list[tuple[float, str]]]) -> tuple[int, int]:
    """(follow-up calls on the replica of their request's first call to the model, follow-up calls)."""
    by_key: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for replica, calls in calls_by_replica.items():
        for at, key in calls:
            by_key[key].append((at, replica))
    same = total = 0
    for calls in by_key.values():
        ordered = sorted(calls)
        first = ordered[0][1]
        total += len(ordered) - 1
        same += sum(replica == first for _, replica in ordered[1:])
    return same, total


def _slow_one_replica(deployment: str, seconds: float) -> None:
    deployment_handle(deployment).inject_delay.remote(seconds).result()


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    url, records = bench.url, bench.records
    runs: list[dict[str, Any]] = []
    for replicas in parameters.replicas:
        for repetition, _, router in run_order(ROUTERS, (parameters.concurrency,), parameters.repetitions):
            deploy(_args(replicas, router, parameters))
            counts = replica_counts()
            for deployment in (EMULATED_SMALL, EMULATED_LARGE):
                _served(deployment, counts[deployment])  # empty the logs the warm-up filled
            for load in LOADS:
                if load == "skewed":
                    for deployment in (EMULATED_SMALL, EMULATED_LARGE):
                        _slow_one_replica(deployment, parameters.skew_delay_s)
                ids = f"aff-{replicas}-{repetition}-{router}-{load}-"
                outcomes, wall = run_load(
                    url,
                    ANSWER,
                    bodies(records, parameters.requests),
                    parameters.concurrency,
                    request_ids=ids,
                )
                shares = {}
                for role, deployment in (("small", EMULATED_SMALL), ("large", EMULATED_LARGE)):
                    same, total = follow_up_share(_served(deployment, counts[deployment]))
                    shares[role] = {
                        "same": same,
                        "follow_ups": total,
                        "share": round(same / total, 4) if total else None,
                    }
                run = summarize(outcomes, wall) | {
                    "replicas": replicas,
                    "router": router,
                    "load": load,
                    "repetition": repetition,
                    "follow_ups": shares,
                }
                runs.append(run)
                print(
                    f"  affinity R={replicas} {router} {load} #{repetition + 1}: p50 {run['p50_s']} s, "
                    f"p99 {run['p99_s']} s, same replica small {shares['small']['share']}, "
                    f"large {shares['large']['share']}",
                    file=sys.stderr,
                    flush=True,
                )
    return {
        "requests_per_run": parameters.requests,
        "concurrency": parameters.concurrency,
        "repetitions": parameters.repetitions,
        "dataset": parameters.dataset,
        "time_scale": parameters.time_scale,
        "skew_delay_s": parameters.skew_delay_s,
        "runs": runs,
        "summary": _summary(runs),
        "goal": {"follow_up_share_at_least": 0.95},
    }


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    cells: dict[str, Any] = {}
    for run in runs:
        cells.setdefault(f"{run['replicas']}/{run['load']}/{run['router']}", []).append(run)
    out = {}
    for name, group in cells.items():
        same = sum(run["follow_ups"][role]["same"] for run in group for role in ("small", "large"))
        total = sum(run["follow_ups"][role]["follow_ups"] for run in group for role in ("small", "large"))
        out[name] = {
            "follow_up_share": round(same / total, 4) if total else None,
            "follow_ups": total,
            "p50_s": spread([run["p50_s"] for run in group]),
            "p99_s": spread([run["p99_s"] for run in group]),
            "errors": sum(run["errors"] for run in group),
        }
    return out


def table(result: dict[str, Any]) -> list[str]:
    lines = [
        f"Emulated engines on the {result['dataset']} profile at time scale {result['time_scale']}, "
        f"{result['requests_per_run']} requests per run at concurrency {result['concurrency']}, the two "
        f"routers interleaved in a rotated order, {result['repetitions']} repetitions; skewed: one replica "
        f"of each model {result['skew_delay_s']} s slower per call. Same replica: the share of a "
        "request's follow-up calls to a model (its reasoning, transfer, audit) that reached the replica "
        "its first call to that model reached; p50/p99 median [min–max] over the repetitions. Goal: "
        f"≥ {result['goal']['follow_up_share_at_least'] * 100:.0f}% under stage affinity.",
        "",
        "| replicas per model | load | router | same replica | p50 s | p99 s | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in result["summary"].items():
        replicas, load, router = name.split("/")
        lines.append(
            f"| {replicas} | {load} | {'stage affinity' if router == 'affinity' else 'Serve default'} | "
            f"{percent(entry['follow_up_share'])} of {entry['follow_ups']} | {cell(entry['p50_s'], 2)} | "
            f"{cell(entry['p99_s'], 2)} | {entry['errors']} |"
        )
    return lines


ARMS = ("affinity", "default", "one")
STAGES = ("reason_small", "transfer_large")
HALF_GIB = 512 * 1024 * 1024


@dataclass(frozen=True)
class CacheParameters:
    questions: int = 48  # balanced easy-vqa validation yes/no questions per run
    concurrency: int = 4
    repetitions: int = 2
    eager_requests: int = 160
    eager_concurrency: int = 8


def _cache_args(arm: str) -> dict[str, Any]:
    replicas = 1 if arm == "one" else 2
    model = {
        "bundle": {"CPU": 0.25},
        "actor_num_cpus": 0.1,
        "engine_kwargs": {"kv_cache_memory_bytes": HALF_GIB},
        "autoscaling": {"min_replicas": replicas, "max_replicas": replicas, "target_ongoing_requests": 4},
        "stage_affinity": {"enabled": arm != "default"},
    }
    # The cascade's runs are what this measures (each arm asks the same questions, the eager load asks
    # them again and again): no answer reused.
    args = config_args("mai-cpu.yaml", {"small": model, "large": model, "cache": {"enabled": False}})
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


def run_cache(bench: Bench, parameters: CacheParameters) -> dict[str, Any]:
    url = bench.url
    records = list(easy_vqa_balanced_records("validation", parameters.questions))
    payloads = [answer_body(record, options={"plan": "sequential"}) for record in records]
    runs = []
    for repetition, _, arm in run_order(ARMS, (parameters.concurrency,), parameters.repetitions):
        started = time.monotonic()
        deploy(_cache_args(arm))
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
    deploy(_cache_args("affinity"))
    eager = [answer_body(r, options={"plan": "eager"}) for r in records] * (
        parameters.eager_requests // len(records) + 1
    )
    outcomes, wall = run_load(url, ANSWER, eager[: parameters.eager_requests], parameters.eager_concurrency)
    return {
        "questions": parameters.questions,
        "concurrency": parameters.concurrency,
        "repetitions": parameters.repetitions,
        "runs": runs,
        "summary": _cache_summary(runs),
        "eager": {
            "requests": len(outcomes),
            "answered": sum(o.status == 200 for o in outcomes),
            "concurrency": parameters.eager_concurrency,
            "wall_s": round(wall, 1),
        },
        "goal": {"affinity_over_one_replica_at_least": 0.9},
    }


def _cache_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
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


def cache_table(result: dict[str, Any]) -> list[str]:
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


SCENARIO = family(
    "affinity",
    Scenario(
        name="affinity",
        variant="emulated",
        title="Stage affinity: a request's stages on one replica (emulated, 4 and 8 replicas)",
        result="affinity.json",
        config="mai-emulated.yaml",
        run=run,
        table=table,
        parameters=Parameters(),
    ),
    Scenario(
        name="affinity",
        variant="cache",
        title="Stage affinity on the real stack: the prefix cache at two replicas",
        result="affinity-cache.json",
        config="mai-cpu.yaml",
        run=run_cache,
        table=cache_table,
        parameters=CacheParameters(),
    ),
)
