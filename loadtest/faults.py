"""Fault drills under bounded locust load on the emulated config; writes bench/results/faults.json.

Per fault, on a fresh deployment (two replicas of every deployment): locust sends requests for
``--run-time`` seconds; ``--fault-at`` seconds in, the fault is injected; when locust stops, the app
must answer ``RECOVERY_REQUESTS`` requests normally (no degraded route), without any restart by hand.

Faults: a small-model replica killed, a large-model replica killed, an ingress replica killed, the
large model made slower than its stage timeout (and made fast again halfway through the rest).

    python -m loadtest.faults                      # all faults, about 6 minutes on 2 cores
    python -m loadtest.faults --only kill_small --run-time 30
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from harness.datasets import sample_png_data_url
from harness.local_server import (
    config_args,
    deploy,
    deployment_handle,
    local_ray,
    replica_actors,
    replica_ids,
)
from harness.paths import RESULTS
from harness.provenance import provenance
from harness.results import shown, write_result
from loadtest.fates import FATES

SMALL, LARGE, INGRESS = "small:emulated-qwen3-vl-2b", "large:emulated-qwen3-vl-8b", "MAIIngress"
FAULTS = ("kill_small", "kill_large", "kill_ingress", "slow_large")
RECOVERY_REQUESTS = 20
TWO = {"min_replicas": 2, "max_replicas": 2, "target_ongoing_requests": 16}
CONFIG = "mai-emulated.yaml"  # the drills' base config, with the overrides of ``app_args``


def app_args(request_timeout_s: float) -> dict[str, Any]:
    model = {"emulation": {"dataset": "chartqa", "time_scale": 0.2}, "autoscaling": TWO}
    return config_args(
        CONFIG,
        {
            "small": model,
            "large": model,
            "ingress": {"autoscaling": TWO},
            "cascade": {"timeouts": {"short_s": 2, "reasoning_s": 10, "stage2_s": 2, "transfer_s": 4}},
            "request_timeout_s": request_timeout_s,
            # The cascade's runs are what the drills measure (locust draws records again, the recovery
            # check asks one question twenty times): no answer reused.
            "cache": {"enabled": False},
        },
    )


def kill_one(deployment: str) -> str:
    import ray

    name = replica_actors(deployment)[0]
    ray.kill(ray.get_actor(name, namespace="serve"), no_restart=True)
    return name


def set_delay(deployment: str, seconds: float, replicas: int = 2) -> None:
    """Every replica of an emulated deployment gets the delay (calls land on random replicas)."""
    handle = deployment_handle(deployment)
    reached: set[str] = set()
    deadline = time.monotonic() + 30
    while len(reached) < replicas and time.monotonic() < deadline:
        reached.add(handle.inject_delay.remote(seconds).result())


def inject(fault: str, run_time_s: float, fault_at_s: float) -> str:
    if fault == "kill_small":
        return f"killed {kill_one(SMALL)}"
    if fault == "kill_large":
        return f"killed {kill_one(LARGE)}"
    if fault == "kill_ingress":
        return f"killed {kill_one(INGRESS)}"
    set_delay(LARGE, 3.0)  # past short_s = 2 s
    threading.Timer((run_time_s - fault_at_s) / 2, set_delay, args=(LARGE, 0.0)).start()
    return "large model 3 s slower per call (stage timeout 2 s), restored halfway through the rest"


def run_locust(
    base_url: str, run_time_s: int, users: int, request_timeout_s: float, out: Path
) -> dict[str, int]:
    locust = Path(sys.executable).with_name("locust")
    run = subprocess.run(
        [
            str(locust),
            "-f",
            str(Path(__file__).resolve().parent / "locustfile.py"),
            "--headless",
            "--host",
            base_url,
            "--users",
            str(users),
            "--spawn-rate",
            str(users),
            "--run-time",
            f"{run_time_s}s",
            "--max-requests",
            "1000000",
            "--request-timeout",
            str(request_timeout_s),
            "--json-file",
            str(out),
            "--only-summary",
            # The VQA traffic only: every one of its requests is counted under its fate (the chat
            # mix's passthrough requests are not, and would count as sent but never as answered).
            "VQAUser",
        ],
        capture_output=True,
        text=True,
        timeout=run_time_s + request_timeout_s + 120,
    )
    if run.returncode not in (0, 1):  # 1: some requests failed, which is what is being counted
        raise RuntimeError(f"locust exited with {run.returncode}: {run.stderr[-2000:]}")
    rows = json.loads(Path(f"{out}.json").read_text())
    counts = {
        row["name"].removeprefix("fate "): row["num_requests"]
        for row in rows
        if row["name"].startswith("fate ")
    }
    counts["sent"] = sum(row["num_requests"] for row in rows if row["method"] == "POST")
    counts["failed_statuses"] = {
        row["name"].removeprefix("failed with status "): row["num_requests"]
        for row in rows
        if row["name"].startswith("failed with status ")
    }
    return counts


def recovered(base_url: str) -> dict[str, Any]:
    """Whether the app answers ``RECOVERY_REQUESTS`` requests in a row normally once the load has stopped
    (within 120 s), and how long getting them took."""
    body = {
        "image": sample_png_data_url(),
        "question": "What is the value of the red bar?",
        "policy": "cascade",
    }
    started = time.monotonic()
    normal = 0
    while time.monotonic() - started < 120 and normal < RECOVERY_REQUESTS:
        try:
            response = httpx.post(f"{base_url}/v1/mai/answer", json=body, timeout=60)
            ok = response.status_code == 200 and not response.json()["route"].startswith("degraded_")
        except httpx.HTTPError:
            ok = False
        normal = normal + 1 if ok else 0
        if not ok:
            time.sleep(1)
    return {
        "recovered": normal >= RECOVERY_REQUESTS,
        "recovery_check_s": round(time.monotonic() - started, 1),
    }


def replicas_changed(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, Any]:
    """Which replicas (actor names, which carry Serve's replica ids) are gone after the drill and
    which are new: a killed replica must be replaced, and nothing else should have died."""

    def difference(a: dict[str, list[str]], b: dict[str, list[str]]) -> dict[str, list[str]]:
        return {
            d: sorted(set(names) - set(b.get(d, [])))
            for d, names in a.items()
            if set(names) - set(b.get(d, []))
        }

    return {"replicas_gone": difference(before, after), "replicas_new": difference(after, before)}


def drill(
    base_url: str, fault: str, run_time_s: int, fault_at_s: float, users: int, request_timeout_s: float
) -> dict[str, Any]:
    deploy(app_args(request_timeout_s))
    before = replica_ids()
    note: dict[str, str] = {}
    timer = threading.Timer(
        fault_at_s, lambda: note.setdefault("fault", inject(fault, run_time_s, fault_at_s))
    )
    with tempfile.TemporaryDirectory() as folder:
        timer.start()
        counts = run_locust(base_url, run_time_s, users, request_timeout_s, Path(folder) / "locust")
        timer.join()
    row: dict[str, Any] = {
        "fault": fault,
        "what": note.get("fault"),
        "sent": counts.pop("sent"),
        **{fate: counts.get(fate, 0) for fate in FATES},
        "mislabelled": counts.get("mislabelled", 0),
        "failed_statuses": counts.get("failed_statuses", {}),
    }
    row |= recovered(base_url)
    row |= replicas_changed(before, replica_ids())
    print(json.dumps(row), file=sys.stderr)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--only", default=",".join(FAULTS), help=f"comma-separated subset of {', '.join(FAULTS)}"
    )
    parser.add_argument("--run-time", type=int, default=45, help="seconds of load per fault (default 45)")
    parser.add_argument("--fault-at", type=float, default=15.0, help="seconds into the load (default 15)")
    parser.add_argument("--users", type=int, default=8)
    parser.add_argument(
        "--request-timeout", type=float, default=30.0, help="the app's request_timeout_s (default 30)"
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = set(chosen) - set(FAULTS)
    if unknown:
        parser.error(f"unknown fault(s): {', '.join(sorted(unknown))}")
    started = time.time()
    rows = []
    with local_ray(num_cpus=2, metrics_push_interval_s=1.0) as base_url:
        for fault in chosen:
            rows.append(
                drill(base_url, fault, args.run_time, args.fault_at, args.users, args.request_timeout)
            )
    command = ("python -m loadtest.faults " + " ".join(argv if argv is not None else sys.argv[1:])).strip()
    # Client timeout = the app's request timeout + 30 s: a request still open then is "hung".
    result = {
        "settings": {
            "run_time_s": args.run_time,
            "fault_at_s": args.fault_at,
            "users": args.users,
            "request_timeout_s": args.request_timeout,
            "replicas_per_deployment": 2,
            "stage_timeouts_s": {"short": 2, "reasoning": 10, "stage2": 2, "transfer": 4},
        },
        "faults": rows,
    }
    path = write_result(RESULTS / "faults.json", result, provenance(command, config=CONFIG, started=started))
    bad = [
        row["fault"]
        for row in rows
        if row["failed"] or row["hung"] or row["mislabelled"] or not row["recovered"]
    ]
    print(
        f"wrote {shown(path)}" + (f"; targets missed for {', '.join(bad)}" if bad else "; all targets met"),
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
