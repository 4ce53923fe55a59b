"""Quotas, fair shares and usage per API key: the ledger's windows, the share of a busy replica, and
what a request is told and billed through the ingress."""

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serve_app.core.admission import Bill, Capacity, FairShare, Ledger, Quota, Window
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
    ledger.record("b", Bill(tokens={"large": 100}), 4)
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
    ledger.record("a", Bill(tokens={"large": 300}), 1)
    assert ledger.admit("a", quota, 2) is None  # 300 used + this one's 300 expected
    assert ledger.admit("a", quota, 2) is None  # 300 + two running x 300 = 900
    refusal = ledger.admit("a", quota, 2)  # a third: 300 + 3 x 300 = 1200, over 1100
    assert refusal is not None and refusal.quota == "tokens_per_minute"
    ledger.record("a", Bill(tokens={"large": 100}), 3)  # one ended: mean 260, deviation 80
    assert ledger.admit("a", quota, 3) is None  # 400 used + (one running + this one) x 340 = 1080


def test_a_reservation_never_told_of_its_end_lapses():
    ledger = Ledger()
    quota = Quota(tokens_per_minute=500)
    ledger.record("a", Bill(tokens={"large": 200}), 0)
    assert ledger.admit("a", quota, 1) is None and ledger.admit("a", quota, 1) is not None
    assert ledger.admit("a", quota, 1 + 600.5) is None  # the untold one lapsed, the window emptied


def test_a_key_alone_holds_what_the_models_take_and_its_flood_is_ranked_behind():
    fair = FairShare(Capacity(4))
    assert [fair.enter("flood", 1.0, 0.0) for _ in range(5)] == [0, 1, 2, 3, None]
    assert fair.enter("trickle", 1.0, 0.1) == 0  # under its share: first in the engines' queues
    open_api = FairShare(Capacity(4))  # its one caller is everyone: never held back
    assert [open_api.enter("anonymous", 1.0, 0.0, hold_alone=False) for _ in range(12)] == list(range(12))


def test_an_idle_keys_share_is_not_held_back_from_a_busy_one():
    """Work-conserving: a key that sent one request and went idle leaves a busy key what the replica
    has room for; its share binds only once the replica is at its capacity (or someone waits)."""
    fair = FairShare(Capacity(4), window_s=10.0)
    assert fair.enter("idle", 1.0, 0.0) == 0
    fair.leave("idle", 0.2)  # answered: nothing of its work left on the replica
    assert [fair.enter("busy", 1.0, 0.3) for _ in range(5)] == [0, 1, 2, 3, None]  # room for 4
    assert fair.enter("idle", 1.0, 0.4) == 0  # back: under its share, let in at once, first in line
    fair.leave("busy", 0.5)
    assert fair.enter("busy", 1.0, 0.6) is None  # at capacity: the share (half of 4) binds, busy has 3
    fair.leave("idle", 0.7)
    assert fair.enter("busy", 1.0, 0.8) == 3  # room again, nobody waits: busy takes it
    fair.leave("busy", 0.9)
    assert fair.enter("busy", 1.0, 10.5) == 3 and set(fair.last_sent) == {"busy"}  # idle's window over
    assert fair.enter("busy", 1.0, 10.6) is None  # alone, it holds what the models take (4)


def test_past_its_share_a_key_takes_what_nobody_else_waits_for():
    fair = FairShare(Capacity(4))
    assert fair.enter("a", 1.0, 0.0) == 0 and fair.enter("b", 1.0, 0.0) == 0
    assert fair.enter("a", 1.0, 0.1) == 1  # its share is 2
    assert fair.enter("a", 1.0, 0.2) is not None  # past it, but the replica has room and nobody waits
    assert fair.total == 4 and fair.contended()
    fair.sending["a"].add(0.3)  # a flood, not a trickle
    for _ in range(20):
        fair.sending["a"].add(0.3)
    assert fair.enter("a", 1.0, 0.3) is None  # at capacity: past its share, it waits
    fair.leave("a", 0.4)
    fair.wait("b", 1.0, 0.5)  # another key's request waits
    assert fair.enter("a", 1.0, 0.5) is None  # room, but someone else waits for it
    fair.stop_waiting("b")
    assert fair.enter("a", 1.0, 0.6) is not None


def test_a_waiting_request_goes_before_its_keys_newer_ones():
    fair = FairShare(Capacity(2))
    assert [fair.enter("a", 1.0, 0.0) for _ in range(3)] == [0, 1, None]
    fair.wait("a", 1.0, 0.0)
    fair.leave("a", 0.1)
    assert fair.enter("a", 1.0, 0.2) is None  # a newer request: behind the one waiting
    assert fair.enter("a", 1.0, 0.2, waited=True) == 1  # the one waiting goes first
    fair.stop_waiting("a")
    assert fair.waiting == {} and fair.weights == {"a": 1.0}


