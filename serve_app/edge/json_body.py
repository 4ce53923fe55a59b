"""A request body as JSON, bounded before it is parsed: nesting depth, keys, values and number size
are read off the bytes in linear time (a few passes of ``bytes`` methods, no backtracking regex), so
the parser, which then runs with no Python hook, never sees a body past a limit. A 400 names the
limit a body passes.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..config import Limits
from .errors import RequestError

_OPENERS_CLOSERS = bytes.maketrans(b"[{]}", b"(())")
_NOT_BRACKETS = bytes(byte for byte in range(256) if byte not in b"[]{}")
_NUMBER_CHARS = b"+-.0123456789eE"


def parse_json(body: bytes, limits: Limits | None = None) -> Any:
    """``body`` as JSON within ``limits``' nesting depth, key, value and number-size bounds (a 400 past
    any of them, or for a body that is not UTF-8 JSON)."""
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
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _invalid(f"the request body is not valid JSON ({exc})") from None
    except RecursionError:  # unreachable past check_structure; the parser's own guard, kept as a 400
        raise _invalid(f"the JSON body nests more than {limits.max_json_depth} levels deep") from None


def outside_strings(body: bytes) -> bytes:
    """The bytes of ``body`` outside its JSON strings: escapes dropped (a pair at a time, left to right,
    as the parser reads them), then every other part between quotes. Exact for valid JSON; for a body
    that is not, at worst a limit is named before the parser would have refused it."""
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(unescaped.split(b'"')[0::2])


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
    past ``limit``. Each pass removes every innermost ``[]``/``{}`` pair, so it takes as many passes as
    the nesting is deep, and at most ``limit`` + 1: linear in the bytes, whatever they hold. Brackets
    that do not pair are the parser's to refuse."""
    brackets = outside.translate(_OPENERS_CLOSERS, delete=_NOT_BRACKETS)
    depth = 0
    while b"()" in brackets:
        if depth == limit:
            return None
        brackets = brackets.replace(b"()", b"")
        depth += 1
    if brackets.count(b"(") > limit:  # unclosed: no valid JSON, but never a deep parse to find out
        return None
    return depth


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
