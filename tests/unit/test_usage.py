"""Quotas, fair shares and usage per API key: the ledger's windows, the share of a busy replica, and
what a request is told and billed through the ingress."""

import asyncio

import pytest

from serve_app.core.fair_share import FairShare
from serve_app.core.usage import Ledger, Outcome, Quota, Window
from serve_app.edge.access import Access
from serve_app.edge.errors import RequestError
from serve_app.edge.keys import Caller, KeyRing, NamedKey


def test_a_window_holds_the_last_minute_in_seconds():
    window = Window()
    window.add(0.5, 3)
    window.add(30.2, 2)
    assert window.total(59.9) == 5
    assert window.total(60.0) == 2  # the first second has left
    assert window.seconds_until_under(31.0, 5) == 0
    assert window.seconds_until_under(31.0, 2) == 59  # the bucket of second 30 leaves at 90


def test_the_ledger_admits_under_the_quotas_and_names_the_one_exceeded():
    ledger = Ledger()
    quota = Quota(requests_per_minute=3, tokens_per_minute=100)
    assert [ledger.admit("a", quota, t) for t in (0, 1, 2)] == [None, None, None]
    refusal = ledger.admit("a", quota, 3)
    assert (refusal.quota, refusal.limit, refusal.retry_after_s) == ("requests_per_minute", 3, 57)
    assert ledger.admit("b", quota, 3) is None  # another key has its own
    ledger.record("b", Outcome(tokens={"large": 100}), 4)
    refusal = ledger.admit("b", quota, 5)
    assert (refusal.quota, refusal.limit) == ("tokens_per_minute", 100)
    assert ledger.admit("a", quota, 60.5) is None  # a minute on
    usage = ledger.snapshot(65)
    assert usage["a"]["requests"] == 4 and usage["a"]["refused"] == 1
    assert usage["b"]["tokens"] == {"large": 100} and usage["b"]["last_minute"]["tokens"] == 0


def test_running_requests_reserve_the_keys_mean_tokens_so_the_quota_holds():
    ledger = Ledger()
    quota = Quota(tokens_per_minute=1100)
    assert ledger.admit("a", quota, 0) is None  # no mean yet: nothing reserved
    ledger.record("a", Outcome(tokens={"large": 300}), 1)
    assert ledger.admit("a", quota, 2) is None  # 300 used + this one's 300 expected
    assert ledger.admit("a", quota, 2) is None  # 300 + two running x 300 = 900
    refusal = ledger.admit("a", quota, 2)  # a third: 300 + 3 x 300 = 1200, over 1100
    assert refusal is not None and refusal.quota == "tokens_per_minute"
    ledger.record("a", Outcome(tokens={"large": 100}), 3)  # one ended: mean 260, deviation 80
    assert ledger.admit("a", quota, 3) is None  # 400 used + (one running + this one) x 340 = 1080


def test_a_reservation_never_told_of_its_end_lapses():
    ledger = Ledger()
    quota = Quota(tokens_per_minute=500)
    ledger.record("a", Outcome(tokens={"large": 200}), 0)
    assert ledger.admit("a", quota, 1) is None and ledger.admit("a", quota, 1) is not None
    assert ledger.admit("a", quota, 1 + 600.5) is None  # the untold one lapsed, the window emptied


def test_a_full_replica_leaves_room_for_a_trickle_and_ranks_a_flood_behind_it():
    fair = FairShare(capacity=8)
    ranks = [fair.enter("flood", 1.0) for _ in range(12)]
    assert ranks == list(range(12))  # alone, a key is let in as before, each request ranked lower
    assert fair.enter("trickle", 1.0) == 0  # the trickle comes in, first in the engines' queues
    assert fair.enter("flood", 1.0) is None  # busy and shared: the flood is held to its share (4)
    for _ in range(8):
        fair.leave("flood")
    assert fair.enter("flood", 1.0) is None  # still 4 in flight: its share
    fair.leave("flood")
    assert fair.enter("flood", 1.0) == 3
    fair.leave("trickle")
    assert fair.share("heavy", 3.0) > fair.share("light", 1.0)


