"""A cascade's call to a model and its stage affinity, the pure part: the call as a typed value
(``ModelCall``, which crosses the deployment handle beside the body: ``complete(body, call)``), and
which replica of a model it goes to so that every call of one cascade request to that model meets the
same engine, whose prefix cache (and multimodal encoder cache) already holds the request's image and
question. Imports nothing but the standard library: the router (``stage_router.py``), which Serve
cloudpickles by value, and the ingress read it.

- A call's key is the MAI request it serves (``ModelCall.affinity_key``); an audit's calls use the
  audited request's own key (``audit-<id>``: the same image and question). A call that carries no
  ``ModelCall`` (a passthrough) has no key and is routed by load.
- A key with no replica yet goes to its rendezvous replica: the highest hash of (key, replica id).
  Every ingress replica computes the same, and adding or removing a replica moves only the keys that
  hash highest to it.
- A key keeps the replica its first call went to (the router pins it) until the pin expires or the
  replica is gone; so replicas added mid-request never move a request.
- A pinned or rendezvous replica past the queue bound is passed over for the less loaded of two.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# An audit's calls name the request ``audit-<audited request id>``: the engines (the emulated one's
# script, the stage-affinity router) read them as the audited request's.
AUDIT_PREFIX = "audit-"


@dataclass(frozen=True)
class ModelCall:
    """One cascade call to a model. Its ``str`` is the engine request id vLLM logs,

        mai-<request id>-<stage>-<prompt kind>-<answer kind>-<n>
        e.g. mai-3f2a…-transfer_large-transfer-yes_no-17

    which ties the engine's logs to the MAI request, stage and prompt kind; nothing reads it back (the
    router and the engines read this value). ``number`` numbers the calls of one ingress replica, so
    every id is unique."""

    request_id: str  # the MAI request the call serves (an audit's: ``audit-<audited request id>``)
    stage: str  # e.g. short_small, reason_small, transfer_large
    prompt_kind: str  # simple, explain, reasoning, stage2, transfer
    answer_kind: str  # the kind of answer the question wants: choice, yes_no, number, text
    number: int

    def __str__(self) -> str:
        return f"mai-{self.request_id}-{self.stage}-{self.prompt_kind}-{self.answer_kind}-{self.number}"

    @property
    def affinity_key(self) -> str:
        """The MAI request the call serves; an audit's: the audited request's."""
        return self.request_id.removeprefix(AUDIT_PREFIX)


def call_key(call: ModelCall | None) -> str | None:
    """A call's affinity key, or None for a call that carries no ``ModelCall`` (a passthrough)."""
    return call.affinity_key if call is not None else None


def rendezvous(key: str, replica_ids: Sequence[str]) -> str | None:
    """The replica ``key`` hashes highest with (None when there is none)."""

    def weight(replica: str) -> bytes:
        return hashlib.blake2b(f"{key}|{replica}".encode(), digest_size=8).digest()

    return max(replica_ids, key=weight, default=None)


def preferred(
    key: str | None,
    pinned: str | None,
    replica_ids: Sequence[str],
    queue_length: Callable[[str], int | None],
    max_queue: int,
) -> str | None:
    """The one replica a call should go to, or None to route it by load: its key's live pin, else its
    rendezvous replica, unless that one has ``max_queue`` or more requests queued or running (a
    length not known is taken as under the bound)."""
    if key is None or not replica_ids:
        return None
    target = pinned if pinned in replica_ids else rendezvous(key, replica_ids)
    length = queue_length(target) if target is not None else None
    return target if length is None or length < max_queue else None
