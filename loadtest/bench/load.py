"""What scenarios send and how: request bodies, the emulated app's arguments, a closed-loop run of
the HTTP driver, the warm-up before anything is timed, the server's statistics."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx

from harness.driver import ClientReply, closed_loop, drive
from harness.local_server import config_args

# One replica per model, never scaled: the capacity model's default.
ONE = {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 32}
# Emulated time runs 1:1 with the paper's H100 profile, except MMMU, whose 2,000-token reasoning
# chains would take half an hour per policy: it runs 4x faster (its requests are long, so the
# orchestration's own CPU time stays small beside them).
PAPER_TIME_SCALE = {"mmmu": 0.25}
EMULATED_SMALL, EMULATED_LARGE = "small:emulated-qwen3-vl-2b", "large:emulated-qwen3-vl-8b"
ANSWER = "/v1/mai/answer"


def emulated_args(dataset: str, time_scale: float, *, autoscaling: dict | None = None, **app: Any) -> dict:
    """``configs/mai-emulated.yaml``'s arguments with both models on ``dataset``'s profile at
    ``time_scale``, one replica each unless ``autoscaling`` says otherwise, the answer cache off;
    ``app`` merged on top."""
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
            # The cascade's runs are what the capacity model measures (its loads cycle through the
            # records, warm up on the ones they time, repeat on one deployment): no answer reused.
            "cache": {"enabled": False},
            **app,
        },
    )


def answer_body(record: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """A ``/v1/mai/answer`` body for a dataset record."""
    return {key: record[key] for key in ("image", "question", "answer_type")} | extra


def bodies(records: Sequence[Mapping[str, Any]], n: int, **extra: Any) -> list[dict]:
    """``n`` bodies cycling through ``records``."""
    return [answer_body(records[i % len(records)], **extra) for i in range(n)]


def run_load(
    url: str, path: str, payloads: list[dict], concurrency: int, **kwargs: Any
) -> tuple[list[ClientReply], float]:
    """Every payload POSTed once by ``concurrency`` closed-loop clients: outcomes and wall time."""
    return asyncio.run(drive(url, path, payloads, concurrency=concurrency, **kwargs))


def warm_up(url: str, payloads: list[dict], concurrency: int = 4, path: str = ANSWER) -> None:
    """Send ``payloads`` untimed, so that engines, compiled kernels and connections are ready."""
    run_load(url, path, payloads, concurrency)


def after(seconds: float) -> Callable[[], bool]:
    """A stop condition for the driver: true once ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    return lambda: time.monotonic() > deadline


def stats(url: str) -> dict[str, Any]:
    """The server's ``GET /v1/mai/stats``."""
    return httpx.get(f"{url}/v1/mai/stats", timeout=60).json()


_ACCEPT = re.compile(r"stage-1 accept (\d\.\d+) over")


def stage1_accept(reason: str | None) -> float | None:
    """The stage-1 settle share the controller's reason quotes, if it quotes one."""
    match = _ACCEPT.search(reason or "")
    return float(match.group(1)) if match else None


async def ask_plans(
    url: str, payloads: Sequence[dict[str, Any]], ids: str, concurrency: int
) -> tuple[list[dict[str, Any]], float]:
    """Every payload asked with request ids ``<ids><index>``; per reply its route, the plan it ran,
    whether it explored, the stage-1 share the controller quoted, and when it finished."""

    async def send(http: httpx.AsyncClient, index: int, body: dict[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        reply = await http.post(ANSWER, json=body, headers={"x-request-id": f"{ids}{index}"})
        latency = time.perf_counter() - started
        if reply.status_code != 200:
            return {"index": index, "status": reply.status_code, "latency_s": latency}
        data = reply.json()
        trace = data["trace"]
        return {
            "index": index,
            "status": 200,
            "latency_s": latency,
            "route": data["route"],
            "plan": trace["plan"],
            "explored": "explore" in (trace.get("plan_reason") or ""),
            "stage1_accept": stage1_accept(trace.get("plan_reason")),
            "done_at": time.perf_counter(),
        }

    return await closed_loop(url, list(payloads), send, concurrency=concurrency)
