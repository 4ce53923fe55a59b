"""How keys share a full ingress replica: in proportion to their weights.

The capacity is what the model deployments take at once (``AppConfig.model_capacity``, over the
ingress replicas): past it, calls wait in Serve's queues in arrival order, where no priority reaches.
While a replica has fewer than half its capacity in flight, or one key alone has requests in flight,
every request is let in. Beyond that a key already holding its weighted share of the capacity (its
weight over the weights of the keys with requests in flight, itself included) is refused until one of
its requests ends; so one key's flood leaves room for another's trickle. Every request let in gets
an engine priority rank (lower runs first): the requests its key already has in flight over its
weight, so a trickle's calls pass a flood's in the engines' queues (vLLM's ``scheduling_policy:
priority``). Per replica; pure.
"""

from __future__ import annotations

from collections import Counter


class FairShare:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self.in_flight: Counter[str] = Counter()
        self.weights: dict[str, float] = {}

    def share(self, key: str, weight: float) -> float:
        """The requests ``key`` may hold while the replica is busy."""
        active = {name: self.weights[name] for name in self.in_flight} | {key: weight}
        return max(1.0, self.capacity * weight / sum(active.values()))

    def enter(self, key: str, weight: float) -> int | None:
        """The request's engine priority rank, counted in; None when ``key`` is over its share."""
        busy = sum(self.in_flight.values()) >= self.capacity / 2
        shared = any(name != key for name in self.in_flight)
        if busy and shared and self.in_flight[key] >= self.share(key, weight):
            return None
        rank = int(self.in_flight[key] / weight)
        self.in_flight[key] += 1
        self.weights[key] = weight
        return rank

    def leave(self, key: str) -> None:
        self.in_flight[key] -= 1
        if self.in_flight[key] <= 0:
            del self.in_flight[key]
            self.weights.pop(key, None)
