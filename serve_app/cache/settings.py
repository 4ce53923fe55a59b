"""The app config's ``cache`` section: whether final answers are reused and shared by identical
requests in flight, where the entries live, and for how long (docs/cache.md).

The store is this ingress replica's memory (the embedded default: bounded in bytes, entries expire
after ``ttl_s``), or a Redis (or Valkey) server every ingress replica and ``mai-batch`` share, named by
``url``. A URL that does not parse is refused here, at start, naming what is wrong (never its password).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator

from deployments.settings import Strict

REDIS_SCHEMES = ("redis", "rediss", "unix")


class CacheSettings(Strict):
    """The ``cache`` section. Its errors never echo what was sent: a URL may carry a password."""

    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    enabled: bool = True
    # A Redis or Valkey server: redis://[:password@]host:port/db, rediss:// (TLS), unix:///path.sock.
    # None: each ingress replica keeps its own entries in memory.
    url: str | None = Field(None, max_length=2048)
    # The in-process store's bound: least recently used entries go first once it is full.
    max_bytes: int = Field(64 * 1024 * 1024, ge=4096)
    ttl_s: float = Field(3600.0, gt=0, le=30 * 86400, allow_inf_nan=False)
    # False: a key's cached answers are served to that key only. True: to every key (one tenant).
    shared: bool = False
    # Identical requests in flight share one run (the first one's); the others wait for its answer.
    coalesce: bool = True
    # The longest a request waits on the store (a Redis lookup or write); past it the request runs as
    # a miss and a Redis is left alone for ``retry_after_s``.
    # Wall time, the replica's event loop included: a busy replica takes longer than the network does.
    lookup_timeout_s: float = Field(0.2, gt=0, le=5, allow_inf_nan=False)
    retry_after_s: float = Field(30.0, gt=0, le=3600, allow_inf_nan=False)
    # Part of the serving identity every key carries: change it to retire every entry at once (e.g.
    # after retraining weights served from a local folder without a revision).
    namespace: str = Field("", max_length=64, pattern=r"^[A-Za-z0-9._-]*$")

    @field_validator("url")
    @classmethod
    def _redis_url(cls, url: str | None) -> str | None:
        if url is not None:
            problem = url_problem(url)
            if problem is not None:
                raise ValueError(f"cache.url {redacted(url)!r} {problem}")
        return url


def url_problem(url: str) -> str | None:
    """What is wrong with a Redis URL, None when nothing is."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"does not parse ({str(exc).lower()})"
    if parts.scheme not in REDIS_SCHEMES:
        return f"has scheme {parts.scheme!r}: one of {', '.join(s + '://' for s in REDIS_SCHEMES)}"
    if parts.scheme == "unix":
        return None if parts.path else "names no socket path"
    if not parts.hostname:
        return "names no host"
    if port is not None and not 0 < port < 65536:
        return f"has port {port}, outside 1-65535"
    database = parts.path.strip("/")
    if database and not database.isdigit():
        return f"names database {database!r}: a number"
    return None


def redacted(url: str) -> str:
    """``url`` without its user, password or query (redis-py reads a password there too), for errors,
    logs and the statistics, whether or not the rest parses."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        scheme, rest = "", url
    if "@" in rest:  # a password may hold "/": the host follows the last "@"
        rest = "***@" + rest.rpartition("@")[2]
    if "?" in rest:
        rest = rest.partition("?")[0] + "?***"
    return f"{scheme}{separator}{rest}"
