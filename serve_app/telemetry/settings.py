"""What tracing does that neither Ray Serve's settings nor the ``OTEL_*`` variables say, as the app
config's ``telemetry`` section, and the variables that turn Ray Serve's tracing on, read once here.

Tracing itself is Ray Serve's: on when ``RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH`` names an exporter
(``serve_app.telemetry.exporter:span_processors`` for OTLP) in every process of the cluster, sampled at
``RAY_SERVE_TRACING_SAMPLING_RATIO`` where a trace starts (Serve's proxy, a batch row). Ray's proxy
reads only its environment, so these stay the environment's: one reader each, Ray.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import Field

from deployments.settings import Strict
from deployments.vlm import EngineTracing

from .exporter import TelemetryConfigError, exporter_settings

EXPORTER_PATH = "serve_app.telemetry.exporter:span_processors"
PROXY_GUARD_PATH = "serve_app.telemetry.proxy:middlewares"
EXPORTER_VARIABLE = "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH"
RATIO_VARIABLE = "RAY_SERVE_TRACING_SAMPLING_RATIO"
PROXY_CALLBACK_VARIABLE = "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"
# Serve's proxy keeps a client's traceparent only when this is "true" (serve_app/telemetry/proxy.py).
TRUST_VARIABLE = "MAI_TRUST_TRACEPARENT"


class TelemetrySettings(Strict):
    """The app config's ``telemetry`` section: what the cascade's spans may carry."""

    # The question's text on the request span (``mai.question``): off, since a question may hold what
    # its sender would not want in a tracing backend. Never the image, a key or a model's output.
    record_question_text: bool = False
    # Every string attribute is cut to this many characters (a question, an error, a model id).
    attribute_max_chars: int = Field(256, ge=16, le=4096)
    # The console links a request to its trace with this URL, ``{trace_id}`` replaced: e.g. Jaeger's
    # ``http://jaeger:16686/trace/{trace_id}``. Empty: the console shows the id alone.
    trace_url: str = Field("", max_length=512, pattern=r"^(|https?://[^\s]*\{trace_id\}[^\s]*)$")


def trusts_traceparent(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(TRUST_VARIABLE, "").strip().lower() in ("1", "true", "yes")


def ratio(environ: Mapping[str, str] | None = None) -> float:
    """Ray Serve's sampling ratio (``RAY_SERVE_TRACING_SAMPLING_RATIO``, 0.01 when unset): where a
    trace starts, the share of traces kept."""
    env = os.environ if environ is None else environ
    text = env.get(RATIO_VARIABLE, "0.01")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise TelemetryConfigError(f"{RATIO_VARIABLE}={text!r}: a sampling ratio between 0 and 1")
    return value


def check_tracing(environ: Mapping[str, str] | None = None) -> EngineTracing | None:
    """The tracing the environment asks for, checked as the application starts: with Ray Serve's
    tracing on, a sampling ratio in [0, 1] and the proxy's guard loaded (else a client's
    ``traceparent`` would choose the trace); with this package's exporter, ``OTEL_*`` variables it can
    honour. Returns where the engines send their spans (None: they make none); raises
    ``TelemetryConfigError`` naming the variable at fault."""
    env = os.environ if environ is None else environ
    exporter = env.get(EXPORTER_VARIABLE, "")
    if not exporter:
        return None
    ratio(env)
    if env.get(PROXY_CALLBACK_VARIABLE, "") != PROXY_GUARD_PATH:
        raise TelemetryConfigError(
            f"{EXPORTER_VARIABLE} is set, so Serve's proxy traces requests; set "
            f"{PROXY_CALLBACK_VARIABLE}={PROXY_GUARD_PATH} too, or a client's traceparent header "
            f"chooses the trace and its sampling ({TRUST_VARIABLE}=true trusts it)"
        )
    if exporter != EXPORTER_PATH:
        return None  # another exporter (Ray's file exporter, the operator's own): the engines make none
    settings = exporter_settings(env)
    return EngineTracing(settings.endpoint, settings.protocol)
