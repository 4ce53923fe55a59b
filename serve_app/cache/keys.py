"""An answer cache entry: its key (what makes two requests the same question) and its bytes. Pure
functions, no I/O.

A request's cache key hashes (SHA-256) everything that decides its answer:
- each image's bytes (a digest per image, the conversation's included, in order);
- the question in its normal form: the text the question reader kept (without label, instruction or
  options), lower-cased, its spaces collapsed and a closing question mark or full stop dropped, so
  "Is the shape red?" and "is the shape red" meet; its kind, its choices, the options it names, its
  instruction's form, the system messages and the earlier turns as they are;
- the policy and every option that changes the answer (all of them but the stage timeouts), and the
  client's task tag (it picks the question's class, and with it the plan);
- the serving identity (``serving_identity``): the models and the server's answer-changing settings;
- the tenant: the API key's name and digest, or ``shared`` when the config shares the cache.

A key never holds question text or image bytes in the clear: only digests. It names the tenant's
digest and the images' so that an admin can purge by key or by image with a pattern.
Only deterministic answers are keyed (``deterministic``), and only answers run as configured are kept
(``storable``).

An entry's bytes are JSON: the answer (the cascade's result, or a model's reply to a forwarded
request) and when it was made. Read back, they are checked against the answer's schema; anything else
is an ``EntryError``, never an object built from the store's bytes otherwise.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import TypeAdapter, ValidationError

from ..core.contracts import CascadeOptions, Question
from ..core.trace import CascadeResult

PREFIX = "mai:answer:v1"  # every entry's name starts with it; a new entry layout takes a new version
_CLOSING = "?.。？ \t\r\n"  # not "!": "Compute 3!" asks a factorial


class CacheMode(StrEnum):
    """What a request lets the cache do (``mai.cache``; ``Cache-Control`` maps onto it)."""

    USE = "use"  # read, join an identical run in flight, store
    REFRESH = "refresh"  # run afresh and store (Cache-Control: no-cache)
    NO_STORE = "no-store"  # read and join, but keep nothing of this request (Cache-Control: no-store)
    OFF = "off"  # neither (both directives)

    @property
    def reads(self) -> bool:
        return self in (CacheMode.USE, CacheMode.NO_STORE)

    @property
    def writes(self) -> bool:
        return self in (CacheMode.USE, CacheMode.REFRESH)


def requested_mode(option: CacheMode | None, cache_control: str | None) -> CacheMode:
    """The request's mode: its ``mai.cache`` option, else its ``Cache-Control`` header's ``no-cache``
    and ``no-store`` directives (others are ignored: they speak of responses). One pass, linear."""
    if option is not None:
        return option
    directives = {part.strip().lower() for part in (cache_control or "").split(",")}
    no_cache, no_store = "no-cache" in directives, "no-store" in directives
    if no_cache and no_store:
        return CacheMode.OFF
    return CacheMode.REFRESH if no_cache else CacheMode.NO_STORE if no_store else CacheMode.USE


@dataclass(frozen=True)
class CacheKey:
    """One request's entry: its tenant's digest, its images' digests, and the digest of the rest."""

    tenant: str
    images: tuple[str, ...]
    digest: str

    @property
    def name(self) -> str:
        return f"{PREFIX}:{self.tenant}:{'.'.join(self.images) or '-'}:{self.digest}"


def _sha256(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def tenant_of(key_name: str, key_digest: str, *, shared: bool) -> str:
    """The tenant part of a key: a digest of the API key's name and its digest (the server's
    ``sha256`` of it, never the key), or ``shared``. Both: a name alone can pass to another key (keys
    from a list are named by their place in it), and a digest alone is the same for the anonymous
    caller and a batch job's rows."""
    return "shared" if shared else _sha256(f"tenant:{key_name}:{key_digest}")[:32]


def image_digest(image_url: str) -> str:
    """The SHA-256 of an image's bytes (a data URL's decoded payload; any other URL as sent)."""
    head, _, payload = image_url.partition(",")
    if head.startswith("data:") and head.endswith(";base64"):
        try:
            return _sha256(base64.b64decode(payload, validate=False))
        except (binascii.Error, ValueError):
            pass
    return _sha256(image_url)


def normal_question(text: str) -> str:
    """The question's text as keys compare it: lower-cased (``lower``, not ``casefold``: "straße" and
    "STRASSE" stay apart), spaces collapsed, a closing question mark or full stop dropped. Numbers,
    options and words stay as they are."""
    return " ".join(text.lower().split()).rstrip(_CLOSING)


def deterministic(options: CascadeOptions) -> bool:
    """Whether the answer is the same each time: greedy decoding, or sampling under a seed."""
    return options.decoding.temperature == 0 or options.decoding.seed is not None


def serving_identity(parts: Mapping[str, Any]) -> str:
    """A digest of what the server answers with (``parts``: the models and the answer-changing
    settings, as JSON-able values); a change to any of them retires every entry."""
    return _sha256(json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str))[:32]


