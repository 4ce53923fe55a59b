"""The answer cache: what makes two requests one question (keys), the in-process store, and an
ingress replica over scripted models that reuses, coalesces, isolates tenants and stays honest about
what it learns (serve_app/cache/). Redis itself: tests/unit/test_redis_cache.py."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from pydantic import ValidationError

from serve_app.cache.keys import (
    CacheMode,
    cache_key,
    normal_question,
    passthrough_key,
    requested_mode,
    tenant_of,
    uncached_reason,
)
from serve_app.cache.reuse import MemoryStore, decode, encode
from serve_app.cache.settings import CacheSettings
from serve_app.cache.stores import pattern_of
from serve_app.config import AppConfig
from serve_app.core.contracts import CascadeOptions, Decoding, Question
from serve_app.core.prompts import PromptKind
from serve_app.edge.keys import Caller, KeyRing, NamedKey

from ..images import chat_body, data_url
from .fakes import ScriptedVLM
from .ingress_replica import CONFIG, client_of, replica

S, R = PromptKind.SIMPLE, PromptKind.REASONING


def sha(key: str) -> str:
    import hashlib

    return hashlib.sha256(key.encode()).hexdigest()


def question(text: str = "Is the shape red?", **fields) -> Question:
    return Question(text, images=(data_url(),), kind="yes_no", **fields)


def key_of(q: Question, options: CascadeOptions | None = None, tenant: str = "t", identity: str = "i"):
    return cache_key(q, options or CascadeOptions(), task=None, tenant=tenant, identity=identity)


# -- keys --------------------------------------------------------------------------------------------


def test_the_same_question_in_another_case_or_punctuation_meets_and_a_number_does_not():
    assert key_of(question("Is the shape red?")) == key_of(question("  is the SHAPE   red"))
    assert normal_question("Are there 3.5 apples?") == "are there 3.5 apples"
    assert normal_question("Compute 3!") != normal_question("compute 3")  # a factorial
    assert normal_question("STRASSE") != normal_question("straße")
    assert key_of(question("Are there 3 apples?")) != key_of(question("Are there 4 apples?"))
    assert key_of(question("Is it red?", choices=("yes", "no"))) != key_of(question("Is it red?"))


def test_every_answer_changing_option_the_image_the_tenant_and_the_identity_are_in_the_key():
    base = key_of(question())
    assert key_of(question(), CascadeOptions(min_confidence=0.5)) != base
    assert key_of(question(), tenant="other") != base
    assert key_of(question(), identity="another model") != base
    other_image = dataclasses.replace(question(), images=(data_url(color=(0, 0, 255)),))
    assert key_of(other_image) != base
    # A stage timeout does not change the answer.
    assert key_of(question(), CascadeOptions.model_validate({"timeouts": {"short_s": 3}})) == base


def test_a_sampled_request_has_no_key_unless_it_names_a_seed():
    sampled = CascadeOptions(decoding=Decoding(temperature=0.7))
    assert key_of(question(), sampled) is None
    assert key_of(question(), CascadeOptions(decoding=Decoding(temperature=0.7, seed=4))) is not None


def test_a_key_holds_digests_never_the_question_or_the_image():
    q = question("Is the secret diagram red?")
    name = key_of(q).name
    assert "secret" not in name and data_url().split(",")[1][:16] not in name
    assert all(part.replace(".", "").isalnum() for part in name.split(":"))


def test_cache_control_and_the_mai_option_make_one_mode():
    assert requested_mode(None, None) is CacheMode.USE
    assert requested_mode(None, "No-Cache") is CacheMode.REFRESH
    assert requested_mode(None, "max-age=0, no-store") is CacheMode.NO_STORE
    assert requested_mode(None, "no-store,no-cache") is CacheMode.OFF
    assert requested_mode(CacheMode.USE, "no-cache") is CacheMode.USE  # the option wins


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("http://cache:6379", "scheme 'http'"),
        ("redis://:hunter2@cache:99999/0", "port"),
        ("redis:///0", "no host"),
        ("redis://cache:6379/zero", "database 'zero'"),
    ],
)
def test_a_malformed_redis_url_is_refused_at_start_naming_it_without_its_password(url, needle):
    with pytest.raises(ValidationError, match=needle) as raised:
        CacheSettings(url=url)
    assert "hunter2" not in str(raised.value)


# -- the in-process store --------------------------------------------------------------------------


def test_the_memory_store_expires_evicts_least_recent_first_and_stays_within_its_bound():
    now = [0.0]
    store = MemoryStore(max_bytes=4096, ttl_s=10, clock=lambda: now[0])

    async def run():
        for n in range(20):
            await store.put(f"mai:answer:v1:t:-:{n}", b"x" * 400)
            assert store.bytes <= 4096
        assert store.evictions > 0 and await store.get("mai:answer:v1:t:-:0") is None
        assert await store.get("mai:answer:v1:t:-:19") == b"x" * 400
        now[0] = 11.0
        assert await store.get("mai:answer:v1:t:-:19") is None  # past its TTL

    asyncio.run(run())


def test_a_purge_takes_a_tenants_entries_or_an_images_or_all():
    store = MemoryStore(max_bytes=1 << 20, ttl_s=60)
    a, b = tenant_of("team-a", sha("alpha"), shared=False), tenant_of("team-b", sha("beta"), shared=False)

    async def run():
        await store.put(f"mai:answer:v1:{a}:{'1' * 64}:d1", b"1")
        await store.put(f"mai:answer:v1:{a}:{'2' * 64}:d2", b"2")
        await store.put(f"mai:answer:v1:{b}:{'2' * 64}.{'3' * 64}:d3", b"3")
        assert await store.purge(pattern_of(image="2" * 64)) == 2
        assert await store.purge(pattern_of(tenant=a)) == 1
        assert await store.purge(pattern_of()) == 0 and store.usage()["entries"] == 0

    asyncio.run(run())


def test_an_entry_round_trips_and_garbage_is_an_entry_error():
    ingress = replica(ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}))
    outcome = asyncio.run(ingress.chat(chat_body(), None))
    result, created = decode(encode(outcome.result, 123.0))
    assert created == 123.0 and result.answer == outcome.result.answer
    assert result.trace.to_dict() | {"cache": None} == outcome.result.trace.to_dict() | {"cache": None}
    for garbage in (b"not json", b'{"created": 1, "result": {"answer": 3}}', b"[]"):
        with pytest.raises(ValueError):
            decode(garbage)


# -- an ingress replica with its cache --------------------------------------------------------------


def cached(small, large, config: AppConfig = CONFIG, **kwargs):
    return replica(small, large, config, cache=True, **kwargs)


def with_cache(**settings) -> AppConfig:
    return CONFIG.model_copy(update={"cache": CacheSettings(**settings)})


def test_the_second_identical_request_is_a_hit_that_learns_nothing_and_bills_no_tokens():
    small, large = ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"})
    ingress = cached(small, large)
    client = client_of(ingress)
    first = client.post("/v1/chat/completions", json=chat_body("Is the shape red?"))
    calls = len(small.calls) + len(large.calls)
    observed = ingress.plans.book.appended.copy(), ingress.auditor.book.classes["yes_no"].requests
    second = client.post("/v1/chat/completions", json=chat_body("is the shape red"))
    assert first.headers["x-mai-cache"] == "miss" and second.headers["x-mai-cache"] == "hit"
    assert int(second.headers["age"]) >= 0 and second.json()["mai"]["trace"]["cache"]["status"] == "hit"
    assert first.json()["choices"] == second.json()["choices"]
    assert len(small.calls) + len(large.calls) == calls  # no model was asked again
    assert (ingress.plans.book.appended, ingress.auditor.book.classes["yes_no"].requests) == observed
    stats = client.get("/v1/mai/stats").json()
    assert stats["cache"]["events"]["hit"] == 1 and stats["cache"]["events"]["miss"] == 1
    assert stats["usage"]["anonymous"]["reused"] == 1


def test_no_cache_runs_afresh_no_store_keeps_nothing_and_a_sampled_request_is_never_reused():
    small, large = ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"})
    client = client_of(cached(small, large))

    def ask(headers=None, **extra):
        reply = client.post("/v1/chat/completions", json=chat_body(**extra), headers=headers or {})
        return reply.headers["x-mai-cache"]

    assert ask({"cache-control": "no-store"}) == "miss"
    assert ask({"cache-control": "no-cache"}) == "miss"  # ran afresh, and kept
    assert ask() == "hit"
    assert ask(mai={"cache": "refresh"}) == "miss"
    assert ask(mai={"cache": "off"}) == "bypass"
    assert ask(temperature=0.8) == "bypass" and ask(temperature=0.8) == "bypass"
    reply = client.post("/v1/chat/completions", json=chat_body(mai={"cache": "sometimes"}))
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "mai.cache"


def test_a_keys_answers_are_its_own_unless_the_cache_is_shared():
    ring = KeyRing.of(
        (NamedKey(name="team-a", sha256=sha("alpha")), NamedKey(name="team-b", sha256=sha("beta")))
    )
    for shared, expected in ((False, "miss"), (True, "hit")):
        small, large = ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"})
        client = client_of(cached(small, large, with_cache(shared=shared), api_keys=ring))
        a = client.post("/v1/chat/completions", json=chat_body(), headers={"authorization": "Bearer alpha"})
        b = client.post("/v1/chat/completions", json=chat_body(), headers={"authorization": "Bearer beta"})
        assert a.headers["x-mai-cache"] == "miss" and b.headers["x-mai-cache"] == expected


def test_a_burst_of_identical_requests_runs_once_and_a_leaver_does_not_end_the_run():
    small = ScriptedVLM({S: "[[no]]", R: "It is red. [[yes]]"}, {S: 0.05, R: 0.2})
    large = ScriptedVLM({S: "[[yes]]"}, {S: 0.05})
    ingress = cached(small, large)

    async def burst():
        leader = asyncio.ensure_future(ingress.chat(chat_body(), "leader"))
        await asyncio.sleep(0.01)
        others = [asyncio.ensure_future(ingress.chat(chat_body(), f"r{n}")) for n in range(9)]
        await asyncio.sleep(0.01)
        leader.cancel()  # the first client leaves: the run goes on for the others
        return await asyncio.gather(*others)

    outcomes = asyncio.run(burst())
    records = [outcome.result.trace.cache for outcome in outcomes]
    assert all(r.status == "coalesced" and r.coalesced_with == "leader" for r in records), records
    assert [call.prompt_kind for call in small.calls].count(R) == 1  # one run for ten requests
    assert {outcome.result.answer for outcome in outcomes} == {"yes"}
    assert all(outcome.decision is None for outcome in outcomes)
    assert ingress.answers.events()["coalesced"] == 9


def test_an_answer_served_despite_a_failed_stage_is_not_kept():
    from serve_app.core.contracts import EngineUnavailableError

    small = ScriptedVLM({S: "[[no]]", R: EngineUnavailableError("down")})
    large = ScriptedVLM({S: "[[yes]]", PromptKind.TRANSFER: "[[yes]]"})
    client = client_of(cached(small, large))
    first = client.post("/v1/chat/completions", json=chat_body()).json()["mai"]
    assert first["route"] == "degraded_no_reasoning"  # the large model's answer, the reasoning failed
    assert first["trace"]["cache"]["status"] == "miss" and first["trace"]["cache"]["stored"] is False
    assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "miss"


def test_an_entry_that_does_not_parse_is_a_miss_and_is_removed():
    small, large = ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"})
    ingress = cached(small, large)
    client = client_of(ingress)
    client.post("/v1/chat/completions", json=chat_body())
    store = ingress.answers.store
    (name,) = list(store._entries)
    asyncio.run(store.put(name, b'{"created": "soon", "result": 7}'))
    reply = client.post("/v1/chat/completions", json=chat_body())
    assert reply.status_code == 200 and reply.headers["x-mai-cache"] == "miss"
    assert ingress.answers.events()["unparsable"] == 1
    assert client.post("/v1/chat/completions", json=chat_body()).headers["x-mai-cache"] == "hit"


def test_only_an_admin_purges_and_a_purge_names_what_it_removes():
    ring = KeyRing.of(
        (NamedKey(name="ops", sha256=sha("omega"), admin=True), NamedKey(name="team-a", sha256=sha("alpha")))
    )
    small, large = ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"})
    client = client_of(cached(small, large, api_keys=ring))
    team, ops = {"authorization": "Bearer alpha"}, {"authorization": "Bearer omega"}
    client.post("/v1/chat/completions", json=chat_body(), headers=team)
    refused = client.post("/v1/mai/cache/purge", json={"all": True}, headers=team)
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "not_admin"
    bad = client.post("/v1/mai/cache/purge", json={"image_sha256": "not hex"}, headers=ops)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "image_sha256"
    assert client.post("/v1/mai/cache/purge", json={"key": "ops"}, headers=ops).json()["purged"] == 0
    purged = client.post("/v1/mai/cache/purge", json={"key": "team-a"}, headers=ops).json()
    assert purged == {"purged": 1, "store": "memory"}
    assert (
        client.post("/v1/chat/completions", json=chat_body(), headers=team).headers["x-mai-cache"] == "miss"
    )


def in_process_holder():
    """The statistics holder's logic behind an object shaped as its deployment handle."""
    from serve_app.fleet.stats_holder import StatsHolder

    logic = StatsHolder(CONFIG.cascade.audit, CONFIG.cascade.adaptive)

    class Method:
        def __init__(self, name):
            self.name = name

        async def remote(self, *args):
            return getattr(logic, self.name)(*args)

    class Holder:
        report, snapshot, purge = Method("report"), Method("snapshot"), Method("purge")

    return Holder()


