"""How keys share a busy ingress replica: in proportion to their weights, and only while it is busy.

A key is *active* while it has work on the replica (requests in flight, or waiting their turn) or
sent one within the last ``window_s``: a trickle with nothing in flight at the moment is still
there. A key alone may hold what the model deployments take at once (``Capacity.most``): past it a
request would only wait in Serve's queues (on an open API, whose one caller is everyone, a key alone
is never held back). With several active, a key's share of the replica's capacity
(serve_app/core/capacity.py) is the capacity times its weight over the active keys' weights, at least
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

from collections import Counter, OrderedDict

from .capacity import Capacity
from .scaling import DecayedRate


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
