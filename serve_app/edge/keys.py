"""Who is calling: API keys, each with a name, quotas and what it may use.

Three sources, any together (``security`` in the config):

- ``api_keys_env`` (``MAI_API_KEYS``): keys separated by commas, named ``MAI_API_KEYS#1``, ``#2``, ...
- ``api_keys_file``: keys one per line, or several on a line separated by commas as in
  ``MAI_API_KEYS`` (``#`` comment lines; e.g. a mounted Kubernetes Secret), named
  ``api_keys_file#<line>``, or ``api_keys_file#<line>.<n>`` for the n-th of a line's keys.
- ``keys_file``: named keys (YAML or JSON, e.g. a mounted Kubernetes Secret): per key its ``name``,
  the SHA-256 of the key (``mai-keys hash``), and optionally ``requests_per_minute``,
  ``tokens_per_minute``, the ``models`` it may ask for, its engine ``priority``, its ``weight`` under
  pressure and ``admin`` (reads every key's usage).

Both files are read again when they change (a replica looks every ``RELOAD_EVERY_S``), without a
restart: a Kubernetes Secret mounted as a volume is rotated by updating the Secret alone.

Keys from the first two have no limits and are admins, as every key was before named keys. A source
that is configured yet yields no key is an error at start, naming it. Keys are compared as SHA-256
digests in constant time against every configured key; no key is logged or echoed, and a refusal never
says which keys exist.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from ..config import Security
from .errors import RequestError

logger = logging.getLogger("ray.serve")

ANONYMOUS = "anonymous"
RELOAD_EVERY_S = 5.0  # how often a replica looks whether its key files have changed


class NamedKey(BaseModel):
    """One entry of the keys file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A Prometheus label and a statistics key: short, plain.
    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.#-]{0,63}$")
    sha256: str = Field(..., pattern=r"^[0-9a-f]{64}$", description="hex SHA-256 of the key")
    requests_per_minute: int | None = Field(None, ge=1)
    tokens_per_minute: int | None = Field(None, ge=1)
    models: tuple[str, ...] | None = Field(None, description="the `model` values it may ask for; None: all")
    priority: int = Field(0, ge=0, le=1000, description="added to its calls' engine priority (lower first)")
    weight: float = Field(1.0, gt=0, le=1000, description="its share of a full ingress against other keys'")
    admin: bool = False


class KeysFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    keys: tuple[NamedKey, ...] = Field(..., min_length=1)

    @model_validator(mode="after")
    def _distinct(self) -> KeysFile:
        for field in ("name", "sha256"):
            seen: set[str] = set()
            for key in self.keys:
                value = getattr(key, field)
                if value in seen:
                    raise ValueError(f"two keys share the {field} {value if field == 'name' else '(hidden)'}")
                seen.add(value)
        return self


UNLIMITED = {"requests_per_minute": None, "tokens_per_minute": None, "models": None, "admin": True}


@dataclass(frozen=True)
class Caller:
    """The key a request came with (``anonymous`` on an open API) and what it may do."""

    key: NamedKey

    @property
    def name(self) -> str:
        return self.key.name

    def may_use(self, model: str) -> bool:
        return self.key.models is None or model in self.key.models

    def check_model(self, model: str) -> None:
        if not self.may_use(model):
            raise RequestError(
                f"this API key may not use model {model!r}",
                param="model",
                code="model_not_allowed",
                status=403,
            )


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def unlimited(name: str, sha256: str) -> NamedKey:
    return NamedKey(name=name, sha256=sha256, admin=True)


ANONYMOUS_CALLER = Caller(unlimited(ANONYMOUS, "0" * 64))
BATCH_CALLER = Caller(unlimited("mai-batch", "0" * 64))  # a batch job's rows, unless it names a key