def test_the_replicas_cache_counts_are_summed_by_the_stats_holder():
    holder = in_process_holder()
    replicas = [
        cached(ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}), stats=holder, name=n) for n in "ab"
    ]
    anonymous = Caller(NamedKey(name="anonymous", sha256="0" * 64, admin=True))

    async def run():
        for ingress in replicas:
            for _ in range(2):
                await ingress.chat(chat_body(), None)
        await replicas[0]._report()
        return await replicas[1].stats(anonymous)

    cache = asyncio.run(run())["cache"]
    assert cache["replicas"] == 2 and cache["events"]["hit"] == 2 and cache["events"]["miss"] == 2


def test_a_purge_through_one_replica_reaches_every_replicas_memory_with_its_next_report():
    holder = in_process_holder()
    ring = KeyRing.of((NamedKey(name="ops", sha256=sha("omega"), admin=True),))
    ops = {"authorization": "Bearer omega"}

    def started(name):
        ingress = cached(
            ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}), stats=holder, name=name, api_keys=ring
        )
        return ingress, client_of(ingress)

    def ask(client, question="Is the shape red?"):
        return client.post("/v1/chat/completions", json=chat_body(question), headers=ops).headers[
            "x-mai-cache"
        ]

    (a, to_a), (b, to_b) = started("a"), started("b")
    assert ask(to_a) == ask(to_b) == "miss"
    for ingress in (a, b):
        asyncio.run(ingress._report())  # each takes its cursor of this holder
    purged = to_a.post("/v1/mai/cache/purge", json={"all": True}, headers=ops).json()
    assert purged == {
        "purged": 1,
        "store": "memory",
        "others_within_s": CONFIG.cascade.audit.report_interval_s,
    }
    assert ask(to_a) == "miss" and ask(to_a, "Is the shape blue?") == "miss"  # a purged itself at once
    asyncio.run(b._report())
    assert ask(to_b) == "miss"  # b took the order with its report
    asyncio.run(a._report())
    assert ask(to_a) == ask(to_a, "Is the shape blue?") == "hit"  # a does not purge again what it sent
    # A replica started after the purge takes no order made before it: its entries stay.
    c, to_c = started("c")
    assert ask(to_c) == "miss"
    asyncio.run(c._report())
    assert ask(to_c) == "hit"


