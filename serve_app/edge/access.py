"""A request's way in, and what it is billed: its key (serve_app/edge/keys.py), its share of a busy
replica (serve_app/core/admission.py) and its quotas (the key ledger, ``KeyLedger``), all before its
body is read; then what it used, told to the ledger. Whether the key may use the model it names is
the request's to check once its body is read (``Grant.use``).

The key ledger every ingress replica shares is one Serve deployment (``KeyLedgerDeployment``, which the
application builds) holding each key's quota windows and usage (``admission.Ledger``), as the
statistics holder holds the audits': a replica asks it to admit each request and tells it what the
request used; one replica, so a quota is one count however many ingress replicas there are. A
replica without it (a batch actor, a test) holds a ``KeyLedger`` of its own."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

from ray import serve

from ..clients.failures import transport_errors
from ..core.admission import Bill, Capacity, FairShare, Ledger, Quota
from ..core.roles import ROLES
from ..core.routes import EARLY_EXITS, Route
from ..core.trace import CascadeResult
from .errors import EXPECTED, RequestError, request_error_of
from .keys import Caller, KeyRing
from .observers import Metrics

logger = logging.getLogger("ray.serve")


@dataclass
class Grant:
    """An admitted request: its caller, the engine priority its calls run at (lower first), and what
    it used once it has ended (set by the request; none: it failed before it could say)."""

    caller: Caller
    priority: int
    bill: Bill | None = None
    latency_s: float | None = None  # the cascade's own time (from the trace), once it answered

    def use(self, model: str) -> None:
        """A 403 when the key may not use ``model`` (billed as a request, not an error)."""
        self.caller.check_model(model)


def cascade_bill(result: CascadeResult, model_ids: Mapping[str, str]) -> Bill:
    """What a cascade request used: its tokens per model id, and how it ended."""
    tokens = result.trace.tokens()
    spent = {
        model_ids[role]: tokens[role].get("prompt_tokens", 0) + tokens[role].get("completion_tokens", 0)
        for role in ROLES
    }
    return Bill(
        tokens={model: count for model, count in spent.items() if count},
        route=result.route,
        early_exit=result.route in EARLY_EXITS,
        escalated=result.route == Route.TRANSFER,
    )


def reused_bill(result: CascadeResult) -> Bill:
    """What a request answered by the answer cache, or by an identical request's run, used: no tokens;
    its key counts it as a request and as ``reused`` (the run's own request paid for the run)."""
    return Bill(route=result.route, reused=True)


def passthrough_bill(model_id: str, usage: Mapping[str, Any] | None) -> Bill:
    """What a request forwarded to ``model_id`` used: the engine's usage (prompt and completion
    tokens, every choice's); nothing when the engine gave none (it failed before its first token)."""
    usage = usage or {}
    spent = sum(usage.get(name) or 0 for name in ("prompt_tokens", "completion_tokens"))
    return Bill(tokens={model_id: spent} if spent else {}, passthrough=True)


class Access:
    def __init__(
        self,
        ring: KeyRing,
        ledger: Any = None,
        *,
        capacity: Capacity,
        metrics: Metrics | None = None,
        wait_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        """``wait_s``: how long a request past its key's share waits its turn before a 429."""
        self.ring, self.metrics, self.clock, self.wait_s = ring, metrics, clock, wait_s
        self.ledger = ledger  # the KeyLedger deployment's handle; None: this replica's own
        self.local = KeyLedger() if ledger is None else None
        self.capacity = capacity
        self.fair = FairShare(capacity)
        self.entered = 0  # requests let in so far: one ran alone when none entered while it ran
        self._turns = asyncio.Event()  # set, and replaced, each time a request ends

    def identify(self, headers: Mapping[str, str]) -> Caller:
        return self.ring.identify(headers)

    @asynccontextmanager
    async def admitted(self, caller: Caller) -> AsyncIterator[Grant]:
        """The request let in (its share and quotas counted) before its body is read, or a 429
        naming why not. A client's error inside (4xx) is billed as a request, a server's as an
        error; the answer's latency teaches the replica its capacity (core/admission.py: Capacity)."""
        started = self.clock()
        alone = self.fair.total == 0
        rank = await self._turn(caller, started)
        self.entered += 1
        entered = self.entered
        grant: Grant | None = None
        try:
            refusal = await self._admit(caller)
            if refusal is not None:
                self._count(caller, refusal["quota"])
                raise _too_many(
                    f"this API key is over its {refusal['quota']} of {refusal['limit']}",
                    refusal["quota"],
                    refusal["retry_after_s"],
                )
            grant = Grant(caller, caller.key.priority + rank)
            try:
                yield grant
            except EXPECTED as exc:
                if grant.bill is None:
                    failed = request_error_of(exc).status >= 500
                    grant.bill = Bill(error=failed, rejected=not failed)
                raise
            finally:  # whatever ended it, the ledger hears of it once (its tokens' reservation ends)
                self.record(caller, grant.bill or Bill(error=True))
        finally:
            ended = self.clock()
            bill = grant.bill if grant is not None else None
            answered = bill is not None and not (bill.error or bill.rejected)
            self.fair.leave(caller.name, ended, answered=answered)
            self._next_turn()
            if grant is not None and bill is not None and bill.route and grant.latency_s is not None:
                alone = alone and self.entered == entered
                seconds, in_flight = grant.latency_s, self.fair.total + 1
                self.capacity.answered(bill.route, seconds, alone=alone, in_flight=in_flight, now=ended)

    async def _turn(self, caller: Caller, now: float) -> int:
        """The request's engine priority rank once its share lets it in (``FairShare``): at once, or
        after waiting its turn, each time another request ends, for at most ``wait_s``; past that (or
        with as many of its key's requests already waiting as the models take at once) a 429."""
        key, weight, hold = caller.name, caller.key.weight, not self.ring.open
        rank = self.fair.enter(key, weight, now, hold_alone=hold)
        if rank is not None:
            return rank
        if self.wait_s <= 0 or self.fair.waiting[key] >= self.capacity.most:
            raise self._over_share(caller, 0.0)
        self.fair.wait(key, weight, now)
        try:
            while rank is None:
                turn, left = self._turns, now + self.wait_s - self.clock()
                try:
                    await asyncio.wait_for(turn.wait(), max(left, 0.0))
                except TimeoutError:
                    raise self._over_share(caller, self.wait_s) from None
                rank = self.fair.enter(key, weight, self.clock(), hold_alone=hold, waited=True)
            return rank
        finally:
            self.fair.stop_waiting(key)
            self._next_turn()  # a key that stopped waiting may leave the others a larger share

    def _next_turn(self) -> None:
        """Wake every request waiting its turn (they try again in the order they came)."""
        self._turns.set()
        self._turns = asyncio.Event()

    def _over_share(self, caller: Caller, waited_s: float) -> RequestError:
        self._count(caller, "fair_share")
        waited = f" and waited {waited_s:g} s for its turn" if waited_s else ""
        return _too_many(
            f"this API key already has {self.fair.in_flight[caller.name]} requests in flight on this "
            f"server, its share while other work waits{waited}; retry when one has answered",
            "fair_share",
            1,
        )

    async def _admit(self, caller: Caller) -> dict | None:
        quota = (caller.key.requests_per_minute, caller.key.tokens_per_minute)
        if self.local is not None:
            return self.local.admit(caller.name, *quota)
        try:
            return await self.ledger.admit.remote(caller.name, *quota)
        except transport_errors() as exc:  # the ledger restarting: serve, and say the count missed it
            logger.warning("MAI key ledger unavailable (%s): request admitted uncounted", type(exc).__name__)
            return None

    def _count(self, caller: Caller, outcome: str, bill: Bill | None = None) -> None:
        if self.metrics is not None:
            path = "passthrough" if bill is not None and bill.passthrough else "cascade"
            self.metrics.record_key(caller.name, outcome, bill.tokens if bill else {}, path)

    def record(self, caller: Caller, bill: Bill) -> None:
        """Tell the ledger (and the metrics) what a request used; never waits, never raises."""
        ended = "error" if bill.error else "rejected" if bill.rejected else "answered"
        self._count(caller, ended, bill)
        if self.local is not None:
            self.local.record(caller.name, asdict(bill))
            return
        try:
            self.ledger.record.remote(caller.name, asdict(bill))
        except Exception:  # the bill must not fail the request: logged with its traceback
            logger.exception("MAI key ledger: usage not recorded")

    async def usage(self) -> dict[str, Any] | None:
        """Every key's usage; None while the ledger is restarting."""
        if self.local is not None:
            return self.local.snapshot()
        try:
            return await self.ledger.snapshot.remote()
        except transport_errors() as exc:
            logger.warning("MAI key ledger unavailable (%s): usage not read", type(exc).__name__)
            return None


def _too_many(message: str, quota: str, retry_after_s: int) -> RequestError:
    return RequestError(
        message,
        code="rate_limited",
        param=quota,
        status=429,
        headers={"Retry-After": str(max(1, retry_after_s))},
    )


class KeyLedger:
    """The ledger over its own clock; what the deployment serves, and what a lone replica holds."""

    def __init__(self) -> None:
        self.ledger = Ledger()

    def admit(self, key: str, requests_per_minute: int | None, tokens_per_minute: int | None) -> dict | None:
        refusal = self.ledger.admit(key, Quota(requests_per_minute, tokens_per_minute), time.monotonic())
        return None if refusal is None else asdict(refusal)

    def record(self, key: str, bill: dict[str, Any]) -> None:
        self.ledger.record(key, Bill(**bill), time.monotonic())

    def snapshot(self) -> dict[str, Any]:
        return self.ledger.snapshot(time.monotonic())


# One replica: a quota is one count. No CPU of its own: it only adds and compares.
KeyLedgerDeployment = serve.deployment(
    name="KeyLedger", num_replicas=1, max_ongoing_requests=10_000, ray_actor_options={"num_cpus": 0}
)(KeyLedger)
