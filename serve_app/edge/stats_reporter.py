"""A replica's side of reporting to the stats holder (serve_app/fleet/stats_holder.py): what changed since
the holder's last acknowledgement, so a report costs what changed, not the windows.

A report carries, per class whose counts changed since the last acknowledged report, the replica's
absolute counts (requests, routes, plans, tokens per model, audited, disagreed, by route) and the audits
appended to its window since; per class with new plan observations, those observations; and always the
replica's totals (served and audit tokens, audits not run) and its overload level (``normal``,
``shed`` or ``relax``: serve_app/core/decision.py). Counts are absolute, so the holder adds the
difference from the last it applied and a repeat changes nothing; window entries are numbered per class
(``AuditBook``'s ``audited``, ``PlanBook``'s ``appended``), so the holder skips those it has. A lost
reply costs a resend of the same entries, nothing else.

A replica with the answer cache on also says which of the admins' purges of the in-process stores it
has taken (its ``purge_cursor``), and the reply names those it has not (serve_app/fleet/purges.py).

The first report, and the first after the holder said it does not know this replica (it restarted:
``{"resend": true}``), is full: every class and every entry of the windows. ``exchange`` makes that
second call at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from itertools import islice
from typing import Any

from ..core.audit import AuditBook
from ..core.decision import Level
from ..core.plan_stats import PlanBook, row_of


def _tail(window: Any, count: int) -> list[Any]:
    """The last ``count`` items of a deque, oldest first, in O(count)."""
    return list(islice(reversed(window), min(count, len(window))))[::-1]


def _always_normal() -> str:
    return Level.NORMAL.label


class StatsReporter:
    """What this replica has reported and the holder acknowledged, and the next report.
    ``overload_level``: the replica's overload level now (its ``OverloadGuard.level_label``)."""

    def __init__(
        self,
        audits: AuditBook,
        plans: PlanBook,
        overload_level: Callable[[], str] = _always_normal,
        cache_events: Callable[[], Mapping[str, int]] | None = None,
        wall: Callable[[], float] = time.time,
    ):
        self.audits, self.plans, self.overload_level = audits, plans, overload_level
        self.cache_events = cache_events  # the answer cache's counts (absolute), when it is on
        # Which of the admins' purges of the in-process stores this replica took (serve_app/fleet/purges.py).
        self.purge_cursor: dict[str, Any] = {"epoch": None, "through": 0, "started": wall()}
        self.number = 0  # the reports made: the holder ignores the counts of one older than it applied
        self.full = True  # the next report carries everything
        self.acked_counts: dict[str, tuple[int, int]] = {}  # class -> (requests, audited) acknowledged
        self.acked_audits: dict[str, int] = {}  # class -> the last audit of its window acknowledged
        self.acked_plans: dict[str, int] = {}  # class -> the last plan observation acknowledged
        self._sent: dict[str, tuple[int, int]] = {}  # the counts the report in flight carries
        self._lock = asyncio.Lock()

    def report(self) -> dict[str, Any]:
        """The next report: what changed since the last acknowledged one (everything when full)."""
        self.number += 1
        audits: dict[str, Any] = {}
        self._sent = {}
        for cls, entry in self.audits.classes.items():
            counts = (entry.requests, entry.audited)
            if not self.full and self.acked_counts.get(cls) == counts:
                continue
            self._sent[cls] = counts
            new = entry.audited - (0 if self.full else self.acked_audits.get(cls, 0))
            audits[cls] = entry.data(_tail(entry.recent, new))
        plans: dict[str, Any] = {}
        for cls, observations in self.plans.classes.items():
            appended = self.plans.appended[cls]
            new = appended - (0 if self.full else self.acked_plans.get(cls, 0))
            if new > 0:
                rows = [row_of(o) for o in _tail(observations, new)]
                plans[cls] = {"appended": appended, "rows": rows}
        book = self.audits
        cache = {}
        if self.cache_events is not None:
            cache = {"cache": dict(self.cache_events()), "purge_cursor": dict(self.purge_cursor)}
        return cache | {
            "number": self.number,
            "full": self.full,
            "audits": audits,
            "plans": plans,
            "overload": self.overload_level(),
            "totals": {
                "served_tokens": book.served_tokens,
                "audit_tokens": book.audit_tokens,
                "not_run": dict(book.not_run),
                "destinations": dict(book.destinations),
            },
        }

    def acknowledged(self, reply: Mapping[str, Any]) -> None:
        """The holder applied the report in flight: ``reply["acked"]`` says up to which entry, per class."""
        if self.full:
            self.acked_counts = {}
        self.acked_counts.update(self._sent)
        self.acked_audits.update(reply["acked"]["audits"])
        self.acked_plans.update(reply["acked"]["plans"])
        self.full = False

    def purges(self, reply: Mapping[str, Any]) -> list[str]:
        """The purges of the answer cache the holder's reply orders (``stores.pattern_of`` patterns) for
        this replica to apply to its own store; the cursor moves past them."""
        due = reply.get("purges")
        if not due:
            return []
        self.purge_cursor |= {"epoch": due["epoch"], "through": due["through"]}
        return list(due["patterns"])

    def forget(self) -> None:
        """The holder does not know this replica (it restarted): the next report carries everything."""
        self.full = True
        self.acked_counts, self.acked_audits, self.acked_plans = {}, {}, {}

    async def exchange(
        self, send: Callable[[dict[str, Any]], Awaitable[Mapping[str, Any]]]
    ) -> Mapping[str, Any]:
        """Report through ``send`` (the holder's ``report`` for this replica) and return its reply; a
        ``resend`` is answered at once with a full report. One exchange at a time: a report is built
        from the acknowledgements of the one before. A failed ``send`` raises, and the next report
        carries again what this one did."""
        async with self._lock:
            reply = await send(self.report())
            if reply.get("resend"):
                self.forget()
                reply = await send(self.report())
            self.acknowledged(reply)
            return reply
