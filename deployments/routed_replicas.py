"""Which replica each model call was routed to, for the trace: the stage-affinity router notes it
when the replica accepts the call (on Serve's router thread), the model client reads it when the
reply is back (on the ingress's loop). Bounded: an entry nobody reads is dropped oldest first."""

from __future__ import annotations

import threading
from collections import OrderedDict

MAX_ENTRIES = 10_000

_lock = threading.Lock()
_routed: OrderedDict[str, str] = OrderedDict()


def note(engine_request_id: str, replica: str) -> None:
    with _lock:
        _routed[engine_request_id] = replica
        while len(_routed) > MAX_ENTRIES:
            _routed.popitem(last=False)


def take(engine_request_id: str) -> str | None:
    """The replica the call went to (once), or None when no stage-affinity router saw it."""
    with _lock:
        return _routed.pop(engine_request_id, None)
