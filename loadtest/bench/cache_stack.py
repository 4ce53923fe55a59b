"""What the answer cache does on the real stack (the answer_cache scenario's second part; cache_cost.py
is its part in process): ``serve run configs/mai-cpu.yaml`` of its own, the cache in the ingress
replica's memory as the config has it, chat requests for ``mai`` from the anonymous caller (an admin
on an open API), who empties the cache with ``POST /v1/mai/cache/purge {"all": true}``.

- **A replay with repeats.** ``distinct`` easy-vqa validation questions and ``repeats`` requests asking
  some of them again, each after its first asking, in a seeded order, sent at a fixed concurrency:
  every request with ``mai.cache: off`` (the cascade runs each time), and with the cache on, emptied
  before each run so that each starts cold; the two interleaved, the order rotated per repetition.
  Per run: answered requests per second, p50 and p99, engine tokens (the prompt and completion tokens
  of the replies that ran, ``miss`` and ``bypass``; a hit or a coalesced answer costs none), replies
  per cache status. Then whether each request's answer text is the same with the cache as without.
- **A burst.** ``burst`` identical requests sent at once (a question and image not asked before, cache
  on), against the same burst with ``mai.cache: off``, interleaved: the share coalesced, the burst's
  wall time, its engine tokens.
- **A hit over HTTP.** One request kept, then the same request ``sequential`` times one at a time
  (each a hit), alternating with it under ``mai.cache: off``: client-side p50 and p99.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from evaluation.requests import user_message
from harness.driver import closed_loop, percentile
from serve_app.cache.keys import normal_question

from .load import stats, warm_up
from .schedule import rotated
from .summary import quantiles, spread
from .tracing_cost import served

STACK_URL = "http://127.0.0.1:8000"
CHAT, PURGE = "/v1/chat/completions", "/v1/mai/cache/purge"
PINNED_PLAN, PINNED_RUNS = "sequential", 2  # the replay again, every request under this plan
STATUSES = ("hit", "coalesced", "miss", "bypass")
RAN = ("miss", "bypass")  # the replies whose own run used the engines
REPLAY_FIELDS = ("requests_per_s", "p50_s", "p99_s", "engine_tokens")
TIMEOUT_S = 300


def chat_body(record: dict[str, Any], cache: str | None = None, plan: str | None = None) -> dict[str, Any]:
    """A ``mai`` chat request for a record, with ``mai.cache`` and a forced plan when given."""
    mai = {"answer_type": record["answer_type"]} | ({"cache": cache} if cache else {})
    mai |= {"options": {"plan": plan}} if plan else {}
    return {"model": "mai", "messages": [user_message(record["image"], record["question"])], "mai": mai}


def distinct_records(records: Sequence[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """The first ``n`` records no two of which are one question to the cache (the same image and the
    same question in normal form)."""
    seen, kept = set(), []
    for record in records:
        same = (record["image"], normal_question(record["question"]))
        if same not in seen:
            seen.add(same)
            kept.append(record)
    if len(kept) < n:
        raise ValueError(f"{n} distinct questions wanted, {len(kept)} found")
    return kept[:n]


def repeats_of(distinct: int, share: float) -> int:
    """How many repeats make ``share`` of a run whose other requests are ``distinct`` questions."""
    if not 0 <= share < 1:
        raise ValueError(f"repeat_share {share}: from 0 to below 1")
    return round(distinct * share / (1 - share))


def replay_order(distinct: int, repeats: int, seed: int) -> list[int]:
    """The questions (0 .. distinct-1) in the order a run asks them: each once, shuffled, and
    ``repeats`` of them again (distinct ones while there are enough), each at a random place after
    its first asking."""
    rng = random.Random(seed)
    order = list(range(distinct))
    rng.shuffle(order)
    if repeats <= distinct:
        again = rng.sample(range(distinct), repeats)
    else:
        again = [rng.randrange(distinct) for _ in range(repeats)]
    for question in again:
        order.insert(rng.randint(order.index(question) + 1, len(order)), question)
    return order


def engine_tokens(trace: dict[str, Any]) -> int:
    """A trace's prompt and completion tokens, every model's."""
    return sum(
        counts.get("prompt_tokens", 0) + counts.get("completion_tokens", 0)
        for counts in (trace.get("tokens") or {}).values()
    )


def reply_record(reply: httpx.Response, latency_s: float) -> dict[str, Any]:
    """One reply: its status, latency, cache status (the trace's, and the header's), answer text and
    the engine tokens it used (none unless it ran)."""
    if reply.status_code != 200:
        return {"status": reply.status_code, "latency_s": latency_s, "cache": None, "answer": None}
    data = reply.json()
    trace = data["mai"]["trace"]
    cache = (trace.get("cache") or {}).get("status")
    return {
        "status": 200,
        "latency_s": latency_s,
        "cache": cache,
        "header": reply.headers.get("x-mai-cache"),
        "answer": data["choices"][0]["message"]["content"],
        "tokens": engine_tokens(trace) if cache in RAN else 0,
    }


async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    reply = await http.post(CHAT, json=body)
    return reply_record(reply, time.perf_counter() - started)


def run_summary(replies: Sequence[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    """One run: answered requests per second, p50/p99, engine tokens, replies per cache status."""
    ok = [reply for reply in replies if reply["status"] == 200]
    statuses = Counter(reply["cache"] for reply in ok)
    return {
        "requests": len(replies),
        "errors": len(replies) - len(ok),
        "wall_s": round(wall_s, 3),
        "requests_per_s": round(len(ok) / wall_s, 3),
        **quantiles([reply["latency_s"] for reply in ok], 4),
        "engine_tokens": sum(reply["tokens"] for reply in ok),
        "cache": {status: statuses[status] for status in STATUSES},
        "header_disagrees": sum(reply["header"] != reply["cache"] for reply in ok),
    }


def purge_all(url: str) -> int:
    """Every entry of the cache removed; how many there were."""
    reply = httpx.post(f"{url}{PURGE}", json={"all": True}, timeout=60)
    reply.raise_for_status()
    return int(reply.json()["purged"])


async def replay_run(url: str, bodies: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    """Every body once at ``concurrency``; the run's summary with each request's answer and status,
    in the replay's order."""

    async def send(http: httpx.AsyncClient, index: int, body: dict[str, Any]) -> dict[str, Any]:
        return {"index": index} | await post(http, body)

    replies, wall_s = await closed_loop(url, bodies, send, concurrency=concurrency, timeout_s=TIMEOUT_S)
    replies.sort(key=lambda reply: reply["index"])
    return run_summary(replies, wall_s) | {
        "answers": [reply["answer"] for reply in replies],
        "statuses": [reply["cache"] for reply in replies],
    }


