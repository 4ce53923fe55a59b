"""passthrough: a request for the large demo model through MAI's ingress against the same request to its
LLMServer through a thin ingress (same proxy), alternating: added latency, and a streamed reply's time
to first token against the thin ingress's and the handle's own."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from evaluation.requests import user_message
from harness.driver import percentile
from harness.local_server import config_args, deploy, replica_counts

from ..cells import cell
from ..scenario import Bench, Scenario
from ..schedule import rotated
from ..summary import spread


@dataclass(frozen=True)
class Parameters:
    questions: int = 30  # requests per repetition
    repetitions: int = 3


def run(bench: Bench, parameters: Parameters) -> dict[str, Any]:
    """The passthrough's cost on the CPU stack: the large demo model asked through MAI's ingress
    (``model: demo-large``: API key, body, image checks, metrics) and through ``DirectLLMIngress`` (the
    same proxy, the LLMServer's handle, nothing else), one request at a time, the paths alternating
    (which goes first alternates too), three repetitions; p50 per repetition. Streamed: the time to the
    first content chunk over HTTP on both paths and from the LLMServer handle itself (no HTTP)."""
    url, records = bench.url, bench.records
    import httpx
    from ray import serve
    from ray.serve.llm.openai_api_models import ChatCompletionRequest

    from harness.local_server import deployment_handle

    from ..direct import build_direct_llm_app

    deploy(config_args("mai-cpu.yaml"))
    [name] = [name for name in replica_counts() if name.startswith("large:")]
    serve.run(build_direct_llm_app({"demo-large": name}), name="direct", route_prefix="/direct")
    handle = deployment_handle(name).options(stream=True)
    questions = [r for r in records if r["id"].startswith("easy-vqa")][: parameters.questions]

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
                for leg in rotated(names, i + index):
                    latencies[leg].append(await legs[leg](http, record))
        return latencies

    asyncio.run(repetition(-1))  # warm-up, not counted
    runs = [asyncio.run(repetition(index)) for index in range(parameters.repetitions)]
    serve.delete("direct")
    p50 = {leg: [1000 * percentile(run[leg], 0.5) for run in runs] for leg in legs}
    added = [p - d for p, d in zip(p50["whole_passthrough"], p50["whole_direct"], strict=True)]
    ttft_ratio = [p / d for p, d in zip(p50["ttft_passthrough"], p50["ttft_direct"], strict=True)]
    ttft_over_handle = [p / h for p, h in zip(p50["ttft_passthrough"], p50["ttft_handle"], strict=True)]
    return {
        "model": "demo-large",
        "calls_per_repetition": len(questions),
        "repetitions": parameters.repetitions,
        "p50_ms": {leg: spread(values, 2) for leg, values in p50.items()},
        "added_p50_ms": spread(added, 2),
        "ttft_ratio_passthrough_over_direct": spread(ttft_ratio, 3),
        "ttft_ratio_passthrough_over_handle": spread(ttft_over_handle, 3),
        "targets": {"ttft_ratio_at_most": 1.1},
        "note": "one request at a time on 2 CPU cores; whole: max_tokens 8, streamed: 16 tokens (ignore_eos)",
    }


def _carries_content(line: str) -> bool:
    """An SSE line with a chunk whose delta has some content (not the role chunk's empty one)."""
    if not line.startswith("data: {"):
        return False
    choices = json.loads(line[6:]).get("choices") or []
    return any((choice.get("delta") or {}).get("content") for choice in choices)


def table(result: dict[str, Any]) -> list[str]:
    p50 = result["p50_ms"]
    return [
        f"`{result['model']}` through MAI's ingress (passthrough) and through a thin ingress in front of the "
        f"same LLMServer (direct), both behind the same Serve proxy, one request at a time, alternating; "
        f"{result['repetitions']} repetitions of {result['calls_per_repetition']} requests: p50 per "
        "repetition, median [min–max]. The handle row is the LLMServer's own stream without HTTP.",
        "",
        "| measure | passthrough ms | direct ms | handle ms | passthrough / direct |",
        "|---|---|---|---|---|",
        f"| whole reply (8 tokens) | {cell(p50['whole_passthrough'])} | {cell(p50['whole_direct'])} | | "
        f"+{cell(result['added_p50_ms'])} ms |",
        f"| time to first token (streamed) | {cell(p50['ttft_passthrough'])} | "
        f"{cell(p50['ttft_direct'])} | {cell(p50['ttft_handle'])} | "
        f"{cell(result['ttft_ratio_passthrough_over_direct'])} |",
    ]


SCENARIO = Scenario(
    name="passthrough",
    title="The models themselves through the ingress (passthrough)",
    result="passthrough.json",
    config="mai-cpu.yaml",
    run=run,
    table=table,
    parameters=Parameters(),
)
