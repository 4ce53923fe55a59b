"""Two concurrent calls that share an internal_request_id (as every handle call made inside one
Serve request does) through a non-FIFO RequestRouter: the second is never assigned."""

import asyncio

from ray.serve._private.common import DeploymentHandleSource, DeploymentID, RequestMetadata
from ray.serve._private.request_router.common import PendingRequest
from ray.serve._private.request_router.request_router import FIFOMixin, RequestRouter
from ray.serve._private.test_utils import FakeRunningReplica


class Plain(RequestRouter):  # overrides choose_replicas only, like PrefixCacheAffinityRouter
    async def choose_replicas(self, candidate_replicas, pending_request=None):
        return [candidate_replicas]


class Fifo(FIFOMixin, Plain):
    pass


async def run(cls, cancel_first):
    r = cls(
        deployment_id=DeploymentID(name="d"),
        handle_source=DeploymentHandleSource.REPLICA,
        use_replica_queue_len_cache=False,
        initial_backoff_s=0.001,
        max_backoff_s=0.01,
    )
    rep = FakeRunningReplica("r1")
    rep.set_queue_len_response(0)
    r.update_replicas([rep])

    def md():
        return RequestMetadata(request_id="req", internal_request_id="same-parent")

    a = asyncio.create_task(r._choose_replica_for_request(PendingRequest([], {}, md())))
    b = asyncio.create_task(r._choose_replica_for_request(PendingRequest([], {}, md())))
    if cancel_first:
        await asyncio.sleep(0)
        a.cancel()
    try:
        done, _ = await asyncio.wait([b], timeout=2)
        n = r.curr_num_routing_tasks
        probes = rep.num_get_queue_len_calls
        if not done:
            b.cancel()
            raise asyncio.TimeoutError
        print(cls.__name__, "cancel_first" if cancel_first else "both", "-> B routed")
    except asyncio.TimeoutError:
        print(
            cls.__name__,
            "cancel_first" if cancel_first else "both",
            "-> B STALLED; routing tasks while stalled:",
            n,
            "probes:",
            probes,
        )


async def main():
    from deployments.stage_router import StageAffinityRouter

    for cls in (Plain, Fifo, StageAffinityRouter):
        for c in (False, True):
            await run(cls, c)


asyncio.run(main())