def read_key_list(path: Path) -> tuple[NamedKey, ...]:
    """The keys of ``path``, an ``api_keys_file``: one a line or several separated by commas, ``#``
    comment lines; each unlimited. A file that does not read or holds no key is refused."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ValueError(f"security.api_keys_file {path}: {exc.strerror or exc}") from None
    keys: list[NamedKey] = []
    for number, line in enumerate(lines, 1):
        if line.strip().startswith("#"):
            continue
        values = [value.strip() for value in line.split(",") if value.strip()]
        for n, value in enumerate(values, 1):
            name = f"api_keys_file#{number}" + (f".{n}" if len(values) > 1 else "")
            keys.append(unlimited(name, digest(value)))
    if not keys:
        raise ValueError(f"security.api_keys_file {path} holds no key")
    return tuple(keys)


def read_keys_file(path: Path) -> tuple[NamedKey, ...]:
    """The named keys of ``path``; a malformed file or an unknown field is refused naming its line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"security.keys_file {path}: {exc.strerror or exc}") from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ValueError(
            f"security.keys_file {path}{where}: not YAML or JSON ({exc.__class__.__name__})"
        ) from None
    try:
        return KeysFile.model_validate(data).keys
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = tuple(error["loc"])
        line = _line_of(node, loc)
        field = ".".join(str(part) for part in loc) or "the file"
        raise ValueError(
            f"security.keys_file {path} line {line}: {field}: {error['msg']}"
            + (
                f" (the fields: {', '.join(NamedKey.model_fields)})"
                if error["type"] == "extra_forbidden"
                else ""
            )
        ) from None


def _line_of(node: Any, loc: tuple[Any, ...]) -> int:
    """The 1-based line of the YAML node at ``loc`` (as deep as it exists)."""
    line = node.start_mark.line if node is not None else 0
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == part]
            if not match:
                break
            key, node = match[0]
            line = key.start_mark.line
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line
        else:
            break
    return line + 1


class KeyRing:
    """Every configured key of a replica, and who a request's headers name. ``required``: the API's
    exposure requires keys (the application was built with them, ``check_exposure``), so a replica
    that finds none in its own environment and files answers no one (a 503), never anonymously,
    until its keys file gives it some."""

    def __init__(
        self,
        security: Security,
        environ: Mapping[str, str] | None = None,
        *,
        now=time.monotonic,
        required: bool = False,
    ):
        environ = os.environ if environ is None else environ
        self.security, self.now, self.required = security, now, required
        self.fixed = _env_keys(security, environ)
        self.listed: tuple[NamedKey, ...] = ()  # api_keys_file's
        self.named: tuple[NamedKey, ...] = ()  # keys_file's
        self.stamps: dict[str, Stamp] = {}  # each file's, by its config field, when last read
        self.checked_at = now()
        if security.api_keys_file:  # each stamped before it is read: a change while it is read is seen
            path = Path(security.api_keys_file)
            self.stamps["api_keys_file"], self.listed = _stamp(path), read_key_list(path)
        if security.keys_file:
            path = Path(security.keys_file)
            self.stamps["keys_file"], self.named = _stamp(path), read_keys_file(path)

    @classmethod
    def of(cls, keys: tuple[NamedKey, ...]) -> KeyRing:
        """A ring over these keys alone (tests, the batch runner)."""
        ring = cls(Security(api_keys_env=None))
        ring.named = keys
        return ring

    @property
    def keys(self) -> tuple[NamedKey, ...]:
        return self.fixed + self.listed + self.named

    @property
    def open(self) -> bool:
        """Every caller is anonymous: no key configured, and none required."""
        return not self.keys and not self.required

    @property
    def closed(self) -> bool:
        """Keys are required and this replica has none: it answers no one."""
        return self.required and not self.keys

    def reload(self) -> None:
        """Read each key file again when it has changed (at most every ``RELOAD_EVERY_S``); a file that
        no longer reads keeps the keys it had, and says why in the log."""
        security = self.security
        if (
            not (security.api_keys_file or security.keys_file)
            or self.now() - self.checked_at < RELOAD_EVERY_S
        ):
            return
        self.checked_at = self.now()
        if security.api_keys_file:
            self.listed = self._reread("api_keys_file", Path(security.api_keys_file), self.listed)
        if security.keys_file:
            self.named = self._reread("keys_file", Path(security.keys_file), self.named)

    def _reread(self, field: str, path: Path, keys: tuple[NamedKey, ...]) -> tuple[NamedKey, ...]:
        """The keys of ``path`` (``security.<field>``) read again if it has changed since it was last
        read, else ``keys``; ``keys`` too when it no longer reads."""
        stamp = _stamp(path)
        if stamp == self.stamps.get(field):
            return keys
        self.stamps[field] = stamp
        try:
            fresh = read_key_list(path) if field == "api_keys_file" else read_keys_file(path)
        except ValueError as exc:
            logger.error("MAI %s not reloaded, the previous keys stay: %s", field, exc)
            return keys
        logger.info("MAI %s reloaded: %d keys", field, len(fresh))
        return fresh

    def say(self, access: str) -> None:
        """The start-up log's line on this replica's keys (the sources it read when it found none)."""
        if self.closed:
            logger.error(
                "MAI ingress replica serves no one: the application requires API keys and this replica "
                "found none (environment variable %s, api_keys_file %s, keys_file %s)",
                self.security.api_keys_env,
                self.security.api_keys_file,
                self.security.keys_file,
            )
            return
        state = f"required ({len(self.keys)} configured)" if not self.open else f"none: {access} access"
        logger.info("MAI ingress: API keys %s", state)

    def caller_named(self, name: str) -> Caller:
        """The caller of the configured key named ``name`` (a batch job's rows count against it)."""
        for key in self.keys:
            if key.name == name:
                return Caller(key)
        raise ValueError(f"no configured API key is named {name!r}")

    def identify(self, headers: Mapping[str, str]) -> Caller:
        """The caller the headers' key names; anonymous on an open API; else a 401 that names no key."""
        self.reload()
        if self.open:
            return ANONYMOUS_CALLER
        if self.closed:
            raise RequestError(
                f"this server replica answers no one: {NO_KEYS}; retry later",
                code="no_api_keys",
                status=503,
                headers={"Retry-After": "10"},
            )
        presented = presented_key(headers)
        if presented is None:
            raise unauthorized("an API key is required: send Authorization: Bearer <key>")
        offered = hashlib.sha256(presented.encode()).digest()
        found = None
        for key in self.keys:  # every key is compared: the time does not depend on which one matches
            if hmac.compare_digest(offered, bytes.fromhex(key.sha256)):
                found = key
        if found is None:
            raise unauthorized("the API key is not valid")
        return Caller(found)


