"""A streamed passthrough keeps the request's deadline to its last token: an engine that stalls
after its first chunk is cancelled, and the stream ends with a timeout event (never an open
connection holding an ingress slot)."""

import asyncio
import json
import time

from serve_app.edge.passthrough import chat_request, forward


class StallingStream:
    """An engine's token stream: ``chunks`` chunks, then nothing until cancelled."""

    def __init__(self, chunks: int):
        self.chunks, self.cancelled = chunks, False
        self.events = self._events()

    def __aiter__(self):
        return self

    async def __anext__(self):
        return await anext(self.events)

    async def _events(self):
        for index in range(self.chunks):
            yield f'data: {{"chunk": {index}}}\n\n'
        await asyncio.sleep(3600)

    def cancel(self):
        self.cancelled = True


class Handle:
    def __init__(self, stream):
        self.stream = stream

    def options(self, **_):
        return self

    @property
    def chat(self):
        return self

    def remote(self, request):
        return self.stream


async def read(forwarded) -> list[str]:
    return [chunk async for chunk in forwarded.events]


def test_a_stream_that_stalls_ends_at_the_deadline_and_cancels_the_engine():
    request = chat_request({"messages": [{"role": "user", "content": "hi"}], "stream": True}, "l")
    engine = StallingStream(chunks=2)

    async def run():
        started = time.monotonic()
        response = await forward(Handle(engine), request, "l", timeout_s=0.3)
        chunks = await read(response)
        return chunks, time.monotonic() - started

    chunks, seconds = asyncio.run(asyncio.wait_for(run(), 10))  # a stream with no deadline fails here
    assert chunks[:2] == ['data: {"chunk": 0}\n\n', 'data: {"chunk": 1}\n\n']
    error = json.loads(chunks[2].removeprefix("data: "))["error"]
    assert error["code"] == "timeout" and "0.3 s" in error["message"]
    assert chunks[3:] == ["data: [DONE]\n\n"]
    assert engine.cancelled and 0.3 <= seconds < 2


def test_a_stream_within_its_deadline_ends_as_the_engine_ends_it():
    request = chat_request({"messages": [{"role": "user", "content": "hi"}], "stream": True}, "l")

    class Finite(StallingStream):
        async def _events(self):
            for index in range(self.chunks):
                yield f'data: {{"chunk": {index}}}\n\n'

    engine = Finite(chunks=3)
    chunks = asyncio.run(read_all(Handle(engine), request))
    assert chunks == [f'data: {{"chunk": {i}}}\n\n' for i in range(3)] + ["data: [DONE]\n\n"]


async def read_all(handle, request):
    return await read(await forward(handle, request, "l", timeout_s=5))


# ---------------------------------------------------------------- the admission a stream holds


def streaming_replica(engine, timeout_s: float = 5.0):
    """An in-process ingress replica whose large model's handle streams ``engine``'s events."""
    from serve_app.edge import ingress as ingress_module
    from tests.unit.ingress_replica import CONFIG, Replica
    from tests.unit.ingress_replica import replica as build

    config = CONFIG.model_copy(update={"request_timeout_s": timeout_s})
    replica: Replica = build(None, None, config)
    replica.model_handles = {"l": Handle(engine)}
    return replica, ingress_module


STREAMED = {"model": "l", "messages": [{"role": "user", "content": "hi"}], "stream": True}


def test_a_streamed_reply_keeps_its_fair_share_until_its_last_event():
    class Finite(StallingStream):
        async def _events(self):
            for index in range(self.chunks):
                yield f'data: {{"chunk": {index}}}\n\n'

    async def run():
        replica, _ = streaming_replica(Finite(chunks=3))
        outcome = await replica.chat(dict(STREAMED), None)
        held = replica.access.fair.total  # returned, not yet read: still in flight
        chunks = [chunk async for chunk in outcome.events]
        return held, replica.access.fair.total, chunks

    held, after, chunks = asyncio.run(asyncio.wait_for(run(), 20))
    assert held == 1 and after == 0 and chunks[-1] == "data: [DONE]\n\n"


def test_a_client_that_leaves_mid_stream_gives_the_share_back_and_aborts_the_engine():
    async def run():
        engine = StallingStream(chunks=1)
        replica, _ = streaming_replica(engine)
        outcome = await replica.chat(dict(STREAMED), None)
        reader = asyncio.ensure_future(anext(outcome.events))
        await reader
        stalled = asyncio.ensure_future(anext(outcome.events))
        await asyncio.sleep(0.05)
        stalled.cancel()  # the client left: the server cancels the response's task
        await asyncio.gather(stalled, return_exceptions=True)
        return replica.access.fair.total, engine.cancelled

    total, cancelled = asyncio.run(asyncio.wait_for(run(), 20))
    assert total == 0 and cancelled


def test_a_stream_nobody_reads_gives_its_share_back_past_the_deadline(monkeypatch):
    async def run():
        engine = StallingStream(chunks=1)
        replica, ingress_module = streaming_replica(engine, timeout_s=0.2)
        monkeypatch.setattr(ingress_module, "STREAM_BACKSTOP_S", 0.1)
        await replica.chat(dict(STREAMED), None)  # never read: a generator would never end it
        held = replica.access.fair.total
        await asyncio.sleep(0.6)
        return held, replica.access.fair.total, engine.cancelled

    held, after, cancelled = asyncio.run(asyncio.wait_for(run(), 20))
    assert held == 1 and after == 0 and cancelled


async def test_a_passthrough_loads_vllms_types_off_the_event_loop_and_once(monkeypatch):
    import threading

    from serve_app.edge import passthrough

    threads = []

    def load_types():
        threads.append(threading.current_thread())
        passthrough._LOADED.set()

    monkeypatch.setattr(passthrough, "load_types", load_types)
    monkeypatch.setattr(passthrough, "_LOADED", threading.Event())
    await passthrough.types_ready()
    await passthrough.types_ready()  # loaded: nothing more
    assert len(threads) == 1 and threads[0] is not threading.current_thread()
