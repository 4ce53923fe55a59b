"""A body's JSON (serve_app/edge/json_body.py): the nesting check is the pass-by-pass answer it
replaced, on any brackets, in one linear pass."""

import time
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serve_app.config import Limits
from serve_app.edge import json_body
from serve_app.edge.errors import RequestError
from serve_app.edge.json_body import check_structure, nesting_depth, outside_strings

# ---------------------------------------------------------------- the nesting depth

_PAIRS = bytes.maketrans(b"[{]}", b"(())")
_OTHERS = bytes(byte for byte in range(256) if byte not in b"[]{}")


def depth_by_passes(outside: bytes, limit: int) -> int | None:
    """The answer by brute force, as the check gave it before it was one pass: each pass removes every
    innermost pair, as many passes as the pairs nest; None past ``limit``, or when more than ``limit``
    openers are left unclosed."""
    brackets = outside.translate(_PAIRS, delete=_OTHERS)
    depth = 0
    while b"()" in brackets:
        if depth == limit:
            return None
        brackets = brackets.replace(b"()", b"")
        depth += 1
    return None if brackets.count(b"(") > limit else depth


def small_blocks():
    """The check with blocks of 5 brackets and rows of 2, so short inputs cross their edges."""
    return mock.patch.multiple(json_body, _BLOCK=5, _ROW=2)


brackets = st.binary(max_size=80).map(lambda raw: bytes(b"[]{}x"[byte % 5] for byte in raw))
runs = st.lists(st.tuples(st.sampled_from([b"[", b"]", b"{", b"}", b", "]), st.integers(1, 12)), max_size=12)


@settings(max_examples=600, deadline=None)
@given(brackets, st.integers(0, 12))
def test_the_depth_is_the_pass_by_pass_answer_on_any_brackets(outside, limit):
    expected = depth_by_passes(outside, limit)
    assert nesting_depth(outside, limit) == expected
    with small_blocks():
        assert nesting_depth(outside, limit) == expected


@settings(max_examples=400, deadline=None)
@given(runs, st.integers(0, 12))
def test_the_depth_is_the_pass_by_pass_answer_on_runs_of_brackets(pieces, limit):
    outside = b"".join(piece * count for piece, count in pieces)
    expected = depth_by_passes(outside, limit)
    assert nesting_depth(outside, limit) == expected
    with small_blocks():
        assert nesting_depth(outside, limit) == expected


def crafted() -> dict[str, bytes]:
    return {
        "empty": b"",
        "no brackets": b"1, 2: 3",
        "flat": b"[]" * 50,
        "at the limit": b"[" * 8 + b"]" * 8,
        "past the limit": b"[" * 9 + b"]" * 9,
        "pairs past the limit inside unclosed ones": b"[" * 3 + b"{" * 9 + b"}" * 9,
        "closers that close nothing first": b"]" * 40 + b"[" * 8 + b"]" * 8,
        "closers that close nothing between": (b"[[]]]]" * 20) + b"[]",
        "unclosed, spread": (b"[" + b"[][[]]" * 7) * 8,
        "unclosed past the limit, spread": (b"[" + b"[]" * 3) * 9,
        "unclosed under pairs past the limit": b"[" * 4 + (b"[" * 9 + b"]" * 9) * 3,
        "both under the limit, together past twice it": b"[" * 8 + b"[" * 8 + b"]" * 8,
        "a dip then unclosed": b"[[]]]]" + b"[" * 5 + b"[[]]",
        "mismatched kinds": b"[}{]" * 10,
        "depth at the end only": b"[]" * 30 + b"{" * 8 + b"}" * 8,
        "unclosed at the end only": b"[]" * 30 + b"[" * 8,
    }


@pytest.mark.parametrize("limit", [4, 8, 9])
@pytest.mark.parametrize("name", crafted())
def test_the_depth_is_the_pass_by_pass_answer_on_crafted_brackets(name, limit):
    outside = crafted()[name]
    expected = depth_by_passes(outside, limit)
    assert nesting_depth(outside, limit) == expected
    with small_blocks():
        assert nesting_depth(outside, limit) == expected


def test_depths_across_blocks_of_the_real_size():
    block = json_body._BLOCK
    cases = {
        b"[" * 32 + b"]" * 32: 32,  # inside one block
        b"[]" * (block // 2 - 10) + b"[" * 20 + b"]" * 20: 20,  # across the edge
        b"]" * (block + 3) + b"[" * 30 + b"]" * 30: 30,  # closers that close nothing, a block of them
        (b"[" + b"[]" * (block // 4)) * 5 + b"[[]]": 2,  # unclosed ones in several blocks
        (b"[" + b"[]" * (block // 4)) * 5 + b"[" * 31 + b"]" * 31: 31,  # 31 pairs over 5 unclosed
        (b"[" + b"[]" * (block // 4)) * 5 + b"[" * 33 + b"]" * 33: None,
    }
    for outside, expected in cases.items():
        assert nesting_depth(outside, 32) == expected == depth_by_passes(outside, 32)


@pytest.mark.parametrize(
    "outside",
    [
        b"[" * (8 << 20) + b"]" * (8 << 20),  # nested: up to 33 passes of the whole body before
        (b"[" * 32 + b"]" * 32) * (1 << 18),  # at the limit everywhere: no pass ends early
        (b"[" + b"[]" * (1 << 18)) * 32,  # 32 unclosed openers spread over the body
        b"][]" * (5 << 20),  # a closer that closes nothing every third bracket
    ],
    ids=["nested", "at-the-limit", "unclosed-spread", "closers-spread"],
)
def test_sixteen_megabytes_of_brackets_cost_a_fraction_of_a_second(outside):
    fastest = float("inf")
    for _ in range(3):
        started = time.thread_time()  # the check's own time, whatever else the machine runs
        try:
            check_structure(outside, Limits())
        except RequestError:
            pass
        fastest = min(fastest, time.thread_time() - started)
    assert fastest < 1.0  # tens of milliseconds; the pass-by-pass check took seconds on the first


def test_outside_strings_skips_no_escape_and_drops_strings_escapes_included():
    assert outside_strings(b"[1, [2]]") == b"[1, [2]]"
    assert outside_strings(b'{"a\\\\": "[\\"]", "b": [1]}') == b"{: , : [1]}"
    assert outside_strings(b'["\\\\\\"[", 2]') == b"[, 2]"
