"""A body's JSON (serve_app/edge/body.py): the nesting check is the pass-by-pass answer it
replaced, on any brackets, in one linear pass; and text that is no Unicode (an escaped lone
surrogate) is a 400 naming its field wherever it is, on every route and in mai-batch, never a 500."""

import json
import time
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batch.inputs import LineError, openai_request, record_request
from batch.inputs import RecordSettings as Records
from serve_app.config import Limits
from serve_app.core.prompts import PromptKind
from serve_app.edge import body as json_body
from serve_app.edge.body import check_structure, nesting_depth, outside_strings, parse_json
from serve_app.edge.errors import RequestError

from ..images import chat_body, data_url
from .fakes import ScriptedVLM
from .ingress_replica import client_of, replica

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


# ---------------------------------------------------------------- text that is no Unicode


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"question": "Is it red\\ud800?"}', "question"),
        (b'{"question": "\\uDFFF"}', "question"),  # a low surrogate alone, upper-case hex
        (b'{"q": "\\ud83d\\ud83d\\ude00"}', "q"),  # a high surrogate before a pair
        (b'{"q": "\\ude00\\ud83d"}', "q"),  # the pair's halves the wrong way round
        (b'{"messages": [{"content": [{"text": "ok"}, {"text": "x\\ud800"}]}]}', "messages.0.content.1.text"),
        (b'{"a": {"\\ud800": 1}}', "a.\\ud800"),  # a key, named with its escape
        (b'[0, ["\\udbff"]]', "1.0"),
    ],
)
def test_a_lone_surrogate_is_a_400_naming_its_field(body, param):
    with pytest.raises(RequestError) as refused:
        parse_json(body)
    error = refused.value
    assert (error.status, error.code, error.param) == (400, "invalid_text", param)
    assert error.message.startswith(f"{param} is not valid Unicode text")
    json.dumps(error.body(), ensure_ascii=False).encode()  # the message itself encodes


def test_json_parsed_out_of_a_field_is_named_under_that_field():
    arguments = json.loads('{"city": ["Paris", "\\ud800"]}')
    with pytest.raises(RequestError) as refused:
        json_body.check_text(arguments, at="messages.1.tool_calls.0.function.arguments")
    assert refused.value.param == "messages.1.tool_calls.0.function.arguments.city.1"
    json_body.check_text(json.loads('{"city": "\\ud83d\\ude00"}'), at="x")  # a pair is a character


def test_a_body_that_is_one_lone_surrogate_is_a_400_too():
    with pytest.raises(RequestError) as refused:
        parse_json(b'"\\ud800"')
    assert (refused.value.code, refused.value.param) == ("invalid_text", None)
    assert refused.value.message.startswith("the JSON body is not valid Unicode text")


@pytest.mark.parametrize(
    ("body", "value"),
    [
        (b'{"q": "\\ud83d\\ude00 \\uD83D\\uDE00"}', {"q": "\U0001f600 \U0001f600"}),  # pairs: characters
        (b'{"q": "\\\\ud800"}', {"q": "\\ud800"}),  # an escaped backslash, then letters
        ('{"q": "é中😀"}'.encode(), {"q": "é中😀"}),
        (b'{"q": "\\u00e9\\ufffd"}', {"q": "é\ufffd"}),
    ],
)
def test_text_that_is_unicode_parses_as_before(body, value):
    assert parse_json(body) == value


def raw(payload) -> bytes:
    """``payload`` as a client's JSON encoder with ASCII escapes sends it, lone surrogates included."""
    return json.dumps(payload).encode()


def chat_with_system(question: str, system) -> dict:
    body = chat_body(question)
    body["messages"].insert(0, {"role": "system", "content": system})
    return body


ANSWER = {"image": data_url(), "question": "Is it red?"}
HTTP_CASES = {
    "cascade question": ("/v1/chat/completions", chat_body("Is it red\ud800?"), "messages.0.content.1.text"),
    "system message": (
        "/v1/chat/completions",
        chat_with_system("Is it red?", "Be brief\udc00."),
        "messages.0.content",
    ),
    "system message part": (
        "/v1/chat/completions",
        chat_with_system("Is it red?", [{"type": "text", "text": "\ud800"}]),
        "messages.0.content.0.text",
    ),
    "another cascade policy": (
        "/v1/chat/completions",
        chat_body("Describe it\ud800", model="mai-small"),
        "messages.0.content.1.text",
    ),
    "choices": (
        "/v1/chat/completions",
        chat_body("Which?", mai={"choices": ["a", "b\ud800"]}),
        "mai.choices.1",
    ),
    "a passthrough message": (
        "/v1/chat/completions",
        {"model": "l", "messages": [{"role": "user", "content": "Hi \ud800"}]},
        "messages.0.content",
    ),
    "answer question": ("/v1/mai/answer", ANSWER | {"question": "Is it red\ud800?"}, "question"),
    "answer choices": ("/v1/mai/answer", ANSWER | {"choices": ["\udfff", "b"]}, "choices.0"),
}


@pytest.mark.parametrize("case", HTTP_CASES)
def test_a_lone_surrogate_on_any_route_is_a_400_naming_the_field_and_no_model_runs(case):
    path, payload, param = HTTP_CASES[case]
    small, large = ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"}), ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"})
    ingress = replica(small, large)
    reply = client_of(ingress).post(path, content=raw(payload), headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert (reply.json()["error"]["code"], reply.json()["error"]["param"]) == ("invalid_text", param)
    assert ingress.metrics.errors == [(400, "invalid_text")]
    assert small.calls == large.calls == []


def test_the_same_requests_without_the_surrogate_are_answered():
    ingress = replica(
        ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"}), ScriptedVLM({PromptKind.SIMPLE: "[[Yes]]"})
    )
    client = client_of(ingress)
    for body in (chat_body("Is it red\U0001f600?"), chat_with_system("Is it red?", "Be brief \U0001f600.")):
        assert client.post("/v1/chat/completions", content=raw(body)).status_code == 200
    assert (
        client.post("/v1/mai/answer", content=raw(ANSWER | {"question": "Red \U0001f600?"})).status_code
        == 200
    )


def test_a_batch_line_with_a_lone_surrogate_is_an_error_line_naming_the_field(tmp_path):
    body = chat_body("Is it red\ud800?")
    line = json.dumps({"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions", "body": body})
    error = openai_request(line, 3)
    assert isinstance(error, LineError)
    assert (error.code, error.param) == ("invalid_text", "body.messages.0.content.1.text")
    assert error.message.startswith("line 3: body.messages.0.content.1.text is not valid Unicode text")
    record = {"id": "r1", "image": data_url(), "question": "Red\udbff?", "answer": "yes", "metric": "exact"}
    error = record_request(json.dumps(record), 4, tmp_path, Records())
    assert isinstance(error, LineError) and (error.code, error.param) == ("invalid_text", "question")
