"""API keys under load, against a running server: how many requests and tokens a key's quota admits
per minute, and how a key's trickle fares beside another key's flood.

    # quotas: send faster than the key's requests_per_minute for --minutes, count what is admitted
    python -m loadtest.keys quota --url http://127.0.0.1:8000 --key "$KEY" --rate 4 --minutes 3 \
        --out experiments/keys-and-quotas/quota-1-replica.json
    # fairness: rounds of the trickle alone, then beside a flood from another key's processes
    python -m loadtest.keys fairness --url http://127.0.0.1:8000 --key "$TRICKLE" --flood-key "$FLOOD" \
        --rate 2 --flood-rate 40 --seconds 30 --rounds 3 --out experiments/keys-and-quotas/fairness-cpu.json
    # a burst: another key's single request, then --size of this key's at once, --repeats times
    python -m loadtest.keys burst --key "$FLOOD" --other-key "$TRICKLE" --size 12 --out burst.json
    # passthrough tokens against a key's tokens_per_minute (requests decoding n x max_tokens each)
    python -m loadtest.keys passthrough --key "$TOKENS" --model demo-large --tokens-per-minute 1000 \
        --n 4 --max-tokens 128 --minutes 2 --out passthrough-tokens.json

Requests are the cascade's (``model: mai``) yes/no question in the demo models' own words ("Is the
shape red?", so that no reply needs a repair) about a small synthetic image, each request's image
its own (one pixel drawn from the request's number) so that no prefix cache answers for another.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx


def image_url(n: int) -> str:
    """A small red image, its two corner pixels drawn from ``n`` (below 2**48): each request's own
    image, so that no prefix cache (which keys an image by its content) answers for another."""
    from PIL import Image

    image = Image.new("RGB", (64, 64), (200, 30, 30))
    for x, shift in ((0, 0), (1, 24)):
        part = n >> shift
        image.putpixel((x, 0), ((part >> 16) & 255, (part >> 8) & 255, part & 255))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def body(n: int) -> dict[str, Any]:
    return {
        "model": "mai",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": image_url(n)}},
                    {"type": "text", "text": "Is the shape red?"},
                ],
            }
        ],
    }


async def send(
    client: httpx.AsyncClient, key: str, n: int, request: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Request ``n`` (the cascade's question about image ``n``, or ``request``) with ``key``."""
    started = time.monotonic()
    try:
        reply = await client.post(
            "/v1/chat/completions", json=request or body(n), headers={"authorization": f"Bearer {key}"}
        )
    except httpx.HTTPError as exc:
        return {
            "at": started,
            "status": None,
            "error": type(exc).__name__,
            "seconds": time.monotonic() - started,
        }
    record: dict[str, Any] = {
        "at": started,
        "status": reply.status_code,
        "seconds": time.monotonic() - started,
    }
    if reply.status_code == 200:
        record["tokens"] = reply.json().get("usage", {}).get("total_tokens", 0)
    elif reply.status_code == 429:
        record["quota"] = reply.json().get("error", {}).get("param")
    return record


async def paced(
    client: httpx.AsyncClient, key: str, rate: float, seconds: float, start: int = 0
) -> list[dict]:
    """Requests sent at ``rate`` per second for ``seconds``, each without waiting for the last."""
    tasks, began, n = [], time.monotonic(), start
    while time.monotonic() - began < seconds:
        tasks.append(asyncio.create_task(send(client, key, n)))
        n += 1
        await asyncio.sleep(max(0.0, began + (n - start) / rate - time.monotonic()))
    return list(await asyncio.gather(*tasks))


def per_minute(records: list[dict], began: float) -> list[dict[str, int]]:
    minutes: dict[int, Counter] = {}
    for record in records:
        minute = int((record["at"] - began) // 60)
        counts = minutes.setdefault(minute, Counter())
        counts["sent"] += 1
        counts[f"status_{record['status']}"] += 1
        counts["tokens"] += record.get("tokens", 0)
    return [dict(minutes[m]) | {"minute": m} for m in sorted(minutes)]


def latency(records: list[dict]) -> dict[str, Any]:
    began = min((r["at"] for r in records), default=0.0)
    ok = sorted(r["seconds"] for r in records if r["status"] == 200)
    return {
        "sent": len(records),
        "answered": len(ok),
        "errors": sum(1 for r in records if r["status"] != 200),
        "statuses": dict(Counter(str(r["status"]) for r in records)),
        "refused_for": dict(Counter(str(r.get("quota")) for r in records if r["status"] == 429)),
        "p50_s": round(statistics.median(ok), 3) if ok else None,
        "p90_s": round(ok[int(0.9 * (len(ok) - 1))], 3) if ok else None,
        # When the first refusals came, in seconds from the first request sent.
        "refused_at_s": [round(r["at"] - began, 1) for r in records if r["status"] == 429][:50],
    }


async def quota(args: argparse.Namespace) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout) as client:
        began = time.monotonic()
        records = await paced(client, args.key, args.rate, args.minutes * 60)
    minutes = per_minute(records, began)
    return {"rate_per_s": args.rate, "minutes": minutes, "overall": latency(records)}