def test_keys_contend_when_several_are_active_and_the_replica_is_at_its_capacity():
    fair = FairShare(Capacity(2))
    fair.enter("a", 1.0, 0.0)
    fair.enter("a", 1.0, 0.0)
    assert not fair.contended()  # at capacity, but alone
    fair.leave("a", 0.1)
    fair.enter("b", 1.0, 0.2)
    assert fair.contended()
    fair.leave("b", 0.3)
    assert not fair.contended()  # both active, one request in flight


def test_refusals_do_not_raise_the_answer_rate_a_trickle_is_judged_by():
    fair = FairShare(Capacity(4))
    for n in range(100):  # a key's cheap bad requests: let in, then refused for what they sent
        fair.enter("noise", 1.0, n / 100)
        fair.leave("noise", n / 100, answered=False)
    assert fair.answering.value(1.0) == 0.0


def test_a_key_back_after_a_pause_keeps_its_sending_rate():
    fair = FairShare(Capacity(4))
    for n in range(300):
        fair.enter("flood", 1.0, n / 30)
        fair.leave("flood", n / 30)
    fair.enter("trickle", 1.0, 20.0)  # the flood has nothing on the replica: no longer active
    assert set(fair.weights) == {"trickle"}
    assert fair.sending["flood"].value(21.0) > 5  # but its rate is remembered, decaying


def test_a_heavier_key_gets_a_larger_share():
    fair = FairShare(Capacity(8))
    fair.enter("light", 1.0, 0.0)
    fair.enter("heavy", 3.0, 0.0)
    assert fair.share("heavy") == 6.0 and fair.share("light") == 2.0
    # its share of 6, then the replica's last room (nobody else waits), then at capacity it waits
    assert [fair.enter("heavy", 3.0, 0.1) for _ in range(7)] == [0, 0, 1, 1, 1, 2, None]


def test_a_key_sending_under_its_share_of_the_answers_is_let_in_past_its_requests_in_flight():
    fair = FairShare(Capacity(4))
    now = 0.0
    for _ in range(200):  # the replica answers 20 a second, the trickle sends 1 a second
        now += 0.05
        assert fair.enter("flood", 1.0, now) is not None
        fair.leave("flood", now)
    for n in range(3):  # the trickle's slow requests pile up beyond its share (2)
        assert fair.enter("trickle", 1.0, now + n) is not None
    assert fair.enter("flood", 1.0, now + 3) is not None and fair.enter("flood", 1.0, now + 3) is not None
    assert fair.enter("flood", 1.0, now + 3) is None  # past capacity: the flood is held to its share
    for _ in range(30):  # a flood cannot pass as a trickle: it sends more than its share
        assert fair.enter("flood", 1.0, now + 3) is None


@given(
    st.lists(
        st.tuples(st.sampled_from("abcd"), st.sampled_from([0.5, 1.0, 2.0]), st.floats(0, 5), st.booleans()),
        max_size=80,
    )
)
def test_the_active_keys_are_those_with_work_or_lately_sent_and_their_weight_is_the_sum(steps):
    fair = FairShare(Capacity(8), window_s=3.0)
    now, weights, held, waiting = 0.0, {}, [], []
    for key, weight, wait, leave in steps:
        now += wait
        if leave and held:
            fair.leave(held.pop(0), now)
        elif leave and waiting:
            fair.stop_waiting(waiting.pop(0))
        else:
            weights[key] = weight
            if fair.enter(key, weight, now) is not None:
                held.append(key)
            elif len(waiting) < 4:
                fair.wait(key, weight, now)
                waiting.append(key)
        assert set(fair.weights) == set(fair.last_sent) >= set(held) | set(waiting)
        assert fair.active_weight == pytest.approx(sum(weights[k] for k in fair.weights))
        assert fair.total == len(held) and sum(fair.waiting.values()) == len(waiting)


def test_the_capacity_falls_where_requests_slow_each_other_and_holds_where_they_do_not():
    cpu, gpu, blind = Capacity(16), Capacity(16), Capacity(16)
    for capacity in (cpu, gpu):
        for n in range(20):
            capacity.answered("early_exit", 0.10, alone=True, in_flight=1, now=n)
    for n in range(200):
        in_flight = 1 + n % 16
        cpu.answered("early_exit", 0.10 * in_flight, alone=False, in_flight=in_flight, now=20 + n)
        gpu.answered("early_exit", 0.11, alone=False, in_flight=in_flight, now=20 + n)
        blind.answered("early_exit", 0.10 * in_flight, alone=False, in_flight=in_flight, now=20 + n)
    assert cpu.current() == 1 and gpu.current() == 16
    assert blind.current() == 16  # never answered alone: nothing to compare with
    for n in range(400):  # the load eases: answers as fast as alone, the replica at its capacity
        cpu.answered("early_exit", 0.10, alone=False, in_flight=cpu.current(), now=300 + n)
    assert cpu.current() >= 8
    fixed = Capacity(16, fixed=3)
    fixed.answered("early_exit", 0.1, alone=True, in_flight=1, now=0)
    fixed.answered("early_exit", 9.0, alone=False, in_flight=3, now=1)
    assert fixed.current() == 3


