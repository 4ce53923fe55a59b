"""The real Serve app on the emulated model tier: routes at Table 10's shares, cancellations counted in
the engine, queue-depth autoscaling up and back down, and backpressure as fast 503s."""

import asyncio
import json
import threading
import time
from collections import Counter

import httpx
import pytest

from deployments import paper_profile
from deployments.emulated_script import route_of
from harness.driver import drive
from harness.local_server import config_args, deploy, deployment_handle, local_ray, replica_counts

from ..images import data_url

SMALL, LARGE = "small:emulated-qwen3-vl-2b", "large:emulated-qwen3-vl-8b"
ONE_REPLICA = {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 16}


def emulated(dataset="chartqa", time_scale=1.0, small=None, large=None, **app):
    small = {
        "emulation": {"dataset": dataset, "time_scale": time_scale},
        "autoscaling": ONE_REPLICA,
        **(small or {}),
    }
    large = {
        "emulation": {"dataset": dataset, "time_scale": time_scale},
        "autoscaling": ONE_REPLICA,
        **(large or {}),
    }
    return config_args(
        "mai-emulated.yaml",
        {
            "small": small,
            "large": large,
            "ingress": {"autoscaling": {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 64}},
            # The cascade's runs are what these tests check (a burst of one request, a client leaving its
            # run, engine calls and replicas under load): no answer reused.
            "cache": {"enabled": False},
            **app,
        },
    )


def answer_bodies(n, **extra):
    image = data_url()
    return [{"image": image, "question": f"What is the value of bar {i}?", **extra} for i in range(n)]


@pytest.fixture(scope="module")
def base_url():
    with local_ray(num_cpus=2, metrics_push_interval_s=0.5) as url:
        yield url


def test_each_request_settles_where_its_engines_answers_lead_at_the_papers_shares(base_url):
    """Fixed request ids make the run reproducible: with the server's own random ids, 400 requests
    are a sample whose shares stray from Table 10's by chance (a clean-clone run once saw 321 of the
    expected 345 agree_short)."""
    deploy(emulated(dataset="mmbench", time_scale=0))
    outcomes, _ = asyncio.run(
        drive(base_url, "/v1/mai/answer", answer_bodies(400), concurrency=16, request_ids="mmbench-")
    )
    assert all(outcome.status == 200 for outcome in outcomes)
    scripted = {o.index: route_of(f"mmbench-{o.index}", "mmbench", seed=0) for o in outcomes}
    assert {o.index: o.route for o in outcomes} == scripted
    routes = Counter(outcome.route for outcome in outcomes)
    for route, share in zip(
        ("agree_short", "agree_reasoned", "transfer"), paper_profile.ROUTE_SHARES["mmbench"], strict=True
    ):
        assert abs(routes[route] / 400 - share) < 0.06, routes


def test_eager_reasoning_is_cancelled_in_the_engine_when_stage_one_agrees(base_url):
    deploy(emulated(dataset="chartqa", time_scale=1.0))
    small = deployment_handle(SMALL)
    small.reset_stats.remote().result()
    outcomes, _ = asyncio.run(
        drive(base_url, "/v1/mai/answer", answer_bodies(24, options={"eager_reasoning": True}), concurrency=8)
    )
    routes = Counter(outcome.route for outcome in outcomes)
    stats = small.stats.remote().result()
    deadline = time.monotonic() + 10  # a cancel reaches the engine after its request's reply has left
    while stats["running"] and time.monotonic() < deadline:
        time.sleep(0.1)
        stats = small.stats.remote().result()
    assert stats["calls"]["reasoning"] == 24  # eager: every request started reasoning with stage 1
    assert routes["agree_short"] > 0
    assert stats["cancelled"] == routes["agree_short"]  # exactly the ones that agreed early


