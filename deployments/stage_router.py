"""The stage-affinity request router (``deployments/affinity.py`` says what it decides): a Ray Serve
``RequestRouter`` (Serve 2.60, alpha API) that each model deployment names in its
``request_router_config``; Serve builds one per deployment handle, in the caller's process.

Two things it does beyond choosing replicas:

- **One pending request per call.** Serve's base router indexes pending requests by the caller's
  ``internal_request_id``, which every handle call made inside one ingress request shares. Two calls
  of one request to the same model at once (an eager plan's short answer and reasoning, an audit's)
  then collide: the second is never indexed, the replica chosen for it is handed to the first or to
  nobody, and it waits for ever while the replica sits idle; Serve's default router hides this only
  because its FIFO mixin hands a replica to whichever request is first in line. This router indexes
  by the call itself (experiments/stage-affinity/ keeps the reproduction).
- **Pins.** The replica a key's first call is accepted by is pinned to the key (sticky while the
  request's calls keep coming, ``pin_ttl_s`` after the last); a pin to a replica that is gone is
  dropped and the key hashes again.

A call's key is read off the handle call itself: the ``ModelCall`` of ``complete(body, call)``
(``deployments/model_server.py``), never parsed from a string; a call without one (``chat``'s
passthrough) is routed by load. Which replica served a call reaches the trace in the reply itself.

Serve cloudpickles this module by value: it keeps no state shared with other modules, and imports
only the pure ``affinity`` (never ray.serve.llm, which loads vLLM).
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, ReplicaResult, RequestRouter, RunningReplica

from deployments.affinity import ModelCall, call_key, preferred


def model_call(pending_request: PendingRequest | None) -> ModelCall | None:
    """The cascade call a handle call carries (``complete(body, call)``), or None (a passthrough)."""
    if pending_request is None:
        return None
    args, kwargs = pending_request.args, pending_request.kwargs or {}
    call = args[1] if len(args) > 1 else kwargs.get("call")
    return call if isinstance(call, ModelCall) else None


class StageAffinityRouter(RequestRouter):
    def __init__(self, *args: Any, **kwargs: Any):
        self._pins: OrderedDict[str, tuple[ReplicaID, float]] = OrderedDict()  # key -> replica, last use
        self._pending_by_call: dict[int, PendingRequest] = {}
        self.max_queue, self.pin_ttl_s, self.max_pins = 8, 900.0, 100_000
        super().__init__(*args, **kwargs)

    def initialize_state(self, **kwargs: Any) -> None:
        """``request_router_kwargs``: ``max_queue`` (the queue bound), ``pin_ttl_s`` (how long a pin
        outlives its key's last call) and ``max_pins`` (how many are kept, least recently used first)."""
        unknown = set(kwargs) - {"max_queue", "pin_ttl_s", "max_pins"}
        if unknown:
            raise ValueError(f"StageAffinityRouter takes no {', '.join(sorted(unknown))}")
        self.max_queue = int(kwargs.get("max_queue", self.max_queue))
        self.pin_ttl_s = float(kwargs.get("pin_ttl_s", self.pin_ttl_s))
        self.max_pins = int(kwargs.get("max_pins", self.max_pins))

    # -- choosing --------------------------------------------------------------------------------

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        if pending_request is not None:
            pending_request.routing_context.should_backoff = True  # retries wait, never spin
        by_id = {replica.replica_id.unique_id: replica for replica in candidate_replicas}
        key = call_key(model_call(pending_request))
        pin = self._pin_of(key)
        target = preferred(
            key,
            pin.unique_id if pin is not None else None,
            list(by_id),
            lambda replica: self._replica_queue_len_cache.get(by_id[replica].replica_id),
            self.max_queue,
        )
        by_load = random.sample(candidate_replicas, min(2, len(candidate_replicas)))
        return [[by_id[target]], by_load] if target is not None else [by_load]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult
    ) -> None:
        key = call_key(model_call(pending_request))
        if key is None:
            return
        pinned = self._pin_of(key)
        self._pins[key] = (pinned or replica_id, time.monotonic())  # the first call's replica stays
        self._pins.move_to_end(key)
        while len(self._pins) > self.max_pins:
            self._pins.popitem(last=False)

    def _pin_of(self, key: str | None) -> ReplicaID | None:
        if key is None or key not in self._pins:
            return None
        replica, used = self._pins[key]
        if time.monotonic() - used > self.pin_ttl_s:
            del self._pins[key]
            return None
        return replica

    # -- replicas coming and going: a pin to a replica that is gone is dropped (its keys re-hash) ----

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        super().update_replicas(replicas)
        live = {replica.replica_id for replica in replicas}
        for key in [key for key, (replica, _) in self._pins.items() if replica not in live]:
            del self._pins[key]

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        super().on_replica_actor_died(replica_id)
        for key in [key for key, (replica, _) in self._pins.items() if replica == replica_id]:
            del self._pins[key]

    # -- one pending request per call, not per caller request ---------------------------------------

    def _add_pending_request_to_indices(self, pending_request: PendingRequest) -> None:
        self._pending_by_call[id(pending_request.metadata)] = pending_request

    def _remove_pending_request_from_indices(self, pending_request: PendingRequest) -> None:
        self._pending_by_call.pop(id(pending_request.metadata), None)

    def _get_pending_request_matching_internal_request_id(self, request_metadata: Any = None) -> Any:
        if request_metadata is None:
            return None
        pending = self._pending_by_call.get(id(request_metadata))
        if pending is None or pending.metadata is not request_metadata or pending.future.done():
            return None
        return pending
