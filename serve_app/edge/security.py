"""Request-body limits for the ingress: how much, how slowly and how many at once from one sender (an
API key, or an address without one; API keys: serve_app/edge/keys.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager

from .errors import RequestError


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
    """The request bodies an ingress replica is reading, per sender (a named key, or an anonymous
    client's address): past ``per_client`` at once from one sender, a 429 (slow senders cannot take
    every slot, and one key's senders never hold back another key's; the deadline of ``read_body``
    bounds how long any sender holds one). Senders are kept only while a body of theirs is being
    read."""

    def __init__(self, per_client: int):
        self.per_client = per_client
        self.reading: Counter[str] = Counter()

    @contextmanager
    def from_client(self, sender: str) -> Iterator[None]:
        if self.reading[sender] >= self.per_client:
            raise RequestError(
                f"{self.per_client} request bodies of yours (your API key's, or your address's "
                "without one) are already being read; send fewer at once",
                code="too_many_requests",
                status=429,
                headers={"Retry-After": "1"},
            )
        self.reading[sender] += 1
        try:
            yield
        finally:
            self.reading[sender] -= 1
            if not self.reading[sender]:
                del self.reading[sender]


def _too_large(size: int | None, limit: int) -> RequestError:
    what = f"{size} bytes" if size is not None else "more bytes"
    return RequestError(
        f"the request body has {what}, over the limit of {limit}", code="request_too_large", status=413
    )