def test_a_client_that_disconnects_cancels_the_model_calls_in_flight(base_url):
    deploy(emulated(dataset="chartqa", time_scale=1.0))
    small = deployment_handle(SMALL)
    small.reset_stats.remote().result()
    body = {"image": data_url(), "question": "What is the value of the red bar?", "policy": "small-reason"}
    with pytest.raises(httpx.ReadTimeout):  # reasoning takes seconds on the 2B profile; leave after 1 s
        httpx.post(f"{base_url}/v1/mai/answer", json=body, timeout=httpx.Timeout(30, read=1.0))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and small.stats.remote().result()["cancelled"] < 1:
        time.sleep(0.5)
    stats = small.stats.remote().result()
    assert stats["calls"]["reasoning"] == 1 and stats["cancelled"] == 1 and stats["completed"] == 0, stats


def test_small_and_large_scale_up_under_load_and_back_down(base_url):
    scaling = {
        "min_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 1,
        "upscale_delay_s": 1,
        "downscale_delay_s": 3,
        "look_back_period_s": 2,
        "metrics_interval_s": 0.5,  # reported often enough to fill the look-back window
    }
    # The large model mostly writes short answers here, so its queue is shallower: a lower target.
    large_scaling = {**scaling, "target_ongoing_requests": 0.5}
    deploy(
        emulated(
            dataset="chartqa",
            time_scale=1.0,
            small={"autoscaling": scaling},
            large={"autoscaling": large_scaling},
        )
    )
    assert replica_counts()[SMALL] == 1 and replica_counts()[LARGE] == 1

    samples: list[dict] = []
    scaled, stop = threading.Event(), threading.Event()
    load_limit_s = 120

    def sample() -> None:
        while not stop.is_set():
            samples.append(replica_counts())
            if samples[-1][SMALL] >= 2 and samples[-1][LARGE] >= 2:
                scaled.set()
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    started = time.monotonic()
    try:
        # Load until both have scaled up (new replicas take a while to start on 2 cores), at most 120 s.
        # Every other request asks for the large model's reasoning: under the cascade alone its queue
        # is shallow (most requests stop at stage 1) and whether it scales depended on the machine.
        cascade, large_reason = answer_bodies(10000), answer_bodies(10000, policy="large-reason")
        outcomes, _ = asyncio.run(
            drive(
                base_url,
                "/v1/mai/answer",
                [body for pair in zip(cascade, large_reason, strict=True) for body in pair],
                concurrency=24,
                until=lambda: scaled.is_set() or time.monotonic() - started > load_limit_s,
            )
        )
    finally:
        stop.set()
        sampler.join()
    assert scaled.is_set(), samples[-1]
    # How many requests finished depends on how fast the new replicas start, not on the product.
    assert outcomes and all(outcome.status == 200 for outcome in outcomes)

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and (replica_counts()[SMALL] > 1 or replica_counts()[LARGE] > 1):
        time.sleep(1)
    assert replica_counts()[SMALL] == 1 and replica_counts()[LARGE] == 1


def test_a_full_queue_is_a_fast_503_with_retry_after(base_url):
    overloaded = {
        "max_ongoing_requests": 1,
        "max_queued_requests": 1,
        "autoscaling": {"min_replicas": 1, "max_replicas": 1, "target_ongoing_requests": 1},
        "emulation": {"dataset": "chartqa", "time_scale": 60.0},
    }  # >= 2 s per answer
    deploy(emulated(dataset="chartqa", time_scale=60.0, large=overloaded))
    body = {"image": data_url(), "question": "What is the value?", "policy": "large"}

    async def burst():
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            return await asyncio.gather(*(http.post("/v1/mai/answer", json=body) for _ in range(8)))

    responses = asyncio.run(burst())
    rejected = [response for response in responses if response.status_code == 503]
    assert len(rejected) >= 5  # one running, one queued, the rest turned away
    for response in rejected:
        assert response.headers["retry-after"] == "5"
        assert response.json()["error"]["code"] == "model_unavailable"
        assert response.elapsed.total_seconds() < 1.0  # turned away at once, not after a queue wait
    served = [response for response in responses if response.status_code == 200]
    assert served and min(response.elapsed.total_seconds() for response in served) > 2.0
    assert len(served) + len(rejected) == len(responses)


