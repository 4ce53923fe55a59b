"""A passthrough pays like the cascade: its tokens from the engine's usage (a stream's too, however
it ends, with only the usage its client asked for in its events), billed to its key against its
tokens_per_minute, and its engine call at the key's priority."""

import asyncio
import json

import pytest

from serve_app.core.admission import Bill, Ledger, Quota
from serve_app.edge.access import passthrough_bill
from serve_app.edge.keys import KeyRing, NamedKey, digest
from serve_app.edge.passthrough import StreamMeter, StreamUsage, chat_request, usage_asked

from .fakes import StreamingHandle as Engine
from .ingress_replica import CONFIG, Replica
from .ingress_replica import replica as build

pytestmark = pytest.mark.unit


def event(choices, usage=None) -> str:
    chunk = {"id": "c", "object": "chat.completion.chunk", "choices": choices}
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk)}\n\n"


def running(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


TOKEN = [{"index": 0, "delta": {"content": "a"}}]
ENGINE_EVENTS = [event(TOKEN, running(10, 1)), event(TOKEN, running(10, 2)), event([], running(10, 2))]


def metered(asked: StreamUsage) -> tuple[list[str], list]:
    told: list = []
    meter = StreamMeter(asked, told.append)
    shown = [meter.packet(packet) for packet in ENGINE_EVENTS]
    meter.end()
    meter.end()  # told once
    return shown, told


def test_a_client_that_asked_no_usage_sees_none_and_the_bill_has_it_all():
    shown, told = metered(usage_asked({"stream": True}))
    assert all('"usage"' not in packet for packet in shown)
    assert [json.loads(p.removeprefix("data: "))["choices"] for p in shown[:2]] == [TOKEN, TOKEN]
    assert shown[2] == ""  # the totals' own chunk: dropped
    assert told == [running(10, 2)]


def test_a_client_that_asked_for_the_totals_gets_them_at_the_end_only():
    shown, told = metered(usage_asked({"stream": True, "stream_options": {"include_usage": True}}))
    assert ['"usage"' in packet for packet in shown] == [False, False, True]
    assert told == [running(10, 2)]
    continuous = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    shown, _ = metered(usage_asked(continuous))
    assert shown == ENGINE_EVENTS


def test_several_events_in_one_packet_are_each_metered():
    told: list = []
    meter = StreamMeter(StreamUsage(False, False), told.append)
    packet = meter.packet("".join(ENGINE_EVENTS) + "data: [DONE]\n\n")
    assert packet.count("data: ") == 3 and packet.endswith("data: [DONE]\n\n") and '"usage"' not in packet
    meter.end()
    assert told == [running(10, 2)]


def test_the_engine_is_asked_for_usage_and_the_key_priority_whatever_the_client_asked():
    messages = [{"role": "user", "content": "hi"}]
    streamed = chat_request({"messages": messages, "stream": True}, "l", priority=3)
    assert streamed.priority == 3
    assert streamed.stream_options.include_usage and streamed.stream_options.continuous_usage_stats
    assert chat_request({"messages": messages}, "l").priority == 0


def test_a_passthrough_bill_is_the_engines_usage_for_that_model_and_counts_against_the_quota():
    assert passthrough_bill("l", running(100, 900)) == Bill(tokens={"l": 1000}, passthrough=True)
    assert passthrough_bill("l", None) == Bill(passthrough=True)
    ledger, quota = Ledger(), Quota(tokens_per_minute=1000)
    assert ledger.admit("k", quota, 0.0) is None
    ledger.record("k", passthrough_bill("l", running(200, 32_000)), 1.0)
    refusal = ledger.admit("k", quota, 2.0)
    assert refusal is not None and refusal.quota == "tokens_per_minute"
    usage = ledger.snapshot(2.0)["k"]
    assert usage["tokens"] == {"l": 32_200} and usage["passthrough_tokens"] == {"l": 32_200}
    assert usage["passthroughs"] == 1


def keyed_replica(engine, **settings) -> tuple[Replica, str]:
    secret = "sk-test-passthrough"
    key = NamedKey(name="team", sha256=digest(secret), **settings)
    replica = build(None, None, CONFIG, api_keys=KeyRing.of((key,)))
    replica.model_handles = {"l": engine}
    return replica, secret


def test_a_streamed_passthrough_is_billed_its_usage_to_its_key_at_its_priority():
    engine = Engine(ENGINE_EVENTS)
    replica, _ = keyed_replica(engine, priority=4)
    caller = replica.access.ring.caller_named("team")

    async def run():
        outcome = await replica.chat(
            {"model": "l", "messages": [{"role": "user", "content": "hi"}], "stream": True}, None, caller
        )
        events = [packet async for packet in outcome.events]
        return events, await replica.access.usage()

    events, usage = asyncio.run(asyncio.wait_for(run(), 30))
    assert all('"usage"' not in packet for packet in events) and events[-1] == "data: [DONE]\n\n"
    assert usage["team"]["passthrough_tokens"] == {"l": 12} and usage["team"]["errors"] == 0
    assert engine.requests[0].priority == 4
    assert replica.metrics.key_paths == ["passthrough"]


def test_a_stream_the_client_leaves_is_billed_what_it_used_so_far():
    class Stalling(Engine):
        async def _stream(self):
            yield ENGINE_EVENTS[0]
            await asyncio.sleep(3600)

    engine = Stalling([])
    replica, _ = keyed_replica(engine)
    caller = replica.access.ring.caller_named("team")

    async def run():
        outcome = await replica.chat(
            {"model": "l", "messages": [{"role": "user", "content": "hi"}], "stream": True}, None, caller
        )
        await anext(outcome.events)
        stalled = asyncio.ensure_future(anext(outcome.events))
        await asyncio.sleep(0.05)
        stalled.cancel()  # the client left
        await asyncio.gather(stalled, return_exceptions=True)
        return await replica.access.usage()

    usage = asyncio.run(asyncio.wait_for(run(), 30))
    assert usage["team"]["passthrough_tokens"] == {"l": 11} and engine.cancelled
