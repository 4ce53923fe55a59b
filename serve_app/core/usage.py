"""Per API key: what it may still do this minute (its quotas) and what it has used (its bill).

One ``Ledger`` serves every ingress replica (serve_app/fleet/key_ledger.py holds it in a Serve
deployment), so a quota holds across replicas. A request is admitted when the key's requests of the
last 60 seconds are under its ``requests_per_minute`` and its tokens, with those its requests still
running may use, leave room for one more request under its ``tokens_per_minute``. A request counts
against the requests at once; against the tokens it counts, while it runs, the key's mean tokens per
request plus one standard deviation (a reservation), and once it has answered what it used. Windows are 60
one-second buckets; a reservation never told of its end lapses after ``RESERVATION_S``. Pure: the
clock is passed in.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

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


@dataclass
class KeyUsage:
    requests: int = 0
    refused: int = 0  # 429s for a quota
    errors: int = 0
    early_exits: int = 0
    escalations: int = 0
    passthroughs: int = 0
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
