"""A request body: its size and read time bounded as it is read (and the bodies read at once per
client), then its JSON, bounded before it is parsed: nesting depth, keys, values and number size
are read off the bytes in linear time (a few passes of ``bytes`` methods and one of numpy over the
brackets, no backtracking regex), so the parser, which then runs with no Python hook, never sees a
body past a limit. A 400 names the limit a body passes. Once parsed, a body whose text is no Unicode
(an escaped lone surrogate, ``"\\ud800"``, which no UTF-8 encoder, tokenizer or reply can carry) is a
400 naming the field, so no text past here fails to encode.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..config import Limits
from .errors import RequestError

_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # an opener +1, a closer -1, as int8
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_NUMBER_CHARS = b"+-.0123456789eE"
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD]")  # a regex finds it many times faster than ``in`` here


def parse_json(body: bytes, limits: Limits | None = None) -> Any:
    """``body`` as JSON within ``limits``' nesting depth, key, value and number-size bounds (a 400 past
    any of them, or for a body that is not UTF-8 JSON), its text all Unicode (``check_text``)."""
    limits = limits or Limits()
    if not body:
        raise RequestError("the request body is empty; send a JSON object", code="invalid_json")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(f"the request body is not valid JSON (not UTF-8: {exc.reason})") from None
    # Every string is a key or a value: more quotes than those bounds allow are refused before the
    # body is split at them (a piece per string would cost many times the body's size in objects).
    strings = body.count(b'"') // 2
    if strings > limits.max_json_keys + limits.max_json_values:
        raise _invalid(f"the JSON body has {strings} strings, more than its keys and values may hold")
    check_structure(outside_strings(body), limits)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid(f"the request body is not valid JSON ({exc})") from None
    except RecursionError:  # unreachable past check_structure; the parser's own guard, kept as a 400
        raise _invalid(f"the JSON body nests more than {limits.max_json_depth} levels deep") from None
    # A surrogate reaches a string only through an escape (UTF-8 has none): the walk runs for a body
    # that holds one, paired (an emoji escaped by an ASCII-only encoder) or not.
    if _SURROGATE_ESCAPE.search(body):
        check_text(value)
    return value


def check_text(value: Any, at: str = "") -> None:
    """A 400 (``invalid_text``, ``param`` the field's path, as ``messages.0.content.1.text``) when a
    string of ``value``, a key or a value, is no Unicode text: it holds a lone surrogate, which
    ``json.loads`` makes of an escape without its pair and no UTF-8 encoder takes. ``at``: the path of
    ``value`` itself, for JSON parsed out of a field (a tool call's arguments)."""
    path = _unencodable(value)
    if path is None:
        return
    field = ".".join([*([at] if at else []), *(_shown(part) for part in path)])
    raise RequestError(
        f"{field or 'the JSON body'} is not valid Unicode text: it holds a lone surrogate (an escape "
        "\\ud800 to \\udfff without its pair), which no model can read",
        param=field or None,
        code="invalid_text",
    )


def _unencodable(value: Any) -> tuple[str | int, ...] | None:
    """The path of the first string of ``value`` (depth first, a key before its value) that UTF-8
    cannot encode, or None. Iterative: the depth is bounded, but never by the interpreter's stack.
    A first walk keeps no paths (most bodies that come here hold pairs, emoji, and pass); the second,
    which does, runs only for a body it refuses."""
    if _all_encode(value):
        return None
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, str):
            if not _encodes(node):
                return path
        elif isinstance(node, dict):
            for key in node:
                if not _encodes(key):
                    return (*path, key)
            stack.extend(((*path, key), item) for key, item in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend(((*path, index), node[index]) for index in range(len(node) - 1, -1, -1))
    return None


def _all_encode(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if not all(map(_encodes, node)):
                return False
            node = node.values()
        elif not isinstance(node, list):
            node = (node,)
        for item in node:
            if isinstance(item, str):
                if not (item.isascii() or _encodes(item)):
                    return False
            elif isinstance(item, dict | list):
                stack.append(item)
    return True


def _encodes(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _shown(part: str | int) -> str:
    """A path's part as a message may carry it: a key's lone surrogate escaped, never sent raw."""
    return str(part) if isinstance(part, int) else part.encode("utf-8", "backslashreplace").decode()


def outside_strings(body: bytes) -> bytes:
    """The bytes of ``body`` outside its JSON strings: escapes dropped (a pair at a time, left to right,
    as the parser reads them), then every other part between quotes. Exact for valid JSON; for a body
    that is not, at worst a limit is named before the parser would have refused it."""
    if b"\\" in body:  # one byte looked for at memchr's speed; the pairs' search is slower
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(body.split(b'"')[0::2]) if b'"' in body else body


def check_structure(outside: bytes, limits: Limits) -> None:
    """A 400 when the JSON text ``outside`` its strings nests past ``max_json_depth``, has more than
    ``max_json_keys`` keys or ``max_json_values`` values, or a number longer than
    ``max_json_number_digits`` characters. Linear in ``len(outside)``."""
    keys = outside.count(b":")
    if keys > limits.max_json_keys:
        raise _invalid(f"the JSON body has more than {limits.max_json_keys} keys")
    values = outside.count(b",")
    if values > limits.max_json_values:
        raise _invalid(
            f"the JSON body has more than {limits.max_json_values} values in its arrays and objects"
        )
    longest = _longest_number(outside, limits.max_json_number_digits)
    if longest is not None:
        raise _invalid(
            f"a number in the JSON body has {longest} characters, over {limits.max_json_number_digits}"
        )
    depth = nesting_depth(outside, limits.max_json_depth)
    if depth is None:
        raise _invalid(f"the JSON body nests more than {limits.max_json_depth} levels deep")


def nesting_depth(outside: bytes, limit: int) -> int | None:
    """How deep arrays and objects nest in ``outside`` (JSON text with its strings removed), or None
    past ``limit``; also None when more than ``limit`` brackets are never closed (no valid JSON, and
    never a deep parse to find out). Brackets that do not pair are the parser's to refuse: the depth
    counts the pairs that close, one inside another.

    Linear: numpy over the brackets as steps (+1, -1), a block at a time. With ``sums`` the running
    sum of the steps, the pairs around a position number its sum less the higher of the lowest sum
    before it (0 at the start; a closer below it closed nothing) and the lowest sum from it on (an
    opener below that is never closed). Valid JSON never goes below 0 and ends at 0: there the depth
    is the highest sum, and one pass of sums, lows and highs finds it. A block that goes below every
    sum before it also takes their running lowest; a depth past ``2 * limit`` ends the pass (the pairs
    or the unclosed brackets under it pass ``limit``). Only when brackets stay unclosed are blocks read
    again, backwards, where the lowest sum from a position on changes."""
    steps = outside.translate(_STEPS, delete=_NOT_BRACKETS)
    blocks: list[tuple[int, int, int, int, int]] = []  # sum and lowest before, low, high, deepest
    level = floor = 0  # the running sum, and the lowest it has been (0 before any step)
    for start in range(0, len(steps), _BLOCK):
        sums = _sums(steps, start, level)
        low, high = int(sums.min()), int(sums.max())
        # The depth counting every bracket still open, closed later or not.
        deepest = int((sums - _lowest_before(sums, floor)).max()) if low < floor else high - floor
        if deepest > 2 * limit:
            return None
        blocks.append((level, floor, low, high, deepest))
        level, floor = int(sums[-1]), min(floor, low)
    unclosed = level - floor
    if unclosed > limit:
        return None
    if unclosed == 0:  # every opener closes: the lowest sum from any position on is below the one before
        depth = max((block[4] for block in blocks), default=0)
        return depth if depth <= limit else None
    depth = 0
    later = _NONE_LATER  # the lowest sum after the block
    for index in range(len(blocks) - 1, -1, -1):
        entry, before, low, high, deepest = blocks[index]
        if later <= min(before, low):  # nothing unclosed under the block: its depth as read
            depth = max(depth, deepest)
        elif low >= before and low >= later:  # both lowest sums the same across the block
            depth = max(depth, high - max(before, later))
        elif high - max(min(before, low), min(low, later)) > depth:  # else it cannot raise the depth
            sums = _sums(steps, index * _BLOCK, entry)
            if low < before:  # the block of the lowest sum of all: a position at a time
                above = np.minimum(np.minimum.accumulate(sums[::-1])[::-1], later)
                depth = max(depth, int((sums - np.maximum(_lowest_before(sums, before), above)).max()))
            else:
                depth = max(depth, _deepest_over(sums, before, later))
        if depth > limit:
            return None
        later = min(later, low)
    return depth


_BLOCK = 1 << 20  # steps a numpy pass takes at once: 4 MiB of int32 sums
_ROW = 1 << 10  # a block's rows, for the lowest sum from a position on (``_deepest_over``)
_NONE_LATER = int(np.iinfo(np.int32).max)


def _sums(steps: bytes, start: int, level: int) -> np.ndarray:
    """The running sum after each of ``steps[start:start + _BLOCK]``, from ``level`` before them."""
    count = min(_BLOCK, len(steps) - start)
    sums = np.cumsum(np.frombuffer(steps, dtype=np.int8, count=count, offset=start), dtype=np.int32)
    sums += level
    return sums


def _lowest_before(sums: np.ndarray, before: int) -> np.ndarray:
    """The lowest of ``before`` and ``sums`` up to each position."""
    return np.minimum(np.minimum.accumulate(sums), before)


def _deepest_over(sums: np.ndarray, before: int, later: int) -> int:
    """The highest of ``sums`` less the higher of ``before`` and the lowest sum from each position on
    (``later`` after the last). Row by row: a row whose lowest is not below all that follows it has
    one such lowest across it, and is read off its highest; the others (one for each value the lowest
    sum from a position on takes, so no more than brackets stay unclosed) a position at a time."""
    whole = len(sums) - len(sums) % _ROW
    rows = sums[:whole].reshape(-1, _ROW)
    lows, highs = rows.min(axis=1), rows.max(axis=1)
    if whole < len(sums):
        lows = np.concatenate((lows, sums[whole:].min(keepdims=True)))
        highs = np.concatenate((highs, sums[whole:].max(keepdims=True)))
    following = np.concatenate((np.minimum.accumulate(lows[::-1])[::-1][1:], np.array([later], np.int32)))
    np.minimum(following, later, out=following)  # the lowest sum after each row
    alike = lows >= following
    deepest = int((highs[alike] - np.maximum(following[alike], before)).max(initial=0))
    for row in np.flatnonzero(~alike):
        part = sums[row * _ROW : (row + 1) * _ROW]
        floors = np.minimum(np.minimum.accumulate(part[::-1])[::-1], following[row])
        deepest = max(deepest, int((part - np.maximum(floors, before)).max()))
    return deepest


_NUMBER_RUN = re.compile(rb"[-+.0-9eE]+")


def _longest_number(outside: bytes, limit: int) -> int | None:
    """The length of the first run of number characters longer than ``limit``, else None."""
    marked = outside.translate(bytes.maketrans(_NUMBER_CHARS, b"#" * len(_NUMBER_CHARS)))
    start = marked.find(b"#" * (limit + 1))
    if start < 0:
        return None
    run = _NUMBER_RUN.match(outside, start)
    assert run is not None, "a run of number characters starts where the marks do"
    return len(run.group())


def _invalid(message: str) -> RequestError:
    return RequestError(message, code="invalid_json")


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