def arms_summary(runs: Sequence[dict[str, Any]], fields: Sequence[str], arms: Sequence[str]) -> dict:
    """Per arm, each field's median [min–max] over its runs; the on arm's medians over the off arm's."""
    summary: dict[str, Any] = {}
    for arm in arms:
        mine = [run for run in runs if run["arm"] == arm]
        summary[arm] = {field: spread([run[field] for run in mine], 4) for field in fields}
        summary[arm]["errors"] = sum(run["errors"] for run in mine)
    summary["on_over_off"] = {
        field: round(summary["on"][field]["median"] / summary["off"][field]["median"], 3)
        for field in fields
        if summary["on"][field] and summary["off"][field] and summary["off"][field]["median"]
    }
    return summary


def identical_share(left: Sequence[list], right: Sequence[list], *, same: bool = False) -> float | None:
    """The share of (run, other run, request) whose answer texts are byte for byte the same, over runs
    of ``left`` against runs of ``right`` (``same``: one list, each pair of distinct runs once)."""
    pairs = [(a, b) for i, a in enumerate(left) for b in (right[i + 1 :] if same else right)]
    compared = [x == y for a, b in pairs for x, y in zip(a, b, strict=True)]
    return round(sum(compared) / len(compared), 4) if compared else None


def answer_identity(runs: Sequence[dict[str, Any]], questions: Sequence[dict[str, Any]]) -> dict:
    """Each request's answer with the cache on against its answers with it off: the share identical
    (overall, and by the on reply's cache status), the off runs against one another, and every
    request an on run answered otherwise than an off run did."""
    off = [run["answers"] for run in runs if run["arm"] == "off"]
    on = [run for run in runs if run["arm"] == "on"]
    by_status: dict[str, list[bool]] = {}
    differing = []
    for number, run in enumerate(on):
        for index, (answer, status) in enumerate(zip(run["answers"], run["statuses"], strict=True)):
            others = [answers[index] for answers in off]
            by_status.setdefault(str(status), []).extend(answer == other for other in others)
            if any(answer != other for other in others):
                record = questions[index]
                differing.append(
                    {"index": index, "record": record["id"], "question": record["question"],
                     "on_run": number, "cache": status, "on": answer, "off": others}
                )  # fmt: skip
    return {
        "identical_share": identical_share([run["answers"] for run in on], off),
        "off_vs_off_identical_share": identical_share(off, off, same=True),
        "by_status": {
            status: {"compared": len(flags), "identical_share": round(sum(flags) / len(flags), 4)}
            for status, flags in sorted(by_status.items())
        },
        "differing": differing,
    }


def replay(
    url: str, questions: list[dict[str, Any]], concurrency: int, runs: int, plan: str | None = None
) -> dict[str, Any]:
    """The replay, off and on, ``runs`` times each, interleaved; each on run after a purge. ``plan``:
    every request forces it (no plan the server explores), so that answers may be compared."""
    done = []
    for repetition in range(runs):
        for arm in rotated(("off", "on"), repetition):
            purged = purge_all(url) if arm == "on" else None
            bodies = [chat_body(record, "off" if arm == "off" else None, plan) for record in questions]
            measured = asyncio.run(replay_run(url, bodies, concurrency))
            done.append({"arm": arm, "repetition": repetition, "purged_before": purged} | measured)
    return {
        "concurrency": concurrency,
        "runs": done,
        **arms_summary(done, REPLAY_FIELDS, ("off", "on")),
        "identity": answer_identity(done, questions),
    }


