"""The server's own draws per request: whether an answer is audited (``audit.is_sampled``) and whether a
request explores (``plan_choice.explore_draw``). They steer what the server learns, so no client may
choose or predict them (docs/api.md, "Audits").

A draw is a uniform number in [0, 1), hashed from:
- with a configured integer ``seed`` (tests, benchmarks): the seed and the client's request id, so a
  rerun with the same ids draws the same. A client that picks its ids then picks its draws: not for a
  server clients reach;
- without one (the default): a keyed hash (HMAC-SHA256) under a secret the replica draws when it starts
  (``new_secret``), of a number the replica gives each of its draws in turn (``DrawIds``). The same
  request id sent twice draws twice, independently, and nothing a client sends or sees predicts either.

Pure: ``uniform`` computes one draw from what it is given; ``DrawIds`` is the replica's count.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import secrets

SECRET_BYTES = 32


def new_secret() -> bytes:
    """A replica's secret: drawn once when it starts, never sent anywhere."""
    return secrets.token_bytes(SECRET_BYTES)


def uniform(purpose: str, seed: int | None, secret: bytes, draw_id: str) -> float:
    """A uniform draw in [0, 1) for ``draw_id``: the seeded hash of ``purpose``, ``seed`` and the id when
    a seed is configured, else the keyed hash of ``purpose`` and the id under ``secret``."""
    if seed is not None:
        digest = hashlib.sha256(f"{purpose}{seed}:{draw_id}".encode()).digest()
    elif not secret:
        raise ValueError("a draw without a configured seed needs the replica's secret")
    else:
        digest = hmac.new(secret, f"{purpose}{draw_id}".encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class DrawIds:
    """What each of a replica's draws of one kind hashes: with a configured seed, the client's request id
    (reproducible); without, the replica's next number (under its secret, unpredictable)."""

    def __init__(self, seed: int | None, secret: bytes | None = None):
        self.seed = seed
        self.secret = secret if secret is not None else new_secret()
        self._numbers = itertools.count()

    def draw_id(self, request_id: str) -> str:
        return request_id if self.seed is not None else str(next(self._numbers))
