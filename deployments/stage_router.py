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
- **Pins and the trace.** The replica a key's first call is accepted by is pinned to the key (sticky
  while the request's calls keep coming, ``pin_ttl_s`` after the last); a pin to a replica that is
  gone is dropped and the key hashes again. Each accepted call's replica is noted for the trace
  (``deployments/routed_replicas.py``).

Serve cloudpickles this module by value: it keeps no state shared with other modules beyond what it
imports from them.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, ReplicaResult, RequestRouter, RunningReplica

from deployments import routed_replicas
from deployments.affinity import call_key, preferred


def engine_request_id(pending_request: PendingRequest | None) -> str | None:
    """The engine request id of a call, or None: ``complete``'s body (``plain_chat``) names it, as
    ``chat``'s ChatCompletionRequest does."""
    if pending_request is None or not pending_request.args:
        return None
    first = pending_request.args[0]
    return first.get("request_id") if isinstance(first, dict) else getattr(first, "request_id", None)


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
        key = call_key(engine_request_id(pending_request))
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
        call = engine_request_id(pending_request)
        if call is not None:
            routed_replicas.note(call, replica_id.unique_id)
        key = call_key(call)
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
