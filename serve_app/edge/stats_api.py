"""What an ingress replica tells about the fleet and does for its operators, beside the request path:
``GET /v1/mai/stats`` (the audits, plans and answer cache of every replica, merged; every key's usage
for an admin key), the reports to the statistics holder behind it, and an admin's purge of the answer
cache (``POST /v1/mai/cache/purge``). ``IngressReplica`` (edge/ingress.py) is one."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..cache.keys import tenant_of
from ..cache.reuse import AnswerCache
from ..cache.stores import StoreDown, pattern_of
from ..clients.failures import transport_errors
from ..core.admission import Bill
from ..core.decision import fleet_overload
from ..fleet.stats_holder import stats_body
from .errors import RequestError, unavailable
from .keys import ANONYMOUS_CALLER, BATCH_CALLER, Caller, NamedKey

if TYPE_CHECKING:
    from fastapi import Request

    from ..config import AppConfig
    from .access import Access
    from .learning import Auditor, PlanController
    from .observers import OverloadGuard
    from .snapshot import Snapshot
    from .stats_reporter import StatsReporter

logger = logging.getLogger("ray.serve")
_DIGEST = frozenset("0123456789abcdef")


def cache_body(answers: AnswerCache | None) -> dict[str, Any]:
    """The stats body's ``cache``: this replica's counts and store (the holder sums the counts)."""
    if answers is None:
        return {"enabled": False}
    return {"enabled": True} | answers.stats()


def purge_pattern(body: Any, named: Callable[[str], NamedKey]) -> str:
    """The entries an admin's purge names: ``{"key": name}``, ``{"image_sha256": hex}`` or ``{"all":
    true}``, exactly one; a 400 naming the problem otherwise. ``named``: the key of a name."""
    if not isinstance(body, dict) or len(body) != 1:
        raise RequestError(
            'send exactly one of {"key": "<key name>"}, {"image_sha256": "<64 hex digits>"}, {"all": true}',
            param="body",
            code="invalid_purge",
        )
    ((field, value),) = body.items()
    if field == "key" and isinstance(value, str) and 0 < len(value) <= 256:
        key = named(value)
        return pattern_of(tenant=tenant_of(key.name, key.sha256, shared=False))
    if field == "image_sha256" and isinstance(value, str) and len(value) == 64 and set(value) <= _DIGEST:
        return pattern_of(image=value)
    if field == "all" and value is True:
        return pattern_of()
    raise RequestError(
        f"{field!r} is not a purge: key (a key's name), image_sha256 (64 lowercase hex digits) or all (true)",
        param=field,
        code="invalid_purge",
    )


class ReplicaStats:
    """The replica's statistics and operators' calls; the attributes are the replica's."""

    config: AppConfig
    access: Access
    auditor: Auditor
    plans: PlanController
    overload: OverloadGuard
    answers: AnswerCache | None
    stats_holder: Any
    stats_reporter: StatsReporter
    replica: str
    fleet_stats: Snapshot
    key_usage: Snapshot

    async def stats_over_http(self, request: Request) -> dict[str, Any]:
        """``GET /v1/mai/stats``: admitted like any request (the key's quotas and share), billed no
        tokens, and answered from snapshots at most a second old (``snapshot.Snapshot``)."""
        caller = self.access.identify(request.headers)
        async with self.access.admitted(caller) as grant:
            body = await self.stats(caller)
            grant.bill = Bill()
            return body

    async def stats(self, caller: Caller) -> dict[str, Any]:
        """The audit statistics of every replica, merged (docs/api.md, "Audits"), and the answer cache's
        counts; for an admin key, every key's usage too."""
        usage = {"usage": await self.key_usage.get()} if caller.key.admin else {}
        cascade = self.config.cascade
        cache = cache_body(self.answers)
        if self.stats_holder is None:  # this replica alone: its own overload level
            overload = fleet_overload(cascade.overload.enabled, [self.overload.level_label()])
            body = stats_body(
                self.auditor.book,
                self.plans.book,
                cascade.audit,
                cascade.adaptive,
                overload=overload,
                classes=self.config.classes,
            )
            return usage | body | {"cache": cache}
        fleet = await self.fleet_stats.get()
        if "cache_events" in fleet and cache.get("enabled"):  # every replica's counts, summed
            cache = cache | {"events": fleet["cache_events"], "replicas": fleet.get("cache_replicas", 1)}
        return usage | {k: v for k, v in fleet.items() if not k.startswith("cache_")} | {"cache": cache}

    async def _payload(self, request: Request, caller: Caller) -> Any: ...

    async def purge_over_http(self, request: Request) -> dict[str, Any]:
        """``POST /v1/mai/cache/purge`` (an admin key's): the entries of a key, of an image, or all, from
        the shared store (Redis), or from this replica's memory at once and from every other replica's
        with its next report (``others_within_s``: fleet/purges.py)."""
        caller = self.access.identify(request.headers)
        async with self.access.admitted(caller) as grant:
            grant.bill = Bill()
            if not caller.key.admin:
                raise RequestError(
                    "purging the answer cache takes an admin key", code="not_admin", status=403
                )
            pattern = purge_pattern(await self._payload(request, caller), self._key_named)
            if self.answers is None:
                return {"purged": 0, "store": None}
            try:
                removed = await self.answers.purge(pattern)
            except StoreDown as exc:
                raise unavailable(
                    f"the answer cache's store did not answer ({exc})", code="cache_unavailable"
                ) from None
            body = {"purged": removed, "store": self.answers.store.kind}
            if body["store"] != "memory" or self.stats_holder is None:  # Redis: every replica's entries
                return body
            try:
                await self.stats_holder.purge.remote(pattern, self.replica)
            except transport_errors() as exc:
                raise unavailable(
                    f"the purge removed {removed} entries from one replica only: the statistics holder, "
                    f"which passes it on to the others, did not answer ({type(exc).__name__}); send it again",
                    code="stats_unavailable",
                ) from None
            return body | {"others_within_s": self.config.cascade.audit.report_interval_s}

    def _key_named(self, name: str) -> NamedKey:
        """A key by its name (a batch job's rows and the anonymous caller's among them); a 400 naming
        it when no key has it: its entries are purged by image or all."""
        for caller in (ANONYMOUS_CALLER, BATCH_CALLER):
            if caller.name == name:
                return caller.key
        try:
            return self.access.ring.caller_named(name).key
        except ValueError as exc:
            raise RequestError(
                f"{exc}: purge its entries by image_sha256, or all", param="key", code="invalid_purge"
            ) from None

    async def _holder_stats(self) -> dict[str, Any]:
        """This replica's latest report, then the holder's merged statistics."""
        try:
            await self._report()
            return await self.stats_holder.snapshot.remote()
        except transport_errors() as exc:  # the holder is being replaced; the replicas report again
            self.plans.holder_failed(type(exc).__name__)
            raise unavailable(
                f"the statistics holder is restarting ({type(exc).__name__})", code="stats_unavailable"
            ) from None

    async def _report_every_interval(self) -> None:
        interval = self.config.cascade.audit.report_interval_s
        while True:
            await asyncio.sleep(interval)
            try:
                await self._report()
            except transport_errors() as exc:  # the holder restarting: it asks the next report for everything
                self.plans.holder_failed(type(exc).__name__)
                logger.warning("MAI audit statistics not reported; retrying in %s s", interval, exc_info=True)
            except Exception:  # a bug: logged with its traceback; the loop, and serving, go on
                logger.exception("MAI audit statistics report failed")

    async def _report(self) -> None:
        """Report what changed since the holder's last acknowledgement (edge/stats_reporter.py) and
        take its estimates and bounds."""
        view = await self.stats_reporter.exchange(
            lambda report: self.stats_holder.report.remote(self.replica, report)
        )
        self.plans.update(view)
        for pattern in self.stats_reporter.purges(view):  # an admin's, sent through another replica
            if self.answers is not None:
                removed = await self.answers.purge(pattern)
                logger.info("answer cache: a purge sent through another replica removed %d entries", removed)