def test_locust_headless_run_is_bounded_and_reports_each_route(base_url, tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    # Locust's users are clients as real ones are: the answer cache as the configs ship it.
    deploy(emulated(dataset="chartqa", time_scale=0.1, cache={"enabled": True}))
    locust = Path(sys.executable).with_name("locust")
    root = Path(__file__).resolve().parents[2]
    started = time.monotonic()
    run = subprocess.run(
        [
            str(locust),
            "-f",
            str(root / "loadtest" / "locustfile.py"),
            "--headless",
            "--host",
            base_url,
            "--users",
            "8",
            "--spawn-rate",
            "8",
            "--run-time",
            "60s",
            "--max-requests",
            "80",
            "--json-file",
            str(tmp_path / "run"),
            "--only-summary",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert time.monotonic() - started < 50  # stopped by --max-requests, not by --run-time
    stats = json.loads((tmp_path / "run.json").read_text())
    rows = {row["name"]: row for row in stats}
    posts = sum(row["num_requests"] for row in stats if row["method"] == "POST")
    assert 80 <= posts < 90
    assert all(row["num_failures"] == 0 for row in rows.values())
    # Every answer is reported again under the route it took: the route rows add up to the answers.
    # Which routes a run meets is the emulated script's draw over the ids the server makes; the
    # paper's most common exit (agree_short, 72 % on ChartQA) is among them.
    routes = {name: row for name, row in rows.items() if name.startswith("route ")}
    assert sum(row["num_requests"] for row in routes.values()) == posts
    assert "route agree_short" in routes
    # The chat-mix users' requests, each under its own name, and the passthrough route beside the cascade's.
    chat = {name for name in rows if name.startswith("chat ")}
    assert chat and "route passthrough" in rows

    refused = subprocess.run(
        [
            str(locust),
            "-f",
            str(root / "loadtest" / "locustfile.py"),
            "--headless",
            "--host",
            "http://10.0.0.1:8000",
            "--users",
            "1",
            "--run-time",
            "5s",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode != 0 and "only targets loopback hosts" in refused.stderr


def test_the_capacity_model_answers_passthrough_requests_at_the_profiles_speed(base_url):
    """The emulated engine's passthrough (a capacity model, not the product): a streamed request for the
    model itself arrives token chunk by token chunk, its first after about Table 3's TTFT, its length
    under max_tokens; n choices; a client that leaves mid-stream cancels the emulated decode."""
    deploy(emulated(dataset="chartqa", time_scale=1.0))
    large = deployment_handle(LARGE)
    large.reset_stats.remote().result()
    body = {
        "model": "emulated-qwen3-vl-8b",
        "messages": [{"role": "user", "content": "Write a poem about charts."}],
        "max_tokens": 48,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    started = time.monotonic()
    arrivals, usage = [], None
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200 and response.headers["x-mai-route"] == "passthrough"
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                    arrivals.append((time.monotonic() - started, chunk["choices"][0]["delta"]["content"]))
                usage = chunk.get("usage") or usage
    ttft_s = paper_profile.ttft_ms("8b", usage["prompt_tokens"]) / 1000
    assert len(arrivals) > 2 and arrivals[0][0] >= ttft_s * 0.9 and arrivals[-1][0] > arrivals[0][0]
    assert usage["completion_tokens"] == len("".join(text for _, text in arrivals).split()) <= 48
    whole = {key: value for key, value in body.items() if key != "stream_options"} | {"stream": False}
    two = httpx.post(f"{base_url}/v1/chat/completions", json=whole | {"n": 2}, timeout=60).json()
    assert len(two["choices"]) == 2
    long = body | {"max_tokens": 4000}
    with httpx.stream("POST", f"{base_url}/v1/chat/completions", json=long, timeout=60) as response:
        next(line for line in response.iter_lines() if '"content"' in line)
    deadline = time.monotonic() + 10
    while large.stats.remote().result()["cancelled"] < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    stats = large.stats.remote().result()
    assert stats["calls"]["passthrough"] == 3 and stats["cancelled"] == 1


def test_mai_eval_runs_policies_resumes_and_writes_the_tables(base_url, tmp_path):
    import json

    from evaluation.cli import main

    deploy(emulated(dataset="chartqa", time_scale=0))
    data, out = tmp_path / "charts.jsonl", tmp_path / "out"
    assert main(["convert", "charts", "--out", str(data), "--limit", "24"]) == 0
    command = [
        "run",
        str(data),
        "--url",
        base_url,
        "--policies",
        "mai,mai-large,mai-transfer",
        "--out",
        str(out),
        "--concurrency",
        "6",
        "--no-progress",
    ]
    assert main(command) == 0

    results = json.loads((out / "results.json").read_text())["policies"]
    assert all(results[policy]["answered"] == 24 and results[policy]["errors"] == 0 for policy in results)
    assert set(results["mai"]["routes"]) <= {"agree_short", "agree_reasoned", "transfer"}
    assert sum(results["mai"]["routes"].values()) == 24
    assert results["mai-large"]["routes"] == {"single": 24}
    assert results["mai-transfer"]["routes"] == {"transfer": 24}
    assert results["mai-transfer"]["tokens_per_call"]["small"]["reasoning"] > 0
    assert results["mai-transfer"]["calls_per_request"]["large"] == {"transfer": 1.0}
    assert results["mai-transfer"]["speedup"] == 1.0 and results["mai"]["speedup"] > 0
    assert {path.name for path in out.iterdir()} >= {
        "results.md",
        "results.csv",
        "results.json",
        "accuracy_latency.png",
    }

    # Resume: what is answered is not asked again; what was lost (here: cut from the file) is.
    predictions = out / "predictions" / "mai.jsonl"
    lines = predictions.read_text().splitlines()
    predictions.write_text("\n".join(lines[:-5]) + "\n")
    segments_before = len((out / "runs.jsonl").read_text().splitlines())
    assert main(command) == 0
    segments = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert len(segments) == segments_before + 1 and segments[-1] == segments[-1] | {
        "policy": "mai",
        "requests": 5,
    }
    assert len(predictions.read_text().splitlines()) == 24
    assert json.loads((out / "results.json").read_text())["policies"]["mai"]["segments"] == 2


def test_calibration_reads_the_engines_confidences_and_the_server_honours_the_rule(base_url, tmp_path):
    """The emulated engines' confidences are a script (a share of stage-1 agreements drawn less sure),
    so this proves the plumbing, not a calibration: logprobs reach the trace, mai-eval calibrate replays
    every rule and writes a cascade section the config accepts, and a strict min_confidence sends
    agreements on to reasoning on the served app."""
    import json

    import yaml

    from evaluation.cli import main
    from serve_app.config import AppConfig

    deploy(emulated(dataset="pope", time_scale=0))
    data, out = tmp_path / "charts.jsonl", tmp_path / "calibration"
    assert main(["convert", "charts", "--out", str(data), "--limit", "60"]) == 0
    status = main(["calibrate", str(data), "--url", base_url, "--out", str(out), "--no-progress"])
    summary = json.loads((out / "calibration.json").read_text())
    assert status == 0 and summary["questions"] == 60 and summary["left_out"] == []
    assert summary["front"] and summary["chosen"] is not None and len(summary["rules"]) > 10
    section = yaml.safe_load((out / "cascade.yaml").read_text())
    config = AppConfig.model_validate(emulated(dataset="pope", time_scale=0) | section)
    assert config.cascade.min_confidence == summary["chosen"]["rule"]["min_confidence"]
    stages = [json.loads(line) for line in (out / "predictions" / "mai-large.jsonl").read_text().splitlines()]
    assert all(0 < row["stages"][0]["confidence"] <= 1 for row in stages)

    runs = tmp_path / "runs"
    assert (
        main(
            [
                "run",
                str(data),
                "--url",
                base_url,
                "--out",
                str(runs),
                "--no-progress",
                "--policies",
                "mai,mai-strict=mai:min_confidence=0.99",
            ]
        )
        == 0
    )
    results = json.loads((runs / "results.json").read_text())["policies"]
    short = {name: results[name]["routes"].get("agree_short", 0) for name in ("mai", "mai-strict")}
    assert short["mai-strict"] < short["mai"]
    strict_rows = [
        json.loads(line) for line in (runs / "predictions" / "mai-strict.jsonl").read_text().splitlines()
    ]
    checks = [check for row in strict_rows for check in row["checks"]]
    assert checks and all(check["min_confidence"] == 0.99 for check in checks)


def test_fuzzing_the_api_from_its_openapi_schema_finds_no_server_error(base_url):
    from loadtest.fuzz import fuzz

    deploy(emulated(dataset="chartqa", time_scale=0, security={"openapi": True}))
    replicas = replica_counts()
    report = fuzz(base_url, examples=30)
    assert not report.violations, report.violations[:5]
    operations = {operation for operation, _, _, _ in report.counts}
    assert {"POST /v1/chat/completions", "POST /v1/mai/answer", "GET /v1/models"} <= operations
    statuses = Counter()
    for (_, _, status, _), count in report.counts.items():
        statuses[status] += count
    assert statuses[200] > 0 and statuses[400] > 0  # answered paths and refused ones were both reached
    assert replica_counts() == replicas  # no replica crashed or was replaced
    body = {"image": data_url(), "question": "What is the value?", "policy": "cascade"}
    assert httpx.post(f"{base_url}/v1/mai/answer", json=body, timeout=30).status_code == 200


def test_stage_affinity_keeps_each_requests_stages_on_one_replica_per_model(base_url):
    """Two replicas per model, escalating requests with eager plans (two calls of one request to the
    small model at once, where Serve's base router stalls) and audits: every stage of a request to one
    model ran on one replica, the trace names it, and the requests spread over both replicas."""
    two = {"min_replicas": 2, "max_replicas": 2, "target_ongoing_requests": 16}
    deploy(
        emulated(
            dataset="mmmu",
            time_scale=0.02,
            small={"autoscaling": two},
            large={"autoscaling": two},
            cascade={"audit": {"rate": 1.0}},
        )
    )

    async def ask_all():
        async with httpx.AsyncClient(base_url=base_url, timeout=60) as http:
            bodies = answer_bodies(32, options={"plan": "eager"})
            replies = await asyncio.gather(
                *(
                    # ids of our own: which requests the script escalates is then fixed (12 of 32)
                    http.post("/v1/mai/answer", json=body, headers={"x-request-id": f"affinity-{i}"})
                    for i, body in enumerate(bodies)
                )
            )
        return [reply.json() for reply in replies if reply.status_code == 200]

    traces = [reply["trace"] for reply in asyncio.run(ask_all())]
    assert len(traces) == 32
    used: dict[str, set] = {"small": set(), "large": set()}
    for trace in traces:
        for model in used:
            replicas = {
                stage["replica"]
                for stage in trace["stages"]
                if stage["model"] == model and stage["status"] == "ok"
            }
            assert len(replicas) <= 1 and None not in replicas, trace["stages"]
            used[model] |= replicas
    escalated = [t for t in traces if any(s["name"] == "transfer_large" for s in t["stages"])]
    assert escalated, "no request reached the transfer"
    assert all(len(replicas) == 2 for replicas in used.values()), used