def cache_key(
    question: Question,
    options: CascadeOptions,
    *,
    task: str | None,
    tenant: str,
    identity: str,
) -> CacheKey | None:
    """The request's key, None when its answer is not deterministic (never cached nor shared)."""
    if not deterministic(options):
        return None
    images = tuple(
        image_digest(url)
        for url in (*(u for turn in question.context for u in turn.images), *question.images)
    )
    material = {
        "question": normal_question(question.question),
        "kind": question.kind,
        "choices": list(question.choices),
        "named": question.options_named,
        "from_text": list(question.choices_from_text),
        "instruction": question.instruction.form if question.instruction else None,
        "system": list(question.system),
        "context": [[turn.role, turn.text, len(turn.images)] for turn in question.context],
        "options": options.model_dump(mode="json", exclude={"timeouts"}),
        "task": task,
        "identity": identity,
    }
    digest = _sha256(json.dumps(material, sort_keys=True, separators=(",", ":")))
    return CacheKey(tenant, images, digest)


def asked_mode(value: object) -> CacheMode | None:
    """A forwarded request's mode: what its ``mai.cache`` says (``ValueError`` for anything but a mode),
    None when it says nothing: a request for a model is cached only when it asks."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"not a mode: {type(value).__name__}")
    return CacheMode(value)


def _digested(value: Any, images: list[str]) -> Any:
    """``value`` (a request body) with each image part's URL replaced by its digest, noted in ``images``."""
    if isinstance(value, dict):
        if value.get("type") == "image_url" and isinstance(value.get("image_url"), dict):
            url = value["image_url"].get("url")
            if isinstance(url, str):
                images.append(image_digest(url))
                return {**value, "image_url": {**value["image_url"], "url": images[-1]}}
        return {key: _digested(item, images) for key, item in value.items()}
    if isinstance(value, list):
        return [_digested(item, images) for item in value]
    return value


def uncached_reason(payload: Mapping[str, Any]) -> str | None:
    """Why a request forwarded to a model has no key: ``stream`` (a stream is relayed as it comes), or
    ``sampled`` (``temperature`` other than 0 without a ``seed``: the engine's own default may sample);
    None when it may be cached."""
    if payload.get("stream"):
        return "stream"
    if payload.get("temperature") != 0 and payload.get("seed") is None:
        return "sampled"
    return None


def passthrough_key(
    payload: Mapping[str, Any], model_id: str, *, tenant: str, identity: str
) -> CacheKey | None:
    """A request forwarded to ``model_id``: its key over the whole body as checked (its images as
    digests); None when it may not be cached (``uncached_reason``)."""
    if uncached_reason(payload) is not None:
        return None
    images: list[str] = []
    body = _digested(dict(payload), images)
    material = {"model": model_id, "body": body, "identity": identity}
    digest = _sha256(json.dumps(material, sort_keys=True, separators=(",", ":"), default=str))
    return CacheKey(tenant, tuple(images), digest)


def storable(result: CascadeResult) -> bool:
    """Whether an answer may be kept: run as configured (not under overload's relaxed thresholds) and
    with no stage failed (a timeout or an engine error is not what the question deserves next time)."""
    return result.trace.overload is None and all(
        stage.status in ("ok", "cancelled") for stage in result.trace.stages
    )


# -- an entry's bytes -------------------------------------------------------------------------------

_RESULT = TypeAdapter(CascadeResult)


class EntryError(ValueError):
    """A kept entry that does not parse as an answer."""


def _finite(value: object) -> float:
    """When an entry was made: a finite number of seconds, else ``ValueError``."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError("created is not a finite time")
    return float(value)


def encode(result: CascadeResult, created: float) -> bytes:
    """An answer as the store keeps it: JSON of the result (its trace without a cache record), and when
    it was made (wall-clock seconds)."""
    bare = dataclasses.replace(result, trace=dataclasses.replace(result.trace, cache=None, trace_id=None))
    return json.dumps(
        {"created": created, "result": dataclasses.asdict(bare)}, separators=(",", ":")
    ).encode()


def decode(value: bytes) -> tuple[CascadeResult, float]:
    """An entry back as the answer and when it was made; ``EntryError`` when it is not one."""
    try:
        data = json.loads(value)
        result = _RESULT.validate_python(data["result"])
        created = _finite(data["created"])
    except (ValueError, TypeError, KeyError, ValidationError, RecursionError) as exc:
        raise EntryError(type(exc).__name__) from None
    if result.trace.route is None:
        raise EntryError("no route")
    return result, created


def encode_reply(body: Mapping[str, Any], created: float) -> bytes:
    """A model's reply to a forwarded request, as the store keeps it."""
    return json.dumps({"created": created, "reply": body}, separators=(",", ":")).encode()


def decode_reply(value: bytes) -> tuple[dict[str, Any], float]:
    """A kept reply and when it was made; ``EntryError`` when it is not one (a chat completion)."""
    try:
        data = json.loads(value)
        reply, created = data["reply"], _finite(data["created"])
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise EntryError(type(exc).__name__) from None
    if not isinstance(reply, dict) or not isinstance(reply.get("choices"), list):
        raise EntryError("not a chat completion")
    return reply, created
