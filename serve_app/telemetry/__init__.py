"""Traces in the operator's tracing system: OpenTelemetry spans inside Ray Serve's own.

Ray Serve traces its proxy, replicas and handle calls and propagates the W3C trace context between
them (``ray.serve._private.tracing_utils``); it is turned on, and sampled, by Ray's settings. This
package gives it an OTLP exporter configured by the standard ``OTEL_*`` variables (``exporter``), the
cascade's spans inside the replica's span (``spans``), the proxy's guard that keeps a client's
``traceparent`` out unless trusted (``proxy``), and the app config's ``telemetry`` section
(``settings``). docs/observability.md is the operator's guide.
"""
