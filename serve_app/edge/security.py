"""API keys and request-body limits for the ingress.

Keys come from an environment variable (comma-separated) and/or a file (one per line; blank lines and
``#`` comments skipped), read when a replica starts. A client presents one as ``Authorization: Bearer
<key>`` (what OpenAI clients send) or ``x-api-key: <key>``. Keys are compared in constant time against
every configured key, and never logged or echoed.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from ..config import Security
from .errors import RequestError


def load_api_keys(security: Security, environ: Mapping[str, str] | None = None) -> tuple[bytes, ...]:
    """The SHA-256 digests of the configured keys; empty when none is configured (the API is open)."""
    environ = os.environ if environ is None else environ
    keys: list[str] = []
    if security.api_keys_env and environ.get(security.api_keys_env):
        keys += [key.strip() for key in environ[security.api_keys_env].split(",")]
    if security.api_keys_file:
        path = Path(security.api_keys_file)
        try:
            lines = path.read_text().splitlines()
        except OSError as exc:
            raise ValueError(f"security.api_keys_file {path}: {exc.strerror or exc}") from None
        keys += [line.strip() for line in lines if not line.strip().startswith("#")]
        if not any(keys):
            raise ValueError(f"security.api_keys_file {path} holds no key")
    return tuple(hashlib.sha256(key.encode()).digest() for key in keys if key)


def presented_key(headers: Mapping[str, str]) -> str | None:
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return headers.get("x-api-key") or None


def check_api_key(headers: Mapping[str, str], keys: tuple[bytes, ...]) -> None:
    """Nothing when the API is open or a valid key is presented; else a 401."""
    if not keys:
        return
    key = presented_key(headers)
    if key is None:
        raise _unauthorized("an API key is required: send Authorization: Bearer <key>")
    digest = hashlib.sha256(key.encode()).digest()
    matched = False
    for known in keys:  # every key is compared, so the time does not depend on which one matches
        matched |= hmac.compare_digest(digest, known)
    if not matched:
        raise _unauthorized("the API key is not valid")


def _unauthorized(message: str) -> RequestError:
    return RequestError(message, code="invalid_api_key", status=401, headers={"WWW-Authenticate": "Bearer"})


async def read_body(
    headers: Mapping[str, str], chunks: AsyncIterator[bytes], limit: int, timeout_s: float | None = None
) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit`` bytes (from its
    Content-Length, or while reading a body sent without one), and with 408 when it has not all
    arrived within ``timeout_s`` (a client sending a byte at a time holds an ingress slot no longer)."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    body = bytearray()

    async def read() -> None:
        async for chunk in chunks:
            body.extend(chunk)
            if len(body) > limit:
                raise _too_large(None, limit)

    try:
        await asyncio.wait_for(read(), timeout_s)
    except TimeoutError:
        raise RequestError(
            f"the request body did not arrive within {timeout_s:g} s ({len(body)} bytes came)",
            code="body_timeout",
            status=408,
        ) from None
    return bytes(body)


class BodyReads:
    """The request bodies an ingress replica is reading, per client address: past ``per_client`` at
    once from one address, a 429 (slow senders from one address cannot take every slot; the deadline
    of ``read_body`` bounds how long any sender holds one). Addresses are kept only while a body from
    them is being read."""

    def __init__(self, per_client: int):
        self.per_client = per_client
        self.reading: Counter[str] = Counter()

    @contextmanager
    def from_client(self, address: str) -> Iterator[None]:
        if self.reading[address] >= self.per_client:
            raise RequestError(
                f"{self.per_client} request bodies from your address are already being read; send "
                "fewer at once",
                code="too_many_requests",
                status=429,
                headers={"Retry-After": "1"},
            )
        self.reading[address] += 1
        try:
            yield
        finally:
            self.reading[address] -= 1
            if not self.reading[address]:
                del self.reading[address]


def _too_large(size: int | None, limit: int) -> RequestError:
    what = f"{size} bytes" if size is not None else "more bytes"
    return RequestError(
        f"the request body has {what}, over the limit of {limit}", code="request_too_large", status=413
    )
