"""A key's admission: its quotas and bill, and its share of a busy replica. Pure: the clock is passed in.

**Quotas and bills.** Per API key: what it may still do this minute (its quotas) and what it has
used (its bill). One ``Ledger`` serves every ingress replica (serve_app/edge/access.py holds it
in a Serve deployment), so a quota holds across replicas. A request is admitted when the key's requests of the
last 60 seconds are under its ``requests_per_minute`` and its tokens, with those its requests still
running may use, leave room for one more request under its ``tokens_per_minute``. A request counts
against the requests at once; against the tokens it counts, while it runs, the key's mean tokens per
request plus one standard deviation (a reservation), and once it has answered what it used. Windows are 60
one-second buckets; a reservation never told of its end lapses after ``RESERVATION_S``.

**Fair share.** How keys share a busy ingress replica: in proportion to their weights, and only while
it is busy. A key is *active* while it has work on the replica (requests in flight, or waiting their turn) or
sent one within the last ``window_s``: a trickle with nothing in flight at the moment is still
there. A key alone may hold what the model deployments take at once (``Capacity.most``): past it a
request would only wait in Serve's queues (on an open API, whose one caller is everyone, a key alone
is never held back). With several active, a key's share of the replica's capacity
is the capacity times its weight over the active keys' weights, at least
one request. The share binds only while the replica is at its capacity or another key's request
waits: a key past its share is let in while there is room and nobody else waits for it (nothing idles
that someone could use), else it waits its turn (``wait``, the caller's to bound) until one of its
requests ends or another key's does. A key that sends less than its weighted share of what the
replica answers a second (both rates decayed over ``rate_tau_s``; every request it sends counts,
refused or not) is let in up to the models' capacity (``Capacity.most``): a trickle is never held
back for its requests being slow, and a flood cannot pass as one. While several keys are active and
the replica is at its capacity it is ``contended``: the server's own work (audits) yields to the
keys'.

Every request let in gets an engine priority rank (lower runs first): the requests its key already has
in flight over its weight, so a trickle's calls pass a flood's in the engines' queues (vLLM's
``scheduling_policy: priority``). Per replica; pure: the caller gives the time. The active keys are
kept in the order they last sent, so each request costs constant time, however many keys there are.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .scaling import DecayedMean, DecayedRate


class FairShare:
    def __init__(self, capacity: Capacity, window_s: float = 10.0, rate_tau_s: float = 30.0):
        self.capacity, self.window_s, self.rate_tau_s = capacity, window_s, rate_tau_s
        self.in_flight: Counter[str] = Counter()
        self.waiting: Counter[str] = Counter()  # requests waiting their turn, per key
        self.total = 0  # requests in flight, every key's
        self.last_sent: OrderedDict[str, float] = OrderedDict()  # active keys, oldest first
        self.weights: dict[str, float] = {}  # of the active keys
        self.active_weight = 0.0
        self.sending: dict[str, DecayedRate] = {}  # of every key that sent (configured keys: bounded)
        self.answering = DecayedRate(rate_tau_s)

    def share(self, key: str) -> float:
        """The requests ``key`` (active) may hold while others are active too: never more than a key
        alone may (the models' capacity), whatever capacity is configured."""
        return max(1.0, self._shared() * self.weights[key] / self.active_weight)

    def contended(self) -> bool:
        return len(self.weights) > 1 and self.total >= self._shared()

    def _shared(self) -> float:
        return min(self.capacity.current(), self.capacity.most)

    def enter(
        self, key: str, weight: float, now: float, *, hold_alone: bool = True, waited: bool = False
    ) -> int | None:
        """The request's engine priority rank, counted in; None when it must wait its turn.
        ``hold_alone``: a key alone is held to the models' capacity (else never held back);
        ``waited``: a request that has waited (``wait``) tries again, ahead of its key's newer ones."""
        self._expire(now)
        if not waited:
            self.sending.setdefault(key, DecayedRate(self.rate_tau_s)).add(now)
        self._activate(key, weight, now)
        if not self._admits(key, weight, now, hold_alone=hold_alone, waited=waited):
            return None
        held = self.in_flight[key]
        self.in_flight[key] += 1
        self.total += 1
        return int(held / weight)

    def _admits(self, key: str, weight: float, now: float, *, hold_alone: bool, waited: bool) -> bool:
        held = self.in_flight[key]
        if not waited and self.waiting[key]:
            return False  # its own earlier requests are waiting: this one goes behind them
        if len(self.weights) == 1:
            return not hold_alone or held < self.capacity.most
        if held < self.share(key):
            return True
        if held >= self.capacity.most:
            return False
        others_wait = sum(self.waiting.values()) > self.waiting[key]
        if self.total < self._shared() and not others_wait:
            return True  # past its share, but nobody else could use what it takes
        fraction = weight / self.active_weight
        return self.sending[key].value(now) <= fraction * self.answering.value(now)  # a trickle

    def wait(self, key: str, weight: float, now: float) -> None:
        """A request of ``key`` waits its turn: the key is active while it does."""
        self._activate(key, weight, now)
        self.waiting[key] += 1

    def stop_waiting(self, key: str) -> None:
        """A waiting request of ``key`` was let in or gave up."""
        self.waiting[key] -= 1
        if self.waiting[key] <= 0:
            del self.waiting[key]

    def leave(self, key: str, now: float, *, answered: bool = True) -> None:
        """A request of ``key`` ended; ``answered``: the models answered it (a refusal for its
        body, its model or a quota is no answer: it would raise the rate trickles are judged by)."""
        self.in_flight[key] -= 1
        self.total -= 1
        if self.in_flight[key] <= 0:
            del self.in_flight[key]
        if answered:
            self.answering.add(now)

    def _activate(self, key: str, weight: float, now: float) -> None:
        if key in self.weights:
            self.active_weight -= self.weights[key]
        self.weights[key] = weight
        self.active_weight += weight
        self.last_sent[key] = now
        self.last_sent.move_to_end(key)

    def _expire(self, now: float) -> None:
        """Keys that last sent before the window and have nothing in flight or waiting are no longer
        active."""
        while self.last_sent:
            key, at = next(iter(self.last_sent.items()))
            if now - at <= self.window_s:
                return
            if self.in_flight[key] > 0 or self.waiting[key] > 0:  # still at work: as if it just sent
                self.last_sent.move_to_end(key)
                self.last_sent[key] = now
                continue
            del self.last_sent[key]  # its sending rate stays, decaying: a flood back is no trickle
            self.active_weight -= self.weights.pop(key)
        self.active_weight = 0.0  # none active: no rounding left over


ALONE_TAU_S = 600.0  # a route's latency alone: its answers of the last ten minutes or so
SMOOTHING = 0.1  # the slowdown's weight of each new answer (about the last ten)


class Capacity:
    """``most``: what the model deployments take at once; ``fixed``: a configured capacity, never
    learned (``ingress.capacity``)."""

    def __init__(self, most: int, *, least: int = 1, tolerance: float = 1.2, fixed: int | None = None):
        self.most, self.least, self.tolerance = most, least, tolerance
        self.fixed = fixed is not None
        self.limit = float(fixed if fixed is not None else most)
        self.slowdown = 1.0
        self.alone: dict[str, DecayedMean] = {}

    def answered(self, route: str, seconds: float, *, alone: bool, in_flight: int, now: float) -> None:
        """A request of ``route`` answered in ``seconds``; ``alone``: nothing else ran meanwhile;
        ``in_flight``: the replica's requests in flight as it ended, itself included."""
        if self.fixed or seconds <= 0:
            return
        if alone:
            self.alone.setdefault(route, DecayedMean(ALONE_TAU_S)).add(now, seconds)
            return
        usual = self.alone.get(route)
        if usual is None or usual.mean() <= 0:
            return
        self.slowdown += SMOOTHING * (seconds / usual.mean() - self.slowdown)
        if self.slowdown > self.tolerance:
            self.limit = max(float(self.least), self.limit * 0.95)
        elif in_flight >= self.limit - 1:
            self.limit = min(float(self.most), self.limit + 1 / self.limit)

    def current(self) -> int:
        """The requests the replica runs at once before it is at capacity."""
        return max(self.least, int(self.limit))


WINDOW_S = 60
RESERVATION_S = 600.0  # a running request's reservation lapses after this, should its end go untold
MEAN_WEIGHT = 0.2  # of the latest request in a key's mean tokens per request


class Window:
    """Amounts of the last ``WINDOW_S`` seconds, in one-second buckets."""

    def __init__(self) -> None:
        self.buckets: deque[list[float]] = deque()  # [second, amount], oldest first

    def _expire(self, now: float) -> None:
        while self.buckets and self.buckets[0][0] <= now - WINDOW_S:
            self.buckets.popleft()

    def add(self, now: float, amount: float) -> None:
        self._expire(now)
        second = math.floor(now)
        if self.buckets and self.buckets[-1][0] == second:
            self.buckets[-1][1] += amount
        else:
            self.buckets.append([second, amount])

    def total(self, now: float) -> float:
        self._expire(now)
        return sum(amount for _, amount in self.buckets)

    def seconds_until_under(self, now: float, limit: float) -> int:
        """Whole seconds until the window's total drops under ``limit`` as its buckets expire."""
        total = self.total(now)
        if total < limit:
            return 0
        for second, amount in self.buckets:
            total -= amount
            if total < limit:
                return max(1, math.ceil(second + WINDOW_S - now))
        return WINDOW_S


@dataclass(frozen=True)
class Quota:
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None


@dataclass(frozen=True)
class Refusal:
    """A request over a quota: which one, its value, and when to try again."""

    quota: str  # requests_per_minute | tokens_per_minute
    limit: int
    retry_after_s: int


@dataclass(frozen=True)
class Bill:
    """What one request of a key used, once it answered (or failed)."""

    tokens: Mapping[str, int] = field(default_factory=dict)  # per model id: prompt + completion
    route: str | None = None  # the cascade's route; None for passthrough and failures
    passthrough: bool = False  # a request forwarded to a model as it is: its tokens that model's
    early_exit: bool = False
    escalated: bool = False
    error: bool = False  # the server failed it (a 5xx)
    rejected: bool = False  # let in, then refused for what it sent (a 4xx: its body, its model)
    reused: bool = False  # answered by the answer cache or an identical run in flight: no tokens


@dataclass
class KeyUsage:
    requests: int = 0
    refused: int = 0  # 429s for a quota
    errors: int = 0
    early_exits: int = 0
    escalations: int = 0
    passthroughs: int = 0
    reused: int = 0  # answers from the answer cache or an identical request's run: billed no tokens
    tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # per model id, all paths
    passthrough_tokens: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # of those

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "refused": self.refused,
            "errors": self.errors,
            "early_exits": self.early_exits,
            "escalations": self.escalations,
            "passthroughs": self.passthroughs,
            "reused": self.reused,
            "tokens": dict(sorted(self.tokens.items())),
            "passthrough_tokens": dict(sorted(self.passthrough_tokens.items())),
        }