async def burst_once(url: str, body: dict[str, Any], size: int) -> dict[str, Any]:
    """``size`` copies of ``body`` sent at once: replies per cache status, the share coalesced, the
    wall time until the last answer, the engine tokens, how many answer texts."""
    limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S, limits=limits) as http:
        started = time.perf_counter()
        replies = await asyncio.gather(*(post(http, body) for _ in range(size)))
        wall_s = time.perf_counter() - started
    ok = [reply for reply in replies if reply["status"] == 200]
    statuses = Counter(reply["cache"] for reply in ok)
    return {
        "errors": size - len(ok),
        "cache": {status: statuses[status] for status in STATUSES},
        "coalesced_share": round(statuses["coalesced"] / size, 4),
        "wall_s": round(wall_s, 3),
        "engine_tokens": sum(reply["tokens"] for reply in ok),
        "distinct_answers": len({reply["answer"] for reply in ok}),
    }


def bursts(url: str, records: Sequence[dict[str, Any]], size: int) -> dict[str, Any]:
    """A burst with the cache on and one with it off per record (each a question asked nowhere else),
    the order rotated per record."""
    done = []
    for repetition, record in enumerate(records):
        for arm in rotated(("on", "off"), repetition):
            body = chat_body(record, None if arm == "on" else "off")
            measured = asyncio.run(burst_once(url, body, size))
            done.append({"arm": arm, "repetition": repetition, "record": record["id"]} | measured)
    return {
        "size": size,
        "runs": done,
        **arms_summary(done, ("coalesced_share", "wall_s", "engine_tokens"), ("on", "off")),
    }


def latency_ms(replies: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Requests, errors, cache statuses, p50 and p99 in ms of sequential replies."""
    ok = [reply["latency_s"] for reply in replies if reply["status"] == 200]
    return {
        "requests": len(replies),
        "errors": len(replies) - len(ok),
        "cache": dict(Counter(str(reply["cache"]) for reply in replies)),
        "p50_ms": round(percentile(ok, 0.5) * 1e3, 2) if ok else None,
        "p99_ms": round(percentile(ok, 0.99) * 1e3, 2) if ok else None,
    }


async def hits_over_http(url: str, record: dict[str, Any], requests: int) -> dict[str, Any]:
    """One request kept, then it ``requests`` times one at a time, each followed by the same request
    with the cache off: the two latencies, client side, on one kept-alive connection."""
    kept, off = chat_body(record), chat_body(record, "off")
    async with httpx.AsyncClient(base_url=url, timeout=TIMEOUT_S) as http:
        first = await post(http, kept)
        hits, runs = [], []
        for _ in range(requests):
            hits.append(await post(http, kept))
            runs.append(await post(http, off))
    measured = {
        "record": record["id"],
        "first": first["cache"],
        "hit": latency_ms(hits),
        "off": latency_ms(runs),
    }
    if measured["hit"]["p50_ms"] and measured["off"]["p50_ms"]:
        measured["hit_over_off_p50"] = round(measured["hit"]["p50_ms"] / measured["off"]["p50_ms"], 3)
    return measured


def on_stack(
    records: Sequence[dict[str, Any]],
    *,
    distinct: int,
    repeats: int,
    concurrency: int,
    runs: int,
    burst: int,
    bursts_per_arm: int,
    sequential: int,
    warm_up_requests: int,
    seed: int,
    log: Path,
) -> dict[str, Any]:
    """The stack's part on a ``serve run`` of its own: a warm-up with the cache off (questions asked
    nowhere else), the replay, the bursts, a hit over HTTP, then the server's cache counts."""
    picked = distinct_records(records, warm_up_requests + distinct + bursts_per_arm + 1)
    warm, replayed = picked[:warm_up_requests], picked[warm_up_requests : warm_up_requests + distinct]
    burst_records, hit_record = picked[-1 - bursts_per_arm : -1], picked[-1]
    order = replay_order(distinct, repeats, seed)
    questions = [replayed[index] for index in order]
    with served({}, log, STACK_URL):
        warm_up(STACK_URL, [chat_body(record, "off") for record in warm], concurrency, path=CHAT)
        result = {
            "distinct": distinct,
            "repeats": repeats,
            "requests": len(order),
            "seed": seed,
            "order": order,
            "replay": replay(STACK_URL, questions, concurrency, runs),
            # The server explores other plans on a share of requests (adaptive.explore): with the
            # plan forced, each off run answers as the others do, and the cache's answers are compared.
            "pinned": replay(STACK_URL, questions, concurrency, PINNED_RUNS, plan=PINNED_PLAN),
            "burst": bursts(STACK_URL, burst_records, burst),
            "hit_over_http": asyncio.run(hits_over_http(STACK_URL, hit_record, sequential)),
        }
        result["server_cache"] = stats(STACK_URL).get("cache")
    return result