def test_purge_orders_reach_each_replica_once_and_everything_when_some_were_dropped():
    from serve_app.cache.stores import pattern_of
    from serve_app.fleet.purges import PurgeOrders

    orders = PurgeOrders(kept=2)
    fresh = {"epoch": None, "through": 0, "started": 100.0}
    first = orders.add("p1", "a", at=90.0)  # before the replica started
    assert orders.due(fresh, "b") == {"epoch": orders.epoch, "through": first, "patterns": []}
    orders.add("p2", "a", at=110.0)
    orders.add("p3", "b", at=120.0)
    mine = {"epoch": orders.epoch, "through": 2, "started": 100.0}
    assert orders.due(mine, "a")["patterns"] == ["p3"] and orders.due(mine, "b")["patterns"] == []
    # Of a dead holder's epoch: every order made since it started, none it sent itself.
    assert orders.due(fresh | {"epoch": "gone"}, "c")["patterns"] == ["p2", "p3"]
    orders.add("p4", "a", at=130.0)  # p2 is no longer kept
    assert orders.due(mine, "c")["patterns"] == ["p3", "p4"]  # it had taken p2
    behind = mine | {"through": 1}
    assert orders.due(behind, "c")["patterns"] == [pattern_of()]  # it missed p2: everything goes
    assert orders.due(fresh, "c")["patterns"] == [pattern_of()]  # p2 was made after it started
    assert orders.due(fresh | {"started": 125.0}, "c")["patterns"] == ["p4"]