async def burst(args: argparse.Namespace) -> dict[str, Any]:
    """--repeats times: the other key's single request (answered), then a burst of --size concurrent
    requests of --key, --pause-s apart: how many of the burst are answered and refused. With --model,
    the burst's requests are passthroughs to that model decoding --tokens tokens each, long enough
    that they overlap in the ingress (on two cores the cascade's demo answers are so quick that a
    burst reaches the ingress a few at a time)."""
    limits = httpx.Limits(max_connections=None)
    request = passthrough_body(args.model, 1, args.tokens) if args.model else None
    bursts = []
    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout, limits=limits) as client:
        for number in range(args.repeats):
            first = number * 10**6
            single = await send(client, args.other_key, first)
            records = await asyncio.gather(
                *(send(client, args.key, first + 1 + n, request) for n in range(args.size))
            )
            bursts.append({"other_key_status": single["status"], **latency(list(records))})
            await asyncio.sleep(args.pause_s)
    return {
        "size": args.size,
        "request": request or "the cascade's question",
        "summary": {
            "answered": [b["answered"] for b in bursts],
            "refused": [b["statuses"].get("429", 0) for b in bursts],
            "refused_for": dict(sum((Counter(b["refused_for"]) for b in bursts), Counter())),
        },
        "bursts": bursts,
    }


def passthrough_body(model: str, n: int, max_tokens: int) -> dict[str, Any]:
    """A request for a model id that decodes ``n`` choices of ``max_tokens`` tokens each, whatever
    the model would say (``min_tokens`` and ``ignore_eos``)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Count to ten."}],
        "n": n,
        "max_tokens": max_tokens,
        "min_tokens": max_tokens,
        "ignore_eos": True,
    }


async def passthrough(args: argparse.Namespace) -> dict[str, Any]:
    """--key sends --concurrency closed loops of passthrough requests for --minutes: the tokens the
    engine's usage says each answered one used, per minute, against the key's tokens_per_minute."""
    request = passthrough_body(args.model, args.n, args.max_tokens)
    records: list[dict[str, Any]] = []

    async def loop(client: httpx.AsyncClient, ends: float) -> None:
        while time.monotonic() < ends:
            record = await send(client, args.key, 0, request)
            records.append(record)
            if record["status"] == 429:
                await asyncio.sleep(1.0)  # a client that backs off a little, not a spin

    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout) as client:
        began = time.monotonic()
        await asyncio.gather(*(loop(client, began + args.minutes * 60) for _ in range(args.concurrency)))
    minutes = per_minute(records, began)
    return {
        "request": request,
        "tokens_per_minute_quota": args.tokens_per_minute,
        "minutes": minutes,
        "summary": {
            "tokens_per_minute": [m.get("tokens", 0) for m in minutes if m["minute"] < args.minutes],
            "answered": sum(1 for r in records if r["status"] == 200),
            "refused": sum(1 for r in records if r["status"] == 429),
        },
        "overall": latency(records),
    }


def flood_sender(
    url: str, key: str, rate: float, seconds: float, timeout: float, start: int, niceness: int
) -> list[dict]:
    """One flood process: ``rate`` requests a second for ``seconds``, on its own client, at
    ``niceness`` (added to its own)."""
    os.nice(niceness)

    async def run() -> list[dict]:
        limits = httpx.Limits(max_connections=None)
        async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
            return await paced(client, key, rate, seconds, start=start)

    return asyncio.run(run())


async def fairness(args: argparse.Namespace) -> dict[str, Any]:
    """--rounds rounds, each the trickle alone, then beside the flood: interleaved, so that the
    machine's drift falls on both alike."""
    rounds = []
    limits = httpx.Limits(max_connections=None)
    # The flood: --flood-rate requests a second over --flood-processes processes, each request sent
    # without waiting for the last (an open loop, several times what the server answers), from the
    # warm-up to the trickle's end. Other processes, as another team's clients would be: on one
    # client the flood's hundreds of open requests would delay the trickle's inside the client.
    # They run at --flood-niceness (default 15, what Ray gives its workers), so that on the
    # server's own cores they take no more of the CPU than the server does.
    processes, seconds = args.flood_processes, args.warmup_s + args.seconds
    context = multiprocessing.get_context("spawn")
    async with httpx.AsyncClient(base_url=args.url, timeout=args.timeout, limits=limits) as client:
        with context.Pool(processes) as pool:
            for number in range(args.rounds):
                first = number * 10**9  # every request its own image: no prefix cache between them
                await asyncio.sleep(args.warmup_s if number else 0)  # what the flood left, drained
                alone = await paced(client, args.key, args.rate, args.seconds, start=first)
                floods = [
                    pool.apply_async(
                        flood_sender,
                        (
                            args.url,
                            args.flood_key,
                            args.flood_rate / processes,
                            seconds,
                            args.timeout,
                            first + n * 10**6,
                            args.flood_niceness,
                        ),
                    )
                    for n in range(1, processes + 1)
                ]
                await asyncio.sleep(args.warmup_s)
                beside = await paced(client, args.key, args.rate, args.seconds, start=first + 10**5)
                flood_records = [record for flood in floods for record in flood.get()]
                rounds.append(
                    {
                        "alone": latency(alone),
                        "beside_flood": latency(beside),
                        "flood": latency(flood_records),
                        "flood_sent_per_s": round(len(flood_records) / seconds, 2),
                    }
                )
    ratios = [
        r["beside_flood"]["p50_s"] / r["alone"]["p50_s"]
        for r in rounds
        if r["beside_flood"]["p50_s"] and r["alone"]["p50_s"]
    ]
    return {
        "trickle_rate_per_s": args.rate,
        "flood_rate_per_s": args.flood_rate,
        "summary": {
            "alone_p50_s": _median(r["alone"]["p50_s"] for r in rounds),
            "beside_flood_p50_s": _median(r["beside_flood"]["p50_s"] for r in rounds),
            "p50_ratio": {
                "median": round(statistics.median(ratios), 2) if ratios else None,
                "min": round(min(ratios), 2) if ratios else None,
                "max": round(max(ratios), 2) if ratios else None,
            },
            "trickle_sent_beside_flood": sum(r["beside_flood"]["sent"] for r in rounds),
            "trickle_errors_beside_flood": sum(r["beside_flood"]["errors"] for r in rounds),
            "flood_sent_per_s": _median(r["flood_sent_per_s"] for r in rounds),
        },
        "rounds": rounds,
    }


