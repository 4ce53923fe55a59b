"""Stage affinity, the pure part: which replica of a model a call goes to so that every call of one
cascade request to that model meets the same engine, whose prefix cache (and multimodal encoder
cache) already holds the request's image and question.

- A call's key is the MAI request it serves, read from its engine request id
  (``deployments/engine_ids.py``); an audit's calls use the request's own key (``audit-<id>``: the same
  image and question). Any other call (a passthrough) has no key and is routed by load.
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

from .engine_ids import AUDIT_PREFIX, parse_engine_request_id


def call_key(engine_request_id: str | None) -> str | None:
    """The MAI request a model call serves (an audit's: the audited request's), or None."""
    parsed = parse_engine_request_id(engine_request_id)
    if parsed is None:
        return None
    return parsed.request_id.removeprefix(AUDIT_PREFIX)


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
