"""How long a replica drains before Serve stops it: each deployment's ``graceful_shutdown_timeout_s``.

When a deployment scales down, or a config edit or an upgrade replaces its replicas, Serve stops
sending to the replicas it retires and waits up to their graceful shutdown timeout for the calls they
hold; whatever still runs then is killed, and its client gets an error. Serve's default is 20 s, while
a call may run for as long as its request's timeout. So every deployment's timeout is derived from
the config's own: a model replica (and the attention scorer) outlives the longest call it can be
given, an ingress replica the longest request it can hold. A drain ends as soon as its last call
does, so a long timeout costs nothing when the replica is idle.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# Beyond the longest call: the time a call takes to reach the replica, and its reply to leave.
DRAIN_MARGIN_S = 10.0
# Past the request's deadline (where a streamed reply ends itself), when a stream nobody reads gives
# its admission back (serve_app/edge/held_stream.py): an ingress drains that much longer.
STREAM_BACKSTOP_S = 5.0
# The statistics holder and the key ledger answer each call in milliseconds: Serve's own default.
FLEET_DRAIN_S = 20.0


def longest_call_s(request_timeout_s: float, stage_timeouts_s: Iterable[float | None]) -> float:
    """The longest a call to a model (or the scorer) can run: every call belongs to a request (a
    cascade stage, an audit, a passthrough), which ends at its ``request_timeout_s``; a stage timeout
    above it changes nothing, but counts if configured so."""
    return max([request_timeout_s, *(s for s in stage_timeouts_s if s is not None)])


# The deployments of a config whose timeouts are derived (the fleet's are FLEET_DRAIN_S).
DRAINED = ("small", "large", "ingress", "scorer")


@dataclass(frozen=True)
class Drains:
    """The graceful shutdown timeouts of one application: a model's (and the scorer's) is its longest
    call and a margin; an ingress's the longest request it holds (its body read, its wait for a share,
    for the models and for its remote images: ``held_s``; then the request's own timeout and a
    stream's backstop) and a margin."""

    request_timeout_s: float
    stage_timeouts_s: tuple[float | None, ...]
    held_s: float

    def model_s(self) -> float:
        return longest_call_s(self.request_timeout_s, self.stage_timeouts_s) + DRAIN_MARGIN_S

    def ingress_s(self) -> float:
        return self.held_s + self.request_timeout_s + STREAM_BACKSTOP_S + DRAIN_MARGIN_S

    def of(self, deployment: str, configured: float | None) -> float:
        """The timeout of ``deployment`` (``ingress``, a model's role, ``transfer_selection.scorer``):
        ``configured`` when set (at least the derived one, else a ``ValueError`` naming both), else the
        derived one."""
        if deployment == "ingress":
            floor_s, what = self.ingress_s(), "the longest request it holds"
        else:
            floor_s = self.model_s()
            what = f"the longest call ({self.request_timeout_s:g} s request_timeout_s) and a margin"
        if configured is None:
            return floor_s
        if configured < floor_s:
            raise ValueError(
                f"{deployment}.graceful_shutdown_timeout_s {configured:g} s is shorter than {what} "
                f"({floor_s:g} s): Serve would stop the replica with calls still running on a "
                "scale-down or an upgrade; remove it (it is derived) or raise it"
            )
        return configured
