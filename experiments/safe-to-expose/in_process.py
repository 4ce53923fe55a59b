"""What a hostile caller costs and moves, measured in process on one checkout (run it once per
checkout, with that checkout first on the path), over the product's own replica factory and scripted
models (the project's tests/unit helpers):

- the time a body that made the old depth regex backtrack costs ``parse_json``, by size;
- the question classes 1,000 distinct task tags create (audit book, plan book);
- audits: how many early exits a flood of one reused request id gets audited, and the most audits
  in flight at once (the models take 50 ms a call, so audits overlap);
- whether requests that force their plan train the plan table (observations recorded).

    PYTHONPATH=<checkout> python experiments/safe-to-expose/in_process.py > <checkout>.json
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
import time


def parse_json_function():
    try:
        from serve_app.edge.body import parse_json
    except ImportError:  # before: in jobs.py
        from serve_app.edge.jobs import parse_json
    return parse_json


def body_costs() -> dict[str, float]:
    from serve_app.config import Limits
    from serve_app.edge.errors import RequestError

    parse_json = parse_json_function()
    costs = {}
    for size in (8 * 1024, 16 * 1024, 32 * 1024, 1024 * 1024, 16 * 1024 * 1024):
        body = b"[" * 40 + b'"' + b'\\"' * ((size - 41) // 2)
        if size > 64 * 1024 and _backtracks(parse_json):
            costs[str(size)] = None  # quadratic: 1 MB would take minutes, 16 MB days
            continue
        started = time.perf_counter()
        try:
            parse_json(body, Limits())
        except RequestError:
            pass
        costs[str(size)] = round(time.perf_counter() - started, 4)
    return costs


def _backtracks(parse_json) -> bool:
    import inspect

    return "_nesting_depth" in inspect.getsource(inspect.getmodule(parse_json))


def sampled_id(seed: int = 0, rate: float = 0.05) -> str:
    for n in range(100_000):
        digest = hashlib.sha256(f"{seed}:steer-{n}".encode()).digest()
        if int.from_bytes(digest[:8], "big") / 2**64 < rate:
            return f"steer-{n}"
    raise RuntimeError("none")


def replica_over(config_update: dict, delay_s: float = 0.0):
    from serve_app.config import AppConfig
    from serve_app.core.prompts import PromptKind
    from tests.unit.fakes import ScriptedVLM
    from tests.unit.ingress_replica import CONFIG, client_of, replica

    config = AppConfig.model_validate(CONFIG.model_dump() | config_update)
    kinds = list(PromptKind)
    delays = dict.fromkeys(kinds, delay_s)
    small = ScriptedVLM({kind: "[[Yes]]" for kind in kinds}, delays=delays)
    large = ScriptedVLM({kind: "[[Yes]]" for kind in kinds}, delays=delays)
    ingress = replica(small, large, config)
    return ingress, client_of(ingress)


def body(**mai):
    from tests.images import chat_body

    payload = chat_body("Is the shape red?")
    if mai:
        payload["mai"] = mai
    return payload


def classes_from_tags(tags: int = 1000) -> dict[str, int]:
    ingress, client = replica_over({})
    for i in range(tags):
        assert client.post("/v1/chat/completions", json=body(task=f"tag-{i}")).status_code == 200
    stats = client.get("/v1/mai/stats").json()
    return {
        "tags_sent": tags,
        "audit_book_classes": len(ingress.auditor.book.classes),
        "plan_book_classes": len(ingress.plans.book.classes),
        "stats_classes": len(stats["classes"]),
    }


def audits_under_reused_id(requests: int = 200) -> dict[str, int]:
    """Requests, 24 at a time, with one id the public seeded hash samples, over models taking 50 ms a
    call: audits sampled, and the most running at once."""
    audit = {"rate": 0.05, "max_small_queue": 10_000, "max_large_queue": 10_000}
    ingress, _ = replica_over({"cascade": {"audit": audit}}, delay_s=0.05)
    request_id = sampled_id()
    peak = 0

    async def run() -> None:
        nonlocal peak
        import httpx

        transport = httpx.ASGITransport(app=ingress.__serve_build_asgi_app__())
        async with httpx.AsyncClient(transport=transport, base_url="http://in-process") as client:
            clients = asyncio.Semaphore(24)  # requests at once, as one client under the per-address bound

            async def one() -> None:
                async with clients:
                    reply = await client.post(
                        "/v1/chat/completions", json=body(), headers={"x-request-id": request_id}
                    )
                assert reply.status_code == 200, reply.text

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, len(ingress.auditor.running))
                    await asyncio.sleep(0.005)

            watcher = asyncio.create_task(watch())
            await asyncio.gather(*(one() for _ in range(requests)))
            while ingress.auditor.running:
                await asyncio.sleep(0.01)
            watcher.cancel()

    asyncio.run(run())
    book = ingress.auditor.book
    audited = sum(entry.audited for entry in book.classes.values())
    return {
        "requests": requests,
        "audited": audited,
        "not_run": dict(book.not_run),
        "peak_in_flight": peak,
    }


def forced_plans_train(requests: int = 50) -> dict[str, int]:
    ingress, client = replica_over({})
    for _ in range(requests):
        reply = client.post("/v1/chat/completions", json=body(options={"plan": "reason-first"}))
        assert reply.status_code == 200, reply.text
    observations = sum(len(entries) for entries in ingress.plans.book.classes.values())
    return {"forced_requests": requests, "observations_recorded": observations}


def main() -> None:
    import subprocess

    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "checkout": commit,
        "command": "PYTHONPATH=<checkout> python experiments/safe-to-expose/in_process.py (in the checkout)",
        "parse_json_seconds_by_body_bytes": body_costs(),
        "classes_from_1000_tags": classes_from_tags(),
        "audits_under_one_reused_request_id": audits_under_reused_id(),
        "forced_plans": forced_plans_train(),
    }
    json.dump(result, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
