"""How many requests an ingress replica runs at once before its answers slow: its capacity, learned
from its answers' latency.

Where the engines batch for free (a GPU decoding), latency barely moves with the requests in flight
and the capacity stays at what the model deployments take at once (``most``). Where every request in
flight slows the others (vLLM on CPU cores), the capacity falls until the answers are about as fast as
they are alone. What counts as fast is per route (an early exit is quicker than an escalation): each
route's latency alone is the decayed mean of its answers that ran with nothing else in flight. Every
other answer of a route with such a mean adds its latency over that mean to a smoothed slowdown; past
``tolerance`` the capacity shrinks by a twentieth, else, while the replica runs near its capacity, it
grows by one over itself (additive increase, multiplicative decrease). Until a route has answered
alone, its answers move nothing: a replica that has never run a request alone keeps ``most``.

Keys share the capacity when several send at once (serve_app/core/fair_share.py). Per replica; pure:
the caller gives the time.
"""

from __future__ import annotations

from .scaling import DecayedMean

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
