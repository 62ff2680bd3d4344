"""OpenTelemetry spans of runs and API requests, exported only when asked.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, the first
:func:`span` configures OpenTelemetry's SDK with an OTLP/HTTP exporter (the ``otel`` extra) and a
batching processor; the standard ``OTEL_*`` variables (service name, headers, sampler) apply. Without
it, :func:`span` is a shared no-op context manager: no SDK is imported and no span object is made,
so instrumented code costs a function call. :func:`current_trace_id` gives the JSON logs the id of the
span in progress.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = ["current_trace_id", "enabled", "span"]

ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
_NULL = contextlib.nullcontext()
_state: dict[str, Any] = {}  # endpoint: the one configured for; tracer: its Tracer, or None
_guard = threading.Lock()
log = logging.getLogger("quarry.tracing")


def enabled() -> bool:
    """Whether spans are exported: an OTLP endpoint is set (and the SDK could be configured)."""
    endpoint = next((os.environ[v] for v in ENDPOINT_VARIABLES if os.environ.get(v)), None)
    if endpoint is None:
        return False
    if _state.get("endpoint") != endpoint:
        with _guard:
            if _state.get("endpoint") != endpoint:
                _state["tracer"] = _configure()
                _state["endpoint"] = endpoint
    return _state["tracer"] is not None


def _configure() -> Tracer | None:
    """The tracer of an SDK provider exporting over OTLP/HTTP, or None (with a warning) when the
    ``otel`` extra is not installed."""
    from opentelemetry import trace

    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry's SDK is not installed (%s): "
            "pip install 'quarry[otel]'; no spans are exported",
            exc,
        )
        return None
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):  # an application that set its own keeps it
        resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "quarry"})
        provider = TracerProvider(resource=resource)
        if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none":  # none: spans made, not sent
            provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
    return trace.get_tracer("quarry")


def span(name: str, **attributes: Any) -> AbstractContextManager[Span | None]:
    """A context manager around one unit of work: a span named ``name`` (attributes: plain values,
    never document text or a secret) when tracing is enabled, else a shared no-op."""
    if not enabled():
        return _NULL
    tracer: Tracer = _state["tracer"]
    return tracer.start_as_current_span(name, attributes={k: v for k, v in attributes.items() if v is not None})


def current_trace_id() -> str | None:
    """The hex id of the trace in progress in this thread or task, or None (none, or tracing off)."""
    if "tracer" not in _state or _state["tracer"] is None:
        return None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    return f"{context.trace_id:032x}" if context.is_valid else None
