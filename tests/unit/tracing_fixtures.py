"""Ray Serve's tracing switched on or off in process, without Ray, and every span the cascade makes
kept in memory: a local ``TracerProvider`` (never the global one) whose tracer ``trace.get_tracer``
returns while a test runs. Shared by the span tests (test_telemetry_spans.py) and the wiring tests
(test_tracing_wiring.py); a test module imports the fixtures it uses."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ray.serve._private import tracing_utils

__all__ = ["exported", "recording", "tracing_off", "tracing_on"]


@pytest.fixture
def exported(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """Every span ``spans`` makes, ended, in memory: its tracer from a local provider (never the global
    one)."""
    return recording(monkeypatch, TracerProvider())


def recording(monkeypatch: pytest.MonkeyPatch, provider: TracerProvider) -> InMemorySpanExporter:
    """The spans ``provider`` ends, in memory; ``trace.get_tracer`` returns its tracers."""
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    monkeypatch.setattr(trace, "get_tracer", lambda name, *args, **kwargs: provider.get_tracer(name))
    return memory


@pytest.fixture
def tracing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tracing_utils, "_tracing_enabled", False)


@pytest.fixture
def tracing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray Serve's tracing as ``setup_tracing`` leaves it in a replica."""
    monkeypatch.setattr(tracing_utils, "_tracing_enabled", True)