def key(name: str, **settings) -> NamedKey:
    return NamedKey(name=name, sha256="0" * 63 + "1", **settings)


async def test_through_the_access_a_quota_is_a_429_naming_it_with_retry_after():
    access = Access(KeyRing.of(()), capacity=64)
    caller = Caller(key("team-a", requests_per_minute=2, models=("mai",)))
    for n in range(2):
        async with access.admitted(caller, "mai") as grant:
            assert grant.priority == 0
            if n == 0:
                grant.outcome = Outcome(tokens={"qwen3-vl-8b": 40}, early_exit=True)
    with pytest.raises(RequestError) as caught:
        async with access.admitted(caller, "mai"):
            pass
    error = caught.value
    assert error.status == 429 and error.param == "requests_per_minute"
    assert "requests_per_minute of 2" in error.message and int(error.headers["Retry-After"]) >= 1
    with pytest.raises(RequestError, match="may not use model 'mai-large'"):
        async with access.admitted(caller, "mai-large"):
            pass
    usage = await access.usage()
    assert usage["team-a"]["requests"] == 2 and usage["team-a"]["refused"] == 1
    assert usage["team-a"]["tokens"] == {"qwen3-vl-8b": 40} and usage["team-a"]["early_exits"] == 1
    assert usage["team-a"]["errors"] == 1  # the second said nothing of its end: counted as failed


async def test_a_keys_priority_class_and_share_set_its_engine_priority():
    access = Access(KeyRing.of(()), capacity=64)
    caller = Caller(key("batch", priority=5, weight=2.0))
    async with access.admitted(caller, "mai") as first, access.admitted(caller, "mai") as second:
        async with access.admitted(caller, "mai") as third:
            assert (first.priority, second.priority, third.priority) == (5, 5, 6)
    assert access.fair.in_flight == {}


async def test_the_share_is_released_when_a_request_fails():
    access = Access(KeyRing.of(()), capacity=2)
    caller = Caller(key("a"))
    with pytest.raises(RuntimeError):
        async with access.admitted(caller, "mai"):
            raise RuntimeError("the request failed")
    assert access.fair.in_flight == {}
    await asyncio.sleep(0)


def sha(key: str) -> str:
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()


def test_through_the_api_a_key_is_held_to_its_quota_its_models_and_billed():
    from serve_app.core.prompts import PromptKind

    from ..images import chat_body
    from .fakes import ScriptedVLM
    from .ingress_replica import client_of, replica

    simple = {PromptKind.SIMPLE: "[[yes]]"}
    ring = KeyRing.of(
        (
            NamedKey(name="team-a", sha256=sha("alpha"), requests_per_minute=2, models=("mai",)),
            NamedKey(name="ops", sha256=sha("omega"), admin=True),
        )
    )
    ingress = replica(ScriptedVLM(simple), ScriptedVLM(simple), api_keys=ring)
    client = client_of(ingress)
    team_a, ops = {"authorization": "Bearer alpha"}, {"authorization": "Bearer omega"}
    assert [
        client.post("/v1/chat/completions", json=chat_body(), headers=team_a).status_code for _ in range(2)
    ] == [
        200,
        200,
    ]
    refused = client.post("/v1/chat/completions", json=chat_body(), headers=team_a)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "requests_per_minute of 2" in refused.json()["error"]["message"]
    other = client.post("/v1/chat/completions", json=chat_body(model="mai-large"), headers=team_a)
    assert other.status_code == 403
    models = client.get("/v1/models", headers=team_a).json()
    assert [entry["id"] for entry in models["data"]] == ["mai"] and models["mai"]["access"] == "keys"
    assert "usage" not in client.get("/v1/mai/stats", headers=team_a).json()  # not an admin
    usage = client.get("/v1/mai/stats", headers=ops).json()["usage"]["team-a"]
    assert usage["requests"] == 2 and usage["refused"] == 1 and usage["early_exits"] == 2
    assert sum(usage["tokens"].values()) > 0
    outcomes = [outcome for key, outcome, _ in ingress.metrics.keys if key == "team-a"]
    assert outcomes == ["answered", "answered", "requests_per_minute"]