def _median(values: Any) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 3) if present else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.keys", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("quota", "fairness", "burst", "passthrough"):
        command = sub.add_parser(name)
        command.add_argument("--url", default="http://127.0.0.1:8000")
        command.add_argument("--key", required=True)
        command.add_argument("--timeout", type=float, default=300)
        command.add_argument("--out", type=Path)
        if name in ("quota", "fairness"):
            command.add_argument("--rate", type=float, required=True, help="requests per second")
        if name == "quota":
            command.add_argument("--minutes", type=float, default=3)
        elif name == "burst":
            command.add_argument("--other-key", required=True, help="the key that sends one request first")
            command.add_argument("--size", type=int, default=12, help="requests of the burst, all at once")
            command.add_argument("--repeats", type=int, default=3)
            command.add_argument("--pause-s", type=float, default=3.0, help="between bursts")
            command.add_argument("--model", help="send the burst as passthroughs to this model id")
            command.add_argument("--tokens", type=int, default=64, help="each passthrough decodes")
        elif name == "passthrough":
            command.add_argument("--model", required=True, help="a configured model id")
            command.add_argument("--n", type=int, default=4)
            command.add_argument("--max-tokens", type=int, default=128)
            command.add_argument("--concurrency", type=int, default=2)
            command.add_argument("--minutes", type=float, default=2)
            command.add_argument(
                "--tokens-per-minute", type=int, required=True, help="the key's quota, for the record"
            )
        else:
            command.add_argument("--flood-key", required=True)
            command.add_argument(
                "--flood-rate", type=float, default=40, help="the flood's requests per second"
            )
            command.add_argument(
                "--flood-processes", type=int, default=4, help="client processes the flood is sent from"
            )
            command.add_argument(
                "--flood-niceness",
                type=int,
                default=15,
                help="added to the flood processes' niceness (15: Ray's workers'; 0: the trickle's)",
            )
            command.add_argument("--seconds", type=float, default=30, help="of each phase")
            command.add_argument("--rounds", type=int, default=3)
            command.add_argument("--warmup-s", type=float, default=10)
    args = parser.parse_args(argv)
    run = {"quota": quota, "fairness": fairness, "burst": burst, "passthrough": passthrough}[args.what]
    result = asyncio.run(run(args))
    result["command"] = " ".join(["python -m loadtest.keys", *(argv or sys.argv[1:])]).replace(
        args.key, "$KEY"
    )
    for name, shown in (("flood_key", "$FLOOD_KEY"), ("other_key", "$OTHER_KEY")):
        if getattr(args, name, None):
            result["command"] = result["command"].replace(getattr(args, name), shown)
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
