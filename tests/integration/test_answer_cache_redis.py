"""The answer cache on a real Redis (Debian's ``redis-server``, started by the test on a free loopback
port): ingress replicas in process, over scripted models, sharing it; the server stopped and started
again mid-run; one that never answered at start; an entry that does not parse; TTL and purge."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
import redis

from harness.local_server import free_port
from harness.redis_server import RedisServer
from serve_app.cache.settings import CacheSettings
from serve_app.cache.stores import RedisStore, pattern_of
from serve_app.core.prompts import PromptKind

from ..images import chat_body
from ..unit.fakes import ScriptedVLM
from ..unit.ingress_replica import CONFIG, client_of, replica

S = PromptKind.SIMPLE


class Logged(logging.Handler):
    """What the replica logs (Serve's logger does not propagate to the root's)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def caplog():
    logger, handler = logging.getLogger("ray.serve"), Logged()
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


@pytest.fixture
def server():
    with RedisServer() as running:
        yield running


def config_for(url: str, **settings):
    return CONFIG.model_copy(update={"cache": CacheSettings(url=url, **settings)})


def redis_replica(url: str, name: str = "replica-a", **settings):
    small, large = ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"})
    return replica(small, large, config_for(url, **settings), cache=True, name=name), small


def test_two_replicas_share_one_redis_and_its_keys_hold_no_text(server):
    a, small_a = redis_replica(server.url, "replica-a")
    b, small_b = redis_replica(server.url, "replica-b")
    first = client_of(a).post("/v1/chat/completions", json=chat_body("Is the secret shape red?"))
    second = client_of(b).post("/v1/chat/completions", json=chat_body("is the secret shape red"))
    assert first.headers["x-mai-cache"] == "miss" and second.headers["x-mai-cache"] == "hit"
    assert len(small_b.calls) == 0 and first.json()["choices"] == second.json()["choices"]
    names = [name.decode() for name in redis.Redis.from_url(server.url).keys("*")]
    assert len(names) == 1 and names[0].startswith("mai:answer:v1:") and "secret" not in names[0]


def test_entries_expire_after_the_ttl_and_a_purge_removes_them(server):
    async def run():
        store = RedisStore(CacheSettings(url=server.url, ttl_s=0.3))
        await store.put("mai:answer:v1:t1:aa:d1", b"1")
        await store.put("mai:answer:v1:t2:bb:d2", b"2")
        await store.put("mai:answer:v1:t2:cc:d3", b"3")
        assert await store.get("mai:answer:v1:t1:aa:d1") == b"1"
        assert await store.purge(pattern_of(tenant="t2")) == 2
        await asyncio.sleep(0.5)
        assert await store.get("mai:answer:v1:t1:aa:d1") is None
        await store.close()

    asyncio.run(run())


def timed_misses(client, count: int) -> list[float]:
    """``count`` asks of one question, each answered 200 as a miss (the store did not serve it); their
    wall times in seconds."""
    seconds = []
    for _ in range(count):
        started = time.monotonic()
        reply = client.post("/v1/chat/completions", json=chat_body())
        seconds.append(time.monotonic() - started)
        assert reply.status_code == 200 and reply.headers["x-mai-cache"] == "miss"
    return seconds


def test_a_redis_stopped_mid_run_turns_the_cache_off_logged_once_and_back_on(server, caplog):
    ingress, small = redis_replica(server.url, retry_after_s=0.5, lookup_timeout_s=0.1)
    client = client_of(ingress)
    assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "miss"
    server.stop()
    seconds = timed_misses(client, 4)
    failed = [r for r in caplog.records if "failed" in r.getMessage() and "Redis" in r.getMessage()]
    assert len(failed) == 1, [r.getMessage() for r in caplog.records]  # once per outage
    assert max(seconds) < 2.0, seconds  # bounded by the lookup time, never the client's failure
    events = ingress.answers.events()
    assert events["store_error"] >= 1 and events["hit"] == 0
    server.start()
    time.sleep(0.6)  # past retry_after_s: the next call tries the server again
    assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "miss"
    assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "hit"
    assert any("answers again" in r.getMessage() for r in caplog.records)


def test_an_unreachable_redis_starts_the_server_with_the_cache_off_and_says_so(caplog):
    ingress, _ = redis_replica(f"redis://127.0.0.1:{free_port()}/0")
    assert any("starts with the cache off" in r.getMessage() for r in caplog.records)
    client = client_of(ingress)
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 200 and reply.headers["x-mai-cache"] == "miss"
    state = client.get("/v1/mai/stats").json()["cache"]["store_state"]
    assert state["available"] is False and "***" not in state["where"]


def test_an_entry_that_does_not_parse_is_a_miss_and_is_removed(server):
    ingress, _ = redis_replica(server.url)
    client = client_of(ingress)
    client.post("/v1/chat/completions", json=chat_body())
    raw = redis.Redis.from_url(server.url)
    (name,) = raw.keys("*")
    raw.set(name, b"\x00garbage")
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 200 and reply.headers["x-mai-cache"] == "miss"
    assert ingress.answers.events()["unparsable"] == 1
    assert raw.get(name) != b"\x00garbage"  # removed, then kept again by the run


def test_a_password_protected_redis_is_reached_with_the_urls_password_and_never_logged(caplog):
    with RedisServer(password="s3cret-pw") as protected:
        ingress, _ = redis_replica(protected.url)
        client = client_of(ingress)
        client.post("/v1/chat/completions", json=chat_body())
        assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "hit"
        protected.stop()
        client.post("/v1/chat/completions", json=chat_body())
        stats = client.get("/v1/mai/stats").json()["cache"]
    assert "s3cret-pw" not in str(stats) and all("s3cret-pw" not in r.getMessage() for r in caplog.records)


def test_a_slow_redis_delays_a_request_by_the_lookup_bound_at_most(server, caplog):
    ingress, _ = redis_replica(server.url, lookup_timeout_s=0.05, retry_after_s=30)
    client = client_of(ingress)
    client.post("/v1/chat/completions", json=chat_body("Is the shape blue?"))  # connections made
    redis.Redis.from_url(server.url).execute_command("CLIENT", "PAUSE", "3000", "ALL")
    seconds = timed_misses(client, 4)
    assert max(seconds) < 1.0, seconds  # the 3 s pause is not the client's: one bounded lookup each
    events = ingress.answers.events()
    # Three lookups in a row outran the bound (no write after a failed lookup); then it was left alone.
    assert events["store_error"] == 3 and events["store_skipped"] == 1, events
    assert [r.getMessage() for r in caplog.records if "TimeoutError" in r.getMessage()] != []
    assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1


def test_a_full_redis_refuses_writes_alone_and_the_cache_stays_on(server, caplog):
    ingress, _ = redis_replica(server.url)
    client = client_of(ingress)
    raw = redis.Redis.from_url(server.url)
    raw.config_set("maxmemory-policy", "noeviction")
    raw.config_set("maxmemory", "1")  # every write refused: OOM
    refused = client.post("/v1/chat/completions", json=chat_body())
    assert (
        refused.headers["x-mai-cache"] == "miss"
        and refused.json()["mai"]["trace"]["cache"]["stored"] is False
    )
    assert ingress.answers.store.available and ingress.answers.events()["store_error"] == 1
    assert any("refused a call" in r.getMessage() for r in caplog.records)
    raw.config_set("maxmemory", "0")
    assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "miss"
    assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "hit"
