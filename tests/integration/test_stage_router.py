"""The stage-affinity router (deployments/stage_router.py) over Serve's own fake replicas, in process
(Serve's routing code, no cluster): every call of one request to one model on one replica, audits with
their request, passthrough by load, the queue bound, replicas coming and going, and two calls of one
request at once (the stall of Serve's base router) both routed. A call reaches the router as the
client makes it: ``complete(body, call)``, the ``ModelCall`` beside the body (positional or named)."""

import asyncio
import itertools

from deployments.affinity import ModelCall, rendezvous
from deployments.model_server import ChatBody

_numbers = itertools.count()


def model_call(request: str, stage: str = "short_small") -> ModelCall:
    return ModelCall(request, stage, "simple", "yes_no", next(_numbers))


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


def pending(call, parent="parent", named=False):
    """A handle call as the router sees it: ``complete(body, call)``, or ``chat(request)`` when ``call``
    is a string (a passthrough's request id: no ModelCall)."""
    from ray.serve._private.common import RequestMetadata
    from ray.serve._private.request_router.common import PendingRequest

    metadata = RequestMetadata(request_id=parent, internal_request_id=parent)
    body = ChatBody({"messages": [], "request_id": str(call)})
    if isinstance(call, str):
        return PendingRequest([body], {}, metadata)
    if named:
        return PendingRequest([body], {"call": call}, metadata)
    return PendingRequest([body, call], {}, metadata)


async def route(r, call):
    replica = await asyncio.wait_for(r._choose_replica_for_request(call), 5)
    r.on_request_routed(call, replica.replica_id, None)
    return replica.replica_id.unique_id


async def test_every_call_of_a_request_and_its_audit_meet_one_replica():
    r, _ = router()
    stages = ("short_large", "transfer_large")
    for request in ("q1", "q2", "q3", "q4", "q5"):
        seen = {await route(r, pending(model_call(request, stage), request)) for stage in stages}
        seen.add(await route(r, pending(model_call("audit-" + request, "transfer_large"), "audit")))
        seen.add(await route(r, pending(model_call(request, "reason_small"), request, named=True)))
        assert len(seen) == 1


async def test_two_calls_of_one_request_at_once_are_both_routed_even_when_one_is_cancelled():
    # Every handle call inside one ingress request shares its internal_request_id: Serve's base router
    # indexes by it and never routes the second (experiments/stage-affinity/).
    for cancel_first in (False, True):
        r, _ = router()
        first = asyncio.create_task(r._choose_replica_for_request(pending(model_call("q", "short_small"))))
        second = asyncio.create_task(r._choose_replica_for_request(pending(model_call("q", "reason_small"))))
        if cancel_first:
            await asyncio.sleep(0)
            first.cancel()
        replica = await asyncio.wait_for(second, 5)
        assert replica.replica_id.unique_id in {"r1", "r2", "r3", "r4"}
        await asyncio.gather(first, return_exceptions=True)


async def test_past_the_queue_bound_a_call_goes_to_another_replica_and_keeps_its_pin():
    r, fakes = router(max_queue=2)
    pinned = await route(r, pending(model_call("q1")))
    busy = next(fake for fake in fakes if fake.replica_id.unique_id == pinned)
    r._replica_queue_len_cache.update(busy.replica_id, 2)
    assert await route(r, pending(model_call("q1", "transfer_large"))) != pinned
    r._replica_queue_len_cache.update(busy.replica_id, 0)
    assert await route(r, pending(model_call("q1", "transfer_large"))) == pinned


async def test_a_request_keeps_its_replica_when_replicas_are_added_and_rehashes_when_its_is_removed():
    from ray.serve._private.test_utils import FakeRunningReplica

    r, fakes = router()
    pinned = await route(r, pending(model_call("q1")))
    extra = [FakeRunningReplica(f"new{i}") for i in range(8)]
    for fake in extra:
        fake.set_queue_len_response(0)
    r.update_replicas([*fakes, *extra])
    assert await route(r, pending(model_call("q1", "transfer_large"))) == pinned
    remaining = [fake for fake in [*fakes, *extra] if fake.replica_id.unique_id != pinned]
    r.update_replicas(remaining)
    moved = await route(r, pending(model_call("q1", "transfer_large")))
    assert moved != pinned and moved == rendezvous("q1", [f.replica_id.unique_id for f in remaining])


async def test_calls_without_a_mai_request_are_spread_by_load():
    r, _ = router()
    seen = {await route(r, pending(f"chatcmpl-{i}")) for i in range(40)}
    assert len(seen) > 1
    # A request id in the engine format is no call: only the ModelCall beside the body is read.
    seen = {await route(r, pending(str(model_call("q1")))) for _ in range(40)}
    assert len(seen) > 1