def test_two_keys_share_no_more_than_a_key_alone_may_hold():
    """A configured capacity above the models' (ingress.capacity 64, the models take 8) shares the
    models' 8: two keys hold 4 each, never 32, while a key alone is held to 8."""
    fair = FairShare(Capacity(8, fixed=64))
    assert fair.enter("a", 1.0, 0.0) is not None and fair.enter("b", 1.0, 0.0) is not None
    assert fair.share("a") == 4


def key(name: str, **settings) -> NamedKey:
    return NamedKey(name=name, sha256="0" * 63 + "1", **settings)


async def test_through_the_access_a_quota_is_a_429_naming_it_with_retry_after():
    access = Access(KeyRing.of(()), capacity=Capacity(64))
    caller = Caller(key("team-a", requests_per_minute=3, models=("mai",)))
    with pytest.raises(RequestError, match="may not use model 'mai-large'"):
        async with access.admitted(caller) as grant:
            grant.use("mai-large")  # a request all the same: a client's error, not the server's
    for n in range(2):
        async with access.admitted(caller) as grant:
            grant.use("mai")
            assert grant.priority == 0
            if n == 0:
                grant.bill = Bill(tokens={"qwen3-vl-8b": 40}, early_exit=True)
    with pytest.raises(RequestError) as caught:
        async with access.admitted(caller):
            pass
    error = caught.value
    assert error.status == 429 and error.param == "requests_per_minute"
    assert "requests_per_minute of 3" in error.message and int(error.headers["Retry-After"]) >= 1
    usage = await access.usage()
    assert usage["team-a"]["requests"] == 3 and usage["team-a"]["refused"] == 1
    assert usage["team-a"]["tokens"] == {"qwen3-vl-8b": 40} and usage["team-a"]["early_exits"] == 1
    assert usage["team-a"]["errors"] == 1  # the last said nothing of its end: counted as failed


async def test_a_keys_priority_class_and_share_set_its_engine_priority():
    access = Access(KeyRing.of(()), capacity=Capacity(64))
    caller = Caller(key("batch", priority=5, weight=2.0))
    async with access.admitted(caller) as first, access.admitted(caller) as second:
        async with access.admitted(caller) as third:
            assert (first.priority, second.priority, third.priority) == (5, 5, 6)
    assert access.fair.in_flight == {}


async def test_the_share_is_released_when_a_request_fails():
    access = Access(KeyRing.of(()), capacity=Capacity(2))
    caller = Caller(key("a"))
    with pytest.raises(RuntimeError):
        async with access.admitted(caller):
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
            NamedKey(name="team-a", sha256=sha("alpha"), requests_per_minute=3, models=("mai",)),
            NamedKey(name="ops", sha256=sha("omega"), admin=True),
            NamedKey(name="viewer", sha256=sha("vega")),
        )
    )
    ingress = replica(ScriptedVLM(simple), ScriptedVLM(simple), api_keys=ring)
    client = client_of(ingress)
    team_a, ops = {"authorization": "Bearer alpha"}, {"authorization": "Bearer omega"}
    other = client.post("/v1/chat/completions", json=chat_body(model="mai-large"), headers=team_a)
    assert other.status_code == 403  # let in, then refused for its model: a request all the same
    statuses = [client.post("/v1/chat/completions", json=chat_body(), headers=team_a).status_code]
    statuses.append(client.post("/v1/chat/completions", json=chat_body(), headers=team_a).status_code)
    assert statuses == [200, 200]
    # Over its quota a request is refused before its body is read: this one's is not even JSON.
    refused = client.post("/v1/chat/completions", content=b"{not json", headers=team_a)
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
    assert "requests_per_minute of 3" in refused.json()["error"]["message"]
    models = client.get("/v1/models", headers=team_a).json()
    assert [entry["id"] for entry in models["data"]] == ["mai"] and models["mai"]["access"] == "keys"
    stats = client.get("/v1/mai/stats", headers=team_a)  # admitted like any request: over its quota
    assert stats.status_code == 429 and stats.json()["error"]["param"] == "requests_per_minute"
    viewer = client.get("/v1/mai/stats", headers={"authorization": "Bearer vega"})
    assert viewer.status_code == 200 and "usage" not in viewer.json()  # not an admin
    usage = client.get("/v1/mai/stats", headers=ops).json()["usage"]["team-a"]
    assert usage["requests"] == 3 and usage["refused"] == 2 and usage["early_exits"] == 2
    assert usage["errors"] == 0 and sum(usage["tokens"].values()) > 0
    outcomes = [outcome for key, outcome, _ in ingress.metrics.keys if key == "team-a"]
    assert outcomes == ["rejected", "answered", "answered", "requests_per_minute", "requests_per_minute"]


