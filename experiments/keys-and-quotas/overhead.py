"""What key checks, quotas and usage accounting cost a request on the in-process path, over the
product's own replica factory and instant scripted models (tests/unit helpers), so the ingress's own
work is all there is to time.

Three arms, interleaved round by round, each round a fresh process of its checkout:
- ``before``: the checkout before keys had names (an API key, no quotas, no ledger);
- ``open``: this checkout without keys (anonymous: the fair share and the local ledger still run);
- ``keyed``: this checkout with a named key with quotas (never reached) and the local ledger.

    python experiments/keys-and-quotas/overhead.py --before-checkout DIR --rounds 7 \
        --out experiments/keys-and-quotas/overhead.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEY = "bench-key"


def measure(mode: str, requests: int) -> list[float]:
    """Per-request seconds of ``requests`` chat completions through one replica's HTTP API."""
    from serve_app.core.prompts import PromptKind
    from tests.images import chat_body
    from tests.unit.fakes import ScriptedVLM
    from tests.unit.ingress_replica import client_of, replica

    kinds = list(PromptKind)
    models = [ScriptedVLM({kind: "[[Yes]]" for kind in kinds}) for _ in range(2)]
    digest = hashlib.sha256(KEY.encode())
    if mode == "keyed":
        from serve_app.edge.keys import KeyRing, NamedKey

        keys = KeyRing.of(
            (
                NamedKey(
                    name="bench",
                    sha256=digest.hexdigest(),
                    requests_per_minute=10**6,
                    tokens_per_minute=10**9,
                ),
            )
        )
    else:
        keys = (digest.digest(),) if mode == "before" else ()
    client = client_of(replica(*models, api_keys=keys))
    headers = {"authorization": f"Bearer {KEY}"} if mode != "open" else {}
    body = chat_body()
    for _ in range(20):  # warm up
        assert client.post("/v1/chat/completions", json=body, headers=headers).status_code == 200
    seconds = []
    for _ in range(requests):
        started = time.perf_counter()
        reply = client.post("/v1/chat/completions", json=body, headers=headers)
        seconds.append(time.perf_counter() - started)
        assert reply.status_code == 200, reply.text
    return seconds


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))] * 1000, 3),
        "n": len(ordered),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before-checkout", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # one round of one arm, in a child process
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(measure(args.arm, args.requests)))
        return 0
    arms = {"before": args.before_checkout, "open": ROOT, "keyed": ROOT}
    rounds: dict[str, list[dict]] = {arm: [] for arm in arms}
    every: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(args.rounds):
        for arm, checkout in arms.items():
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            script = str(Path(__file__).resolve())
            done = subprocess.run(
                [sys.executable, script, "--arm", arm, "--requests", str(args.requests)],
                cwd=checkout,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            values = json.loads(done.stdout.strip().splitlines()[-1])
            rounds[arm].append(summary(values))
            every[arm] += values
    result = {
        "what": "per-request seconds of POST /v1/chat/completions through one in-process replica, instant "
        "scripted models; arms interleaved round by round, each round a fresh process",
        "rounds": args.rounds,
        "requests_per_round": args.requests,
        "arms": {
            arm: {
                "median_of_round_medians_ms": statistics.median(r["median_ms"] for r in rounds[arm]),
                "round_medians_ms": [r["median_ms"] for r in rounds[arm]],
                "median_of_round_p90s_ms": statistics.median(r["p90_ms"] for r in rounds[arm]),
                "round_p90s_ms": [r["p90_ms"] for r in rounds[arm]],
                "all": summary(every[arm]),
            }
            for arm in arms
        },
    }
    text = json.dumps(result, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