# Why a replica that requires keys is closed, as a client and /readyz are told it: no variable or file
# is named (the detail, which source was empty, is in the replica's log).
NO_KEYS = "its exposure requires API keys and it found none in its environment or key files"


def _env_keys(security: Security, environ: Mapping[str, str]) -> tuple[NamedKey, ...]:
    variable = security.api_keys_env
    if not variable or variable not in environ:
        return ()
    values = [value.strip() for value in environ[variable].split(",")]
    keys = tuple(unlimited(f"{variable}#{n}", digest(v)) for n, v in enumerate(values, 1) if v)
    if not keys:
        raise ValueError(f"environment variable {variable} is set but holds no key")
    return keys


# What says a file has changed: its modification time, inode and size. The kubelet updates a mounted
# Secret by swapping a symlink to a new file (a new inode), whatever its modification time.
Stamp = tuple[int, int, int] | None


def _stamp(path: Path) -> Stamp:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_ino, stat.st_size


def presented_key(headers: Mapping[str, str]) -> str | None:
    authorization = headers.get("authorization")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return headers.get("x-api-key") or None


def unauthorized(message: str) -> RequestError:
    return RequestError(message, code="invalid_api_key", status=401, headers={"WWW-Authenticate": "Bearer"})


def check_exposure(host: str, ring: KeyRing, security: Security) -> str:
    """How the API is reached: ``keys``, or ``anonymous`` (no key configured: on loopback, or with
    ``security.anonymous: true``); a server bound beyond loopback without keys is refused."""
    if not ring.open:
        return "keys"
    if security.anonymous or _loopback(host):
        return "anonymous"
    raise ValueError(
        f"the server listens on {host} and no API key is configured: set "
        f"{security.api_keys_env or 'MAI_API_KEYS'}, security.api_keys_file or security.keys_file, "
        "or security.anonymous: true to serve without keys"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