def test_a_native_answer_is_refused_for_its_model_before_its_image_is_read():
    """A key that may not use the policy's model gets the 403 whatever its image names: no URL is
    looked at (here an address no allowlist admits, which would be a 400) and nothing fetched."""
    from serve_app.core.prompts import PromptKind

    from .fakes import ScriptedVLM
    from .ingress_replica import client_of, replica

    simple = {PromptKind.SIMPLE: "[[yes]]"}
    ring = KeyRing.of((NamedKey(name="team-a", sha256=sha("alpha"), models=("mai",)),))
    client = client_of(replica(ScriptedVLM(simple), ScriptedVLM(simple), api_keys=ring))
    body = {"image": "http://169.254.169.254/latest/meta-data", "question": "Is it red?", "policy": "small"}
    refused = client.post("/v1/mai/answer", json=body, headers={"authorization": "Bearer alpha"})
    assert (
        refused.status_code == 403 and "may not use model 'mai-small'" in refused.json()["error"]["message"]
    )
    allowed = client.post(
        "/v1/mai/answer", json=body | {"policy": "cascade"}, headers={"authorization": "Bearer alpha"}
    )
    assert allowed.status_code == 400  # its own model: then the image is read, and refused


async def test_bodies_being_read_are_bounded_per_key_not_per_address():
    from serve_app.config import Limits

    from .fakes import ScriptedVLM
    from .ingress_replica import CONFIG, replica

    config = CONFIG.model_copy(update={"limits": Limits(max_body_reads_per_client=1)})
    ring = KeyRing.of((NamedKey(name="flood", sha256=sha("f")), NamedKey(name="trickle", sha256=sha("t"))))
    ingress = replica(ScriptedVLM({}), ScriptedVLM({}), config, api_keys=ring)
    arrived = asyncio.Event()

    class Slow:  # a request from one address whose body arrives when told
        client = type("Client", (), {"host": "10.0.0.9"})()
        headers: dict = {}

        async def stream(self):
            await arrived.wait()
            yield b"{}"

    flood, trickle = ring.caller_named("flood"), ring.caller_named("trickle")
    reading = asyncio.create_task(ingress._payload(Slow(), flood))
    await asyncio.sleep(0)
    with pytest.raises(RequestError) as caught:  # the flood's second body: over its bound
        await ingress._payload(Slow(), flood)
    assert caught.value.status == 429
    second = asyncio.create_task(ingress._payload(Slow(), trickle))  # another key: not held back
    await asyncio.sleep(0)
    arrived.set()
    assert await reading == {} and await second == {}


async def test_a_burst_past_the_share_waits_its_turn_and_is_answered_not_refused():
    """A key's burst of 12 on a replica whose models take 8, after another key's single request has
    answered: 8 run at once, 4 wait their turn, and all 12 are answered."""
    other, busy = Caller(key("other")), Caller(key("busy"))
    access = Access(KeyRing.of((other.key, busy.key)), capacity=Capacity(8), wait_s=5.0)
    async with access.admitted(other) as grant:
        grant.bill = Bill(tokens={"m": 1})
    running, most = 0, 0

    async def request() -> int:
        nonlocal running, most
        async with access.admitted(busy) as grant:
            running += 1
            most = max(most, running)
            await asyncio.sleep(0.05)
            running -= 1
            grant.bill = Bill(tokens={"m": 1})
            return grant.priority

    ranks = await asyncio.gather(*(request() for _ in range(12)))
    assert len(ranks) == 12 and most == 8
    assert access.fair.in_flight == {} and access.fair.waiting == {}


async def test_a_turn_not_come_within_the_wait_is_a_429_fair_share_and_leaves_nothing_behind():
    caller = Caller(key("a"))
    access = Access(KeyRing.of((caller.key,)), capacity=Capacity(2), wait_s=0.2)
    async with access.admitted(caller), access.admitted(caller):
        with pytest.raises(RequestError) as caught:
            async with access.admitted(caller):
                pass
        assert access.fair.waiting == {}
    error = caught.value
    assert error.status == 429 and error.param == "fair_share"
    assert "waited 0.2 s for its turn" in error.message
    assert access.fair.in_flight == {} and access.fair.waiting == {}
    refused_at_once = Access(KeyRing.of((caller.key,)), capacity=Capacity(1), wait_s=0.0)
    async with refused_at_once.admitted(caller):
        with pytest.raises(RequestError, match="its share while other work waits; retry"):
            async with refused_at_once.admitted(caller):
                pass