# -- requests for a model (passthrough): cached only when they ask -------------------------------------


def passthrough_replica(monkeypatch):
    """A replica whose forwarding to a model is counted and answered at once (no engine)."""
    from serve_app.edge import ingress as ingress_module
    from serve_app.edge.responses import Forwarded

    calls: list[dict] = []

    async def forward(handle, request, model_id, **kwargs):
        calls.append(request)
        kwargs["used"]({"prompt_tokens": 10, "completion_tokens": 2})
        body = {"id": f"chatcmpl-{len(calls)}", "choices": [{"message": {"content": "a red circle"}}]}
        return Forwarded(model_id, kwargs.get("reason"), body=body)

    async def ready():
        return None

    monkeypatch.setattr(ingress_module, "forward", forward)
    monkeypatch.setattr(ingress_module, "types_ready", ready)
    monkeypatch.setattr(ingress_module, "chat_request", lambda payload, model_id, priority: payload)
    ingress = cached(ScriptedVLM({S: "[[yes]]"}), ScriptedVLM({S: "[[yes]]"}))
    ingress.model_handles = {"s": object(), "l": object()}
    return ingress, calls


def test_a_request_for_a_model_is_cached_only_when_it_asks(monkeypatch):
    ingress, calls = passthrough_replica(monkeypatch)
    client = client_of(ingress)

    def ask(**extra):
        body = chat_body("Describe the image.", model="l", temperature=0, **extra)
        return client.post("/v1/chat/completions", json=body)

    plain = [ask(), ask()]
    assert all("x-mai-cache" not in reply.headers for reply in plain) and len(calls) == 2
    first, second = ask(mai={"cache": "use"}), ask(mai={"cache": "use"})
    assert first.headers["x-mai-cache"] == "miss" and second.headers["x-mai-cache"] == "hit"
    assert second.json() == first.json() and len(calls) == 3 and "age" in second.headers
    sampled = client.post(
        "/v1/chat/completions", json=chat_body("Describe the image.", model="l", mai={"cache": "use"})
    )
    assert sampled.headers["x-mai-cache"] == "bypass"  # no temperature 0, no seed: the engine may sample
    bad = ask(mai={"cache": ["use"]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "mai.cache"
    stats = client.get("/v1/mai/stats").json()
    assert stats["cache"]["bypassed"] == {"sampled": 1}
    usage = stats["usage"]["anonymous"]
    assert usage["reused"] == 1 and usage["passthroughs"] == 5  # the 400 is no passthrough


def test_a_forwarded_request_says_why_it_cannot_be_cached():
    assert uncached_reason({"temperature": 0}) is None
    assert uncached_reason({"temperature": 0.7, "seed": 3}) is None
    assert uncached_reason({"stream": True, "temperature": 0}) == "stream"
    assert uncached_reason({}) == "sampled"  # the engine's default temperature may sample
    assert passthrough_key({"stream": True, "temperature": 0}, "l", tenant="t", identity="i") is None


def test_a_tenant_is_a_keys_name_and_digest_so_a_name_that_moves_to_another_key_reads_nothing():
    assert tenant_of("api_keys_file#3", sha("revoked"), shared=False) != tenant_of(
        "api_keys_file#3", sha("the next key"), shared=False
    )
    assert tenant_of("anonymous", "0" * 64, shared=False) != tenant_of("mai-batch", "0" * 64, shared=False)


@pytest.mark.parametrize(
    "url",
    [
        "redis://:pa/ss@host/0",
        "redis://host:6379/0?password=pa/ss",
        "redis//:pa/ss@host",
        "rediss://u:pa/ss@h:1",
    ],
)
def test_a_urls_password_is_redacted_wherever_it_stands(url):
    from serve_app.cache.settings import redacted

    assert "pa/ss" not in redacted(url) and "host" in redacted(url).replace("h:1", "host")


@pytest.mark.parametrize(
    "entry",
    [
        b'{"created": "-Infinity", "result": {}}',
        b'{"created": 1e999, "reply": {"choices": []}}',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"created": true, "reply": {"choices": []}}',
    ],
)
def test_an_entry_that_would_crash_a_reader_is_an_entry_error(entry):
    from serve_app.cache.keys import EntryError, decode_reply

    for reader in (decode, decode_reply):
        with pytest.raises(EntryError):
            reader(entry)


def test_an_entry_larger_than_the_store_is_not_kept_and_takes_its_older_one_with_it():
    store = MemoryStore(max_bytes=4096, ttl_s=60)

    async def run():
        assert await store.put("mai:answer:v1:t:-:d", b"small") is True
        assert await store.put("mai:answer:v1:t:-:d", b"x" * 5000) is False
        assert await store.get("mai:answer:v1:t:-:d") is None and store.bytes == 0

    asyncio.run(run())


def test_a_requester_alone_that_leaves_ends_its_run_and_one_with_others_waits_and_pays():
    small = ScriptedVLM({S: "[[no]]", R: "It is red. [[yes]]"}, {S: 0.05, R: 0.3})
    large = ScriptedVLM({S: "[[yes]]"}, {S: 0.05})
    ingress = cached(small, large)

    async def alone():
        leader = asyncio.ensure_future(ingress.chat(chat_body("Is it alone?"), "alone"))
        await asyncio.sleep(0.1)
        leader.cancel()
        await asyncio.sleep(0.4)
        return [call for call in small.calls if call.prompt_kind is R]

    reasoning = asyncio.run(alone())
    assert len(reasoning) == 1 and reasoning[0].cancelled  # no one waited: the run ended with it

    async def with_others():
        before = (await ingress.access.usage())["anonymous"]
        leader = asyncio.ensure_future(ingress.chat(chat_body("Is it shared?"), "first"))
        await asyncio.sleep(0.02)
        other = asyncio.ensure_future(ingress.chat(chat_body("Is it shared?"), "second"))
        await asyncio.sleep(0.05)
        leader.cancel()
        answered = await other
        await asyncio.sleep(0.01)
        after = (await ingress.access.usage())["anonymous"]
        return leader, answered, {k: after[k] for k in ("errors", "reused")}, before, after

    leader, answered, usage, before, after = asyncio.run(with_others())
    assert leader.cancelled() and answered.result.trace.cache.coalesced_with == "first"
    # The leaver waited on with the other and was billed the run: no error, the run's tokens; the
    # other, nothing but a request.
    assert usage == {"errors": before["errors"], "reused": before["reused"] + 1}
    assert sum(after["tokens"].values()) > sum(before["tokens"].values())
