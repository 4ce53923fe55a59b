"""Serve's proxy keeps a client's W3C trace context only when trusted, and then only a well-formed one."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient
from starlette.websockets import WebSocket

from serve_app.telemetry.proxy import (
    MAX_TRACESTATE_BYTES,
    TraceContextGuard,
    kept_headers,
    middlewares,
    valid_traceparent,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{PARENT_ID}-01".encode()
OTHER_VALID = f"00-{'a' * 32}-{'b' * 16}-00".encode()


# --- valid_traceparent -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [VALID, OTHER_VALID, f"00-{TRACE_ID}-{PARENT_ID}-ff".encode()])
def test_a_well_formed_traceparent_is_valid(value: bytes) -> None:
    assert valid_traceparent(value)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(VALID.upper(), id="uppercase hex"),
        pytest.param(f"00-{TRACE_ID.upper()}-{PARENT_ID}-01".encode(), id="uppercase trace id"),
        pytest.param(f"00-{TRACE_ID}-{PARENT_ID}-0A".encode(), id="uppercase flags"),
        pytest.param(f"00-{'0' * 32}-{PARENT_ID}-01".encode(), id="all-zero trace id"),
        pytest.param(f"00-{TRACE_ID}-{'0' * 16}-01".encode(), id="all-zero parent id"),
        pytest.param(f"01-{TRACE_ID}-{PARENT_ID}-01".encode(), id="version 01"),
        pytest.param(f"ff-{TRACE_ID}-{PARENT_ID}-01".encode(), id="version ff"),
        pytest.param(f"00-{TRACE_ID[:-1]}-{PARENT_ID}-01".encode(), id="short trace id"),
        pytest.param(f"00-{TRACE_ID}0-{PARENT_ID}-01".encode(), id="long trace id"),
        pytest.param(f"00-{TRACE_ID}-{PARENT_ID}0-1".encode(), id="ids shifted, length kept"),
        pytest.param(VALID + b"-00", id="an extra field"),
        pytest.param(VALID[:-1], id="one flag digit"),
        pytest.param(VALID.replace(b"-", b"_"), id="wrong separators"),
        pytest.param(f"00-{TRACE_ID[:-1]}g-{PARENT_ID}-01".encode(), id="a non-hex digit"),
        pytest.param(b"", id="empty"),
        pytest.param(b"\xff" * 55, id="non-ascii bytes of the right length"),
    ],
)
def test_a_malformed_traceparent_is_invalid(value: bytes) -> None:
    assert not valid_traceparent(value)


# --- kept_headers ------------------------------------------------------------------------------------

OTHERS = [(b"host", b"serve"), (b"content-type", b"application/json")]


def test_untrusted_the_trace_context_is_removed_and_nothing_else() -> None:
    headers = [OTHERS[0], (b"traceparent", VALID), (b"TraceState", b"vendor=1"), OTHERS[1]]
    assert kept_headers(headers, trusted=False) == OTHERS


def test_trusted_a_valid_traceparent_and_its_tracestate_are_kept() -> None:
    headers = [(b"Traceparent", b" " + VALID + b" "), (b"tracestate", b"vendor=1"), *OTHERS]
    assert kept_headers(headers, trusted=True) == [
        *OTHERS,
        (b"traceparent", VALID),
        (b"tracestate", b"vendor=1"),
    ]


def test_trusted_an_invalid_traceparent_is_dropped_with_its_tracestate() -> None:
    headers = [(b"traceparent", VALID.upper()), (b"tracestate", b"vendor=1"), *OTHERS]
    assert kept_headers(headers, trusted=True) == OTHERS


def test_trusted_a_duplicated_traceparent_is_dropped_even_when_both_are_valid() -> None:
    headers = [(b"traceparent", VALID), (b"traceparent", OTHER_VALID), *OTHERS]
    assert kept_headers(headers, trusted=True) == OTHERS


@pytest.mark.parametrize(
    "states",
    [
        pytest.param([b"a" * (MAX_TRACESTATE_BYTES + 1)], id="overlong"),
        pytest.param([b"vendor=1", b"other=2"], id="duplicated"),
        pytest.param(["vendor=é".encode()], id="not ascii"),
    ],
)
def test_trusted_a_bad_tracestate_is_dropped_and_the_traceparent_kept(states: list[bytes]) -> None:
    headers = [(b"traceparent", VALID), *((b"tracestate", state) for state in states)]
    assert kept_headers(headers, trusted=True) == [(b"traceparent", VALID)]


def test_trusted_a_tracestate_of_the_largest_size_is_kept() -> None:
    state = b"a" * MAX_TRACESTATE_BYTES
    assert (b"tracestate", state) in kept_headers([(b"traceparent", VALID), (b"tracestate", state)], True)


_NAMES = st.sampled_from([b"traceparent", b"TRACEPARENT", b"tracestate", b"x-other", b"host"])
_HEX_TEXT = st.text("0123456789abcdefABCDEF", min_size=0, max_size=34)
_NEAR_VALID = st.builds(
    lambda version, trace, parent, flags: f"{version}-{trace}-{parent}-{flags}".encode(),
    st.sampled_from(["00", "01", "ff", "0"]),
    st.one_of(_HEX_TEXT, st.just(TRACE_ID), st.just("0" * 32)),
    st.one_of(_HEX_TEXT, st.just(PARENT_ID), st.just("0" * 16)),
    st.sampled_from(["01", "00", "0A", "1"]),
)
_VALUES = st.one_of(st.binary(max_size=80), _NEAR_VALID, st.just(VALID))


@settings(max_examples=300, deadline=None)
@given(headers=st.lists(st.tuples(st.one_of(_NAMES, st.binary(max_size=12)), _VALUES), max_size=6))
def test_any_headers_never_raise_and_never_keep_an_invalid_traceparent(
    headers: list[tuple[bytes, bytes]],
) -> None:
    others = [pair for pair in headers if pair[0].lower() not in (b"traceparent", b"tracestate")]
    assert kept_headers(headers, trusted=False) == others
    kept = kept_headers(headers, trusted=True)
    assert kept[: len(others)] == others
    parents = [value for name, value in kept if name.lower() == b"traceparent"]
    assert len(parents) <= 1 and all(valid_traceparent(value) for value in parents)
    states = [value for name, value in kept if name.lower() == b"tracestate"]
    assert len(states) <= len(parents) and all(len(value) <= MAX_TRACESTATE_BYTES for value in states)


# --- TraceContextGuard, the ASGI middleware ----------------------------------------------------------


async def _echo(request: Request) -> JSONResponse:
    """The headers the app saw, each name lowercased."""
    seen = [[name.decode("latin-1").lower(), value.decode("latin-1")] for name, value in request.headers.raw]
    return JSONResponse(seen)


async def _echo_socket(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_json({"traceparent": websocket.headers.get("traceparent")})
    await websocket.close()


def _app(middleware: list[Middleware]) -> Starlette:
    return Starlette(
        routes=[Route("/", _echo, methods=["GET"]), WebSocketRoute("/ws", _echo_socket)],
        middleware=middleware,
    )


def _seen(app: Any, headers: list[tuple[str, str]]) -> dict[str, list[str]]:
    """What each header the app saw held, by lowercase name."""
    with TestClient(app) as client:
        reply = client.get("/", headers=headers)
    assert reply.status_code == 200
    seen: dict[str, list[str]] = {}
    for name, value in reply.json():
        seen.setdefault(name, []).append(value)
    return seen


def _guarded(trusted: bool) -> Starlette:
    return _app([Middleware(TraceContextGuard, trusted=trusted)])


def test_the_echo_app_alone_sees_the_trace_context() -> None:
    seen = _seen(_app([]), [("traceparent", VALID.decode())])
    assert seen["traceparent"] == [VALID.decode()]


def test_untrusted_no_trace_context_reaches_the_app() -> None:
    seen = _seen(_guarded(False), [("traceparent", VALID.decode()), ("tracestate", "v=1"), ("x-other", "1")])
    assert "traceparent" not in seen and "tracestate" not in seen
    assert seen["x-other"] == ["1"]


def test_trusted_a_valid_traceparent_reaches_the_app() -> None:
    seen = _seen(_guarded(True), [("traceparent", VALID.decode()), ("tracestate", "v=1")])
    assert seen["traceparent"] == [VALID.decode()] and seen["tracestate"] == ["v=1"]


def test_trusted_a_hostile_100_kb_traceparent_never_reaches_the_app() -> None:
    hostile = "00-" + "a" * 100_000
    seen = _seen(_guarded(True), [("traceparent", hostile), ("tracestate", "v=1"), ("x-other", "1")])
    assert "traceparent" not in seen and "tracestate" not in seen
    assert seen["x-other"] == ["1"]


def test_untrusted_a_websocket_gets_no_trace_context() -> None:
    with (
        TestClient(_guarded(False)) as client,
        client.websocket_connect("/ws", headers={"traceparent": VALID.decode()}) as socket,
    ):
        assert socket.receive_json() == {"traceparent": None}


# --- middlewares(), Serve's proxy callback -----------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "trusted"), [(None, False), ("false", False), ("true", True), ("1", True)]
)
def test_the_proxy_callback_is_what_serve_accepts_trusting_as_configured(
    monkeypatch: pytest.MonkeyPatch, setting: str | None, trusted: bool
) -> None:
    from ray.serve._private.http_util import validate_http_proxy_callback_return

    if setting is None:
        monkeypatch.delenv("MAI_TRUST_TRACEPARENT", raising=False)
    else:
        monkeypatch.setenv("MAI_TRUST_TRACEPARENT", setting)
    accepted = validate_http_proxy_callback_return(middlewares())
    seen = _seen(_app(accepted), [("traceparent", VALID.decode())])
    assert seen.get("traceparent") == ([VALID.decode()] if trusted else None)
