"""What tracing costs, measured two ways (the tracing scenario):

- **In process.** The request_path scenario's request (``cascade_request.py``: a ``mai`` request down
  the cascade, three stage calls, scripted models answering at once; each about an image of its own, so
  that the answer cache misses and the cascade runs) through one in-process ingress, in blocks, with
  tracing off, on at a sampling ratio of 0.01 and on at 1.0, the arms' order rotated from one round to
  the next. Tracing on is what a replica gets: the package's OTLP exporter
  (``serve_app.telemetry.exporter.span_processors``) over HTTP to a real receiver on loopback (its
  decoding shares the machine), behind a parent-based ratio sampler, as Ray Serve's. The spans each
  sampled request makes are counted as they end.
- **On the real stack.** ``serve run configs/mai-cpu.yaml`` in a process of its own per run, tracing
  off, on at 1.0 into a receiver, and on at 1.0 with the collector unreachable (a closed port), the
  same seeded questions at the same concurrency (each run afresh: ``cache: off``), the arms' order
  rotated per repetition.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness.driver import closed_loop
from harness.local_server import free_port, wait_ready
from harness.paths import ROOT
from serve_app.telemetry.exporter import DROPS
from serve_app.telemetry.settings import EXPORTER_PATH, PROXY_GUARD_PATH

from .schedule import rotated
from .side_by_side import block_quantiles
from .summary import quantiles, spread

IN_PROCESS_ARMS = ("off", "0.01", "1.0")
STACK_ARMS = ("off", "on", "unreachable")
STARTUP_S = 420


@contextmanager
def receiver_process(log_dir: Path) -> Iterator[tuple[str, Callable[[], int]]]:
    """A real OTLP receiver (harness/otlp_receiver.py) in a process of its own, so that its decoding
    takes no turn of the measured process's interpreter; yields its endpoint and a count of the spans
    it has written."""
    out = log_dir / "tracing-spans.jsonl"
    out.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.otlp_receiver", "--out", str(out)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()

        def received() -> int:
            return sum(1 for _ in out.open()) if out.exists() else 0

        yield endpoint, received
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


class _Ratio:
    """A root sampler whose ratio the bench changes between blocks (Ray Serve's is fixed per process)."""

    def __init__(self) -> None:
        from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

        self.ratio, self._sampler = 1.0, TraceIdRatioBased(1.0)

    def set(self, ratio: float) -> None:
        from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

        self.ratio, self._sampler = ratio, TraceIdRatioBased(ratio)

    def should_sample(self, *args: Any, **kwargs: Any) -> Any:
        return self._sampler.should_sample(*args, **kwargs)

    def get_description(self) -> str:
        return f"bench ratio {self.ratio}"


@contextmanager
def process_tracing(endpoint: str) -> Iterator[tuple[_Ratio, list[int]]]:
    """This process traced as a replica is: the global tracer provider (set once per process) with
    the package's exporter to ``endpoint``; yields the switchable ratio and a one-item list counting
    the sampled spans ended. Ray Serve's switch (``is_tracing_enabled``) is left to the caller."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased

    from serve_app.telemetry.exporter import span_processors

    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = endpoint
    ratio, ended = _Ratio(), [0]

    class Counting(SpanProcessor):
        def on_end(self, span: Any) -> None:
            ended[0] += 1

    provider = TracerProvider(sampler=ParentBased(ratio))  # type: ignore[arg-type]
    for processor in [*span_processors(), Counting()]:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    try:
        yield ratio, ended
    finally:
        provider.force_flush()


def in_process(requests: int, rounds: int, warm_up: int, log_dir: Path) -> dict[str, Any]:
    """The in-process arms, ``rounds`` blocks of ``requests`` each, interleaved."""
    from ray.serve._private import tracing_utils

    from .tree_worker import _replica, timed

    loop = asyncio.new_event_loop()
    ingress = loop.run_until_complete(_replica())
    blocks: list[dict[str, Any]] = []
    with receiver_process(log_dir) as (endpoint, received), process_tracing(endpoint) as (ratio, ended):
        loop.run_until_complete(timed(ingress, warm_up))
        for round_ in range(rounds):
            for arm in rotated(IN_PROCESS_ARMS, round_):
                tracing_utils._tracing_enabled = arm != "off"
                ratio.set(0.0 if arm == "off" else float(arm))
                gc.collect()
                before = ended[0]
                seconds = loop.run_until_complete(timed(ingress, requests))
                blocks.append(
                    {"arm": arm, "round": round_, "spans": ended[0] - before, **block_quantiles(seconds)}
                )
        tracing_utils._tracing_enabled = False
        ratio.set(1.0)
        bare = bare_span_us()
    loop.close()
    summary: dict[str, Any] = {"requests_per_block": requests, "rounds": rounds, "warm_up": warm_up}
    for arm in IN_PROCESS_ARMS:
        mine = [block for block in blocks if block["arm"] == arm]
        summary[arm] = {q: spread([block[q] for block in mine], 1) for q in ("median_us", "p90_us")}
        summary[arm]["spans_per_request"] = round(sum(b["spans"] for b in mine) / (requests * len(mine)), 3)
    off = summary["off"]
    for arm in IN_PROCESS_ARMS[1:]:
        summary[arm]["over_off"] = {
            q: round(summary[arm][q]["median"] / off[q]["median"], 3) for q in ("median_us", "p90_us")
        }
    summary["blocks"] = blocks
    summary["spans_dropped"] = DROPS.total  # what the exporter could not send at this rate
    # The SDK's own floor: what the spans of one request cost with no attribute and none of this
    # package's code, against the path's time with tracing off.
    spans_per_request = summary["1.0"]["spans_per_request"]
    summary["bare_span_us"] = bare
    summary["bare_spans_over_off"] = round(bare * spans_per_request / off["median_us"]["median"], 3)
    return summary


def bare_span_us(spans: int = 20000) -> float:
    """A sampled span's start and end through the global provider (its processors included), with no
    attribute, in µs: the median of five runs."""
    from opentelemetry import trace

    tracer = trace.get_tracer("bench")
    runs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(spans // 5):
            tracer.start_span("bare").end()
        runs.append((time.perf_counter() - started) / (spans // 5) * 1e6)
    return round(sorted(runs)[2], 2)


def stack_env(arm: str, endpoint: str) -> dict[str, str]:
    """The tracing variables of a stack run (none for ``off``)."""
    if arm == "off":
        return {}
    return {
        "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER_PATH,
        "RAY_SERVE_TRACING_SAMPLING_RATIO": "1.0",
        "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": PROXY_GUARD_PATH,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
    }


@contextmanager
def served(env: Mapping[str, str], log: Path, url: str) -> Iterator[None]:
    """``serve run configs/mai-cpu.yaml`` with ``env`` until the block ends, then its Ray stopped."""
    serve_bin = Path(sys.executable).with_name("serve")
    traced = ("RAY_SERVE_TRACING", "OTEL_")
    clean = {key: value for key, value in os.environ.items() if not key.startswith(traced)}
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(serve_bin), "run", "configs/mai-cpu.yaml"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**clean, "RAY_AUTH_MODE": "disabled", **env},
            start_new_session=True,
            # A background job (nohup, CI) ignores SIGINT and its children inherit that: serve run
            # must see its Ctrl-C.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:

            def alive() -> None:
                if process.poll() is not None:
                    raise RuntimeError(f"serve run exited with {process.returncode}; see {log}")

            wait_ready(url, STARTUP_S, check=alive)
            yield
        finally:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
            # What is left of its session (Ray's processes, the engines' workers), then of its Ray.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            ray = Path(sys.executable).with_name("ray")
            subprocess.run([str(ray), "stop", "--force"], capture_output=True, timeout=120)


async def _ask(http: Any, index: int, body: dict[str, Any]) -> dict[str, Any]:
    started = time.perf_counter()
    reply = await http.post("/v1/mai/answer", json=body)
    return {"status": reply.status_code, "latency_s": time.perf_counter() - started}


def one_stack_run(
    arm: str, payloads: Sequence[dict[str, Any]], concurrency: int, warm_up: int, log: Path
) -> dict[str, Any]:
    """One arm on a fresh stack: warm-up, then every payload once; throughput and latency."""
    url = "http://127.0.0.1:8000"
    with receiver_process(log.parent) as (endpoint, received):
        if arm == "unreachable":
            endpoint = f"http://127.0.0.1:{free_port()}/v1/traces"  # nothing listens there
        with served(stack_env(arm, endpoint), log, url):
            asyncio.run(closed_loop(url, list(payloads[:warm_up]), _ask, concurrency=concurrency))
            time.sleep(6)  # the warm-up's spans exported (a 5 s schedule)
            before = received()
            results, wall_s = asyncio.run(closed_loop(url, list(payloads), _ask, concurrency=concurrency))
            time.sleep(8)  # the last batches' export
            spans = received() - before
    ok = [result["latency_s"] for result in results if result["status"] == 200]
    return {
        "arm": arm,
        "requests": len(results),
        "errors": len(results) - len(ok),
        "requests_per_s": round(len(ok) / wall_s, 3),
        **quantiles(ok, 4),
        "spans_received_per_request": round(spans / len(results), 2) if arm == "on" else None,
    }


def on_stack(
    payloads: Sequence[dict[str, Any]], concurrency: int, repetitions: int, warm_up: int, log: Path
) -> dict[str, Any]:
    """Every stack arm ``repetitions`` times, the order rotated per repetition."""
    runs = [
        one_stack_run(arm, payloads, concurrency, warm_up, log)
        for repetition in range(repetitions)
        for arm in rotated(STACK_ARMS, repetition)
    ]
    summary: dict[str, Any] = {"concurrency": concurrency, "requests_per_run": len(payloads), "runs": runs}
    for arm in STACK_ARMS:
        mine = [run for run in runs if run["arm"] == arm]
        summary[arm] = {
            field: spread([run[field] for run in mine], 4) for field in ("requests_per_s", "p50_s", "p99_s")
        }
        summary[arm]["errors"] = sum(run["errors"] for run in mine)
    for arm in STACK_ARMS[1:]:
        summary[arm]["throughput_over_off"] = round(
            summary[arm]["requests_per_s"]["median"] / summary["off"]["requests_per_s"]["median"], 3
        )
    return summary
