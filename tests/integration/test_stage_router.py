"""The stage-affinity router (deployments/stage_router.py) over Serve's own fake replicas, in process
(Serve's routing code, no cluster): every call of one request to one model on one replica, audits with
their request, passthrough by load, the queue bound, replicas coming and going, and two calls of one
request at once (the stall of Serve's base router) both routed."""

import asyncio
import itertools
from types import SimpleNamespace

from deployments import routed_replicas
from deployments.affinity import rendezvous

_numbers = itertools.count()


def engine_id(request: str, stage: str = "short_small") -> str:
    return f"mai-{request}-{stage}-simple-yes_no-{next(_numbers)}"


def router(max_queue=8, replicas=("r1", "r2", "r3", "r4")):
    from ray.serve._private.common import DeploymentHandleSource, DeploymentID
    from ray.serve._private.test_utils import FakeRunningReplica

    from deployments.stage_router import StageAffinityRouter

    r = StageAffinityRouter(
        deployment_id=DeploymentID(name="large"),
        handle_source=DeploymentHandleSource.REPLICA,
        use_replica_queue_len_cache=True,
        initial_backoff_s=0.001,
        max_backoff_s=0.01,
    )
    r.initialize_state(max_queue=max_queue, pin_ttl_s=60.0, max_pins=1000)
    fakes = [FakeRunningReplica(name) for name in replicas]
    for fake in fakes:
        fake.set_queue_len_response(0)
    r.update_replicas(fakes)
    return r, fakes


def pending(engine_request_id, parent="parent"):
    from ray.serve._private.common import RequestMetadata
    from ray.serve._private.request_router.common import PendingRequest

    metadata = RequestMetadata(request_id=parent, internal_request_id=parent)
    return PendingRequest([SimpleNamespace(request_id=engine_request_id)], {}, metadata)


async def route(r, call):
    replica = await asyncio.wait_for(r._choose_replica_for_request(call), 5)
    r.on_request_routed(call, replica.replica_id, None)
    return replica.replica_id.unique_id


async def test_every_call_of_a_request_and_its_audit_meet_one_replica():
    r, _ = router()
    stages = ("short_large", "transfer_large")
    for request in ("q1", "q2", "q3", "q4", "q5"):
        seen = {await route(r, pending(engine_id(request, stage), request)) for stage in stages}
        seen.add(await route(r, pending(engine_id("audit-" + request, "transfer_large"), "audit")))
        assert len(seen) == 1
    assert routed_replicas.take("nothing-routed") is None


async def test_the_routed_replica_is_noted_for_the_trace_once():
    r, _ = router()
    call = engine_id("q1")
    replica = await route(r, pending(call))
    assert routed_replicas.take(call) == replica and routed_replicas.take(call) is None


async def test_two_calls_of_one_request_at_once_are_both_routed_even_when_one_is_cancelled():
    # Every handle call inside one ingress request shares its internal_request_id: Serve's base router
    # indexes by it and never routes the second (experiments/stage-affinity/).
    for cancel_first in (False, True):
        r, _ = router()
        first = asyncio.create_task(r._choose_replica_for_request(pending(engine_id("q", "short_small"))))
        second = asyncio.create_task(r._choose_replica_for_request(pending(engine_id("q", "reason_small"))))
        if cancel_first:
            await asyncio.sleep(0)
            first.cancel()
        replica = await asyncio.wait_for(second, 5)
        assert replica.replica_id.unique_id in {"r1", "r2", "r3", "r4"}
        await asyncio.gather(first, return_exceptions=True)


async def test_past_the_queue_bound_a_call_goes_to_another_replica_and_keeps_its_pin():
    r, fakes = router(max_queue=2)
    pinned = await route(r, pending(engine_id("q1")))
    busy = next(fake for fake in fakes if fake.replica_id.unique_id == pinned)
    r._replica_queue_len_cache.update(busy.replica_id, 2)
    assert await route(r, pending(engine_id("q1", "transfer_large"))) != pinned
    r._replica_queue_len_cache.update(busy.replica_id, 0)
    assert await route(r, pending(engine_id("q1", "transfer_large"))) == pinned


async def test_a_request_keeps_its_replica_when_replicas_are_added_and_rehashes_when_its_is_removed():
    from ray.serve._private.test_utils import FakeRunningReplica

    r, fakes = router()
    pinned = await route(r, pending(engine_id("q1")))
    extra = [FakeRunningReplica(f"new{i}") for i in range(8)]
    for fake in extra:
        fake.set_queue_len_response(0)
    r.update_replicas([*fakes, *extra])
    assert await route(r, pending(engine_id("q1", "transfer_large"))) == pinned
    remaining = [fake for fake in [*fakes, *extra] if fake.replica_id.unique_id != pinned]
    r.update_replicas(remaining)
    moved = await route(r, pending(engine_id("q1", "transfer_large")))
    assert moved != pinned and moved == rendezvous("q1", [f.replica_id.unique_id for f in remaining])


async def test_calls_without_a_mai_request_are_spread_by_load():
    r, _ = router()
    seen = {await route(r, pending(f"chatcmpl-{i}")) for i in range(40)}
    assert len(seen) > 1
