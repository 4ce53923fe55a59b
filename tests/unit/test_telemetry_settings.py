"""The tracing the environment asks for, checked as the application starts (``check_tracing``), and the
app config's ``telemetry`` section."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from serve_app.config import load_app_config
from serve_app.telemetry.exporter import TelemetryConfigError
from serve_app.telemetry.settings import (
    EXPORTER_PATH,
    PROXY_GUARD_PATH,
    TelemetrySettings,
    check_tracing,
    ratio,
    trusts_traceparent,
)

ON = {
    "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER_PATH,
    "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": PROXY_GUARD_PATH,
}


def test_without_serves_tracing_nothing_is_checked_and_the_engines_make_no_spans():
    assert check_tracing({}) is None
    # Variables of a tracing that is off are not read: nothing refuses a start.
    assert check_tracing({"OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"}) is None


def test_the_engines_send_where_the_exporter_sends_and_how():
    tracing = check_tracing({**ON, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert tracing is not None
    assert (tracing.endpoint, tracing.protocol) == ("http://collector:4318/v1/traces", "http/protobuf")
    grpc = check_tracing(
        {**ON, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"}
    )
    assert grpc is not None and (grpc.endpoint, grpc.protocol) == ("http://collector:4317", "grpc")


def test_serves_tracing_without_the_proxys_guard_is_refused_naming_the_variable():
    env = {"RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER_PATH}
    with pytest.raises(TelemetryConfigError, match="RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"):
        check_tracing(env)
    with pytest.raises(TelemetryConfigError, match="RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"):
        check_tracing({**env, "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "my.module:callback"})


def test_another_exporter_is_checked_for_the_guard_but_gives_the_engines_nothing():
    other = {**ON, "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": "ray.serve._private.tracing_utils:x"}
    assert check_tracing(other) is None
    with pytest.raises(TelemetryConfigError):
        check_tracing({"RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": "ray.serve._private.tracing_utils:x"})


@pytest.mark.parametrize("value", ["-0.1", "1.5", "half", "nan"])
def test_a_sampling_ratio_outside_zero_to_one_is_refused(value):
    with pytest.raises(TelemetryConfigError, match="RAY_SERVE_TRACING_SAMPLING_RATIO"):
        check_tracing({**ON, "RAY_SERVE_TRACING_SAMPLING_RATIO": value})


def test_the_sampling_ratio_is_serves_default_when_unset():
    assert ratio({}) == 0.01 and ratio({"RAY_SERVE_TRACING_SAMPLING_RATIO": "1"}) == 1.0


def test_a_bad_otlp_setting_is_refused_at_start():
    with pytest.raises(TelemetryConfigError, match="OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        check_tracing({**ON, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"})
    with pytest.raises(TelemetryConfigError, match="OTEL_EXPORTER_OTLP_ENDPOINT"):
        check_tracing({**ON, "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"})


@pytest.mark.parametrize(("value", "trusted"), [("true", True), ("1", True), ("TRUE", True), ("no", False)])
def test_a_clients_traceparent_is_trusted_only_when_said(value, trusted):
    assert trusts_traceparent({"MAI_TRUST_TRACEPARENT": value}) is trusted
    assert trusts_traceparent({}) is False


def test_the_telemetry_section_is_validated_data():
    assert TelemetrySettings().record_question_text is False
    config = load_app_config(
        {
            "small": {"model_id": "s", "source": "org/s"},
            "large": {"model_id": "l", "source": "org/l"},
            "telemetry": {"trace_url": "http://jaeger:16686/trace/{trace_id}", "attribute_max_chars": 64},
        }
    )
    assert config.telemetry.attribute_max_chars == 64
    for bad in (
        {"trace_url": "javascript:alert(1)//{trace_id}"},
        {"trace_url": "http://jaeger:16686/search"},  # no {trace_id}
        {"attribute_max_chars": 4},
        {"sampling": 1.0},  # unknown: the ratio is Serve's variable
    ):
        with pytest.raises(ValidationError):
            TelemetrySettings(**bad)
