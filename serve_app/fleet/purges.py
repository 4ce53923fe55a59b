"""An admin's purge of the in-process answer stores, carried to every ingress replica: the replica that
takes ``POST /v1/mai/cache/purge`` purges its own memory at once and leaves the order with the
statistics holder (serve_app/fleet/stats_holder.py), and every other replica takes it with the holder's
reply to its next report (within ``audit.report_interval_s``). A Redis store needs none of this: a purge
there reaches every replica's entries.

A replica's cursor says which orders it has taken: the holder's ``epoch`` (drawn when the holder
starts), the last order ``through`` which it took them, and when the replica ``started`` (wall clock).
A cursor of this epoch takes the orders after ``through``; a replica new to this holder (its first
report, or the holder restarted) takes the orders made since it started. Orders are kept up to
``KEPT``; a replica whose orders were dropped before it took them purges everything instead. Purging
a little more than asked is harmless (those answers run again); purging less is not.

What a death loses: the holder's orders are lost with it, so a replica that had not reported since the
purge keeps those entries until their TTL (the reply to the admin says how long the others take, and a
purge may be sent again at no harm).
"""

from __future__ import annotations

import secrets
from collections import deque
from collections.abc import Mapping
from typing import Any

from ..cache.stores import pattern_of

KEPT = 256  # the orders the holder keeps for replicas that have not yet reported


class PurgeOrders:
    """The orders an admin made, numbered, for the replicas to take (``due``)."""

    def __init__(self, kept: int = KEPT):
        self.epoch = secrets.token_hex(8)  # this holder's life: a cursor of another is of a dead holder
        self.number = 0  # the last order's number
        self.orders: deque[tuple[int, float, str, str]] = deque(maxlen=kept)  # number, at, pattern, origin
        self.dropped_at = -float("inf")  # when the newest order no longer kept was made

    def add(self, pattern: str, origin: str, at: float) -> int:
        """An order to purge ``pattern``, made at ``at`` (wall clock) through the replica ``origin``,
        which purged itself already; its number."""
        if len(self.orders) == self.orders.maxlen:
            self.dropped_at = self.orders[0][1]
        self.number += 1
        self.orders.append((self.number, at, pattern, origin))
        return self.number

    def due(self, cursor: Mapping[str, Any], replica: str) -> dict[str, Any]:
        """The reply's ``purges`` for ``replica`` at ``cursor`` (its ``epoch``, ``through``, ``started``):
        the patterns it has not taken, and the cursor to keep."""
        if cursor.get("epoch") == self.epoch:
            through = int(cursor.get("through", 0))
            wanted = [order for order in self.orders if order[0] > through]
            lost = self.number - len(self.orders) > through  # orders after its cursor, dropped
        else:
            started = float(cursor.get("started", float("inf")))
            wanted = [order for order in self.orders if order[1] >= started]
            lost = self.dropped_at >= started
        patterns = (
            [pattern_of()] if lost else [pattern for _, _, pattern, origin in wanted if origin != replica]
        )
        return {"epoch": self.epoch, "through": self.number, "patterns": patterns}