class Ledger:
    """The quotas' windows and the usage of every key seen."""

    def __init__(self) -> None:
        self.requests: dict[str, Window] = defaultdict(Window)
        self.tokens: dict[str, Window] = defaultdict(Window)
        self.usage: dict[str, KeyUsage] = defaultdict(KeyUsage)
        self.running: dict[str, deque[float]] = defaultdict(deque)  # admission times, oldest first
        self.mean_tokens: dict[str, float] = {}  # per request, of the key's answered requests
        self.spread_tokens: dict[str, float] = {}  # their variance, as the mean is weighted

    def _expected(self, key: str, now: float) -> float:
        """The tokens the key's running requests may use, and one more request's: each its key's mean
        tokens per request plus one standard deviation (a request's tokens vary with its route)."""
        running = self.running[key]
        while running and running[0] <= now - RESERVATION_S:
            running.popleft()
        per_request = self.mean_tokens.get(key, 0.0) + math.sqrt(self.spread_tokens.get(key, 0.0))
        return per_request * (len(running) + 1)

    def admit(self, key: str, quota: Quota, now: float) -> Refusal | None:
        """None (and the request counted) when ``key`` is under its quotas; else the quota it is over."""
        requests, tokens = self.requests[key], self.tokens[key]
        limit = quota.requests_per_minute
        if limit is not None and requests.total(now) >= limit:
            return self._refuse(
                key, Refusal("requests_per_minute", limit, requests.seconds_until_under(now, limit))
            )
        limit = quota.tokens_per_minute
        if limit is not None and tokens.total(now) + self._expected(key, now) > limit:
            room = max(0.0, limit - self._expected(key, now))
            return self._refuse(
                key, Refusal("tokens_per_minute", limit, tokens.seconds_until_under(now, room))
            )
        requests.add(now, 1)
        self.running[key].append(now)
        self.usage[key].requests += 1
        return None

    def _refuse(self, key: str, refusal: Refusal) -> Refusal:
        self.usage[key].refused += 1
        return refusal

    def record(self, key: str, bill: Bill, now: float) -> None:
        """What an admitted request used, once it has ended (answered or not)."""
        usage = self.usage[key]
        if self.running[key]:
            self.running[key].popleft()
        spent = sum(bill.tokens.values())
        if spent:
            self.tokens[key].add(now, spent)
            mean = self.mean_tokens.get(key)
            if mean is None:
                self.mean_tokens[key], self.spread_tokens[key] = spent, 0.0
            else:
                deviation = spent - mean
                self.mean_tokens[key] = mean + MEAN_WEIGHT * deviation
                variance = self.spread_tokens[key]
                self.spread_tokens[key] = (1 - MEAN_WEIGHT) * (variance + MEAN_WEIGHT * deviation**2)
        for model, count in bill.tokens.items():
            usage.tokens[model] += count
            if bill.passthrough:
                usage.passthrough_tokens[model] += count
        usage.passthroughs += bill.passthrough
        usage.reused += bill.reused
        usage.errors += bill.error
        usage.early_exits += bill.early_exit
        usage.escalations += bill.escalated

    def snapshot(self, now: float) -> dict[str, Any]:
        """Every key's usage since the ledger started, and its windows' totals now."""
        return {
            key: usage.as_dict()
            | {
                "last_minute": {
                    "requests": int(self.requests[key].total(now)),
                    "tokens": int(self.tokens[key].total(now)),
                }
            }
            for key, usage in sorted(self.usage.items())
        }
