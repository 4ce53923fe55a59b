"""Downloading a remote image (``http(s)://`` image URLs), when the server allows it, without letting a
request reach what it should not.

- the host must be on the configured allowlist (``images.example.com``, or ``*.example.com`` for its
  subdomains);
- every address the host resolves to must be a public one: private, loopback, link-local (cloud
  metadata at 169.254.169.254), multicast, reserved and unspecified addresses are refused, and the
  connection goes to the address that was checked (no second DNS lookup to rebind);
- redirects are followed by hand, at most ``MAX_REDIRECTS``, each hop checked like the first;
- the body is read up to the image byte limit and the whole download has a deadline.

Every refusal is a ``RequestError`` (400, or 413 for size) naming the reason.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

from .errors import RequestError

MAX_REDIRECTS = 3
Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class RemoteImagePolicy:
    allowed_hosts: tuple[str, ...]
    max_bytes: int
    timeout_s: float
    allow_private_networks: bool = False  # only for image stores inside a trusted network


def host_allowed(host: str, allowed_hosts: Sequence[str]) -> bool:
    host = host.lower().rstrip(".")
    for entry in allowed_hosts:
        entry = entry.lower().rstrip(".")
        if entry.startswith("*."):
            if host.endswith(entry[1:]) and host != entry[2:]:
                return True
        elif host == entry:
            return True
    return False


def address_is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not (ip.is_multicast or ip.is_reserved or ip.is_unspecified)


async def resolve(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return sorted({str(info[4][0]) for info in infos})


def check_remote_url(url: str, policy: RemoteImagePolicy, *, param: str) -> None:
    """The URL's own checks (scheme, no credentials, host on the allowlist), before any network use."""
    _checked_target(url, policy, param)


def _checked_target(url: str, policy: RemoteImagePolicy, param: str) -> tuple[str, str, int]:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError:
        raise RequestError(
            f"the image URL {url[:100]!r} is malformed", param=param, code="invalid_image"
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RequestError(
            f"the image URL {url[:100]!r} is not an http(s) URL with a host",
            param=param,
            code="invalid_image",
        )
    if parts.username or parts.password:
        raise RequestError(
            "image URLs with credentials are not accepted", param=param, code="remote_image_forbidden"
        )
    if not host_allowed(parts.hostname, policy.allowed_hosts):
        raise RequestError(
            f"image host {parts.hostname!r} is not on this server's allowlist",
            param=param,
            code="remote_image_forbidden",
        )
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port


async def fetch_image(
    url: str, policy: RemoteImagePolicy, *, param: str, resolver: Resolver = resolve
) -> bytes:
    """The image's bytes, or a ``RequestError`` saying why not."""
    try:
        return await asyncio.wait_for(_fetch(url, policy, param, resolver), policy.timeout_s)
    except TimeoutError:
        raise RequestError(
            f"the image download did not finish within {policy.timeout_s:g} s",
            param=param,
            code="remote_image_timeout",
        ) from None


async def _fetch(url: str, policy: RemoteImagePolicy, param: str, resolver: Resolver) -> bytes:
    import httpx

    async with httpx.AsyncClient(follow_redirects=False, trust_env=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            scheme, host, port = _checked_target(url, policy, param)
            try:
                addresses = await resolver(host, port)
            except OSError:
                raise RequestError(
                    f"image host {host!r} does not resolve", param=param, code="remote_image_failed"
                ) from None
            if not addresses:
                raise RequestError(
                    f"image host {host!r} does not resolve", param=param, code="remote_image_failed"
                )
            if not policy.allow_private_networks and not all(address_is_public(a) for a in addresses):
                raise RequestError(
                    f"image host {host!r} resolves to a private, loopback or link-local address",
                    param=param,
                    code="remote_image_forbidden",
                )
            address = addresses[0]
            pinned = f"[{address}]" if ":" in address else address
            parts = urlsplit(url)
            target = parts._replace(netloc=f"{pinned}:{port}").geturl()
            headers = {"host": parts.netloc.rsplit("@", 1)[-1], "accept": "image/*"}
            try:
                async with client.stream(
                    "GET",
                    target,
                    headers=headers,
                    extensions={"sni_hostname": host} if scheme == "https" else {},
                ) as response:
                    if response.is_redirect:
                        location = response.headers.get("location")
                        if not location:
                            raise RequestError(
                                "the image URL redirects nowhere", param=param, code="remote_image_failed"
                            )
                        url = urljoin(url, location)
                        continue
                    if response.status_code != 200:
                        raise RequestError(
                            f"the image URL answered HTTP {response.status_code}",
                            param=param,
                            code="remote_image_failed",
                        )
                    declared = response.headers.get("content-length")
                    if declared and declared.isdigit() and int(declared) > policy.max_bytes:
                        raise _too_large(policy, param)
                    body = bytearray()
                    async for chunk in response.aiter_bytes():
                        body += chunk
                        if len(body) > policy.max_bytes:
                            raise _too_large(policy, param)
                    return bytes(body)
            except httpx.HTTPError as exc:
                raise RequestError(
                    f"the image download failed ({type(exc).__name__})",
                    param=param,
                    code="remote_image_failed",
                ) from None
    raise RequestError(
        f"the image URL redirects more than {MAX_REDIRECTS} times", param=param, code="remote_image_failed"
    )


def _too_large(policy: RemoteImagePolicy, param: str) -> RequestError:
    return RequestError(
        f"the image is larger than the limit of {policy.max_bytes} bytes",
        param=param,
        code="image_too_large",
        status=413,
    )
