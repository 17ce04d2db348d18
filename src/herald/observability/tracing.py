"""OpenTelemetry traces, off unless an OTLP endpoint is configured.

One trace follows an event across processes: the API's span for `POST /v1/events` is stored on
the event row as a W3C `traceparent` (notification_event.traceparent); the worker that fans the
event out starts its `fanout` span (and a `fanout.batch` span per page) under it, and each
provider call's `provider.send` span starts under it too. The ids on the rows are the only link:
no process calls another.

With tracing off, `span()` is a no-op context manager and `current_traceparent()` answers None;
`opentelemetry` is never imported, so nothing is paid. On: `HERALD_OTEL_EXPORTER_OTLP_ENDPOINT`
or the standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (OTLP over
HTTP); the other `OTEL_*` variables (headers, timeouts, resource attributes, sampler) are read
by the SDK as usual.

Herald keeps its own TracerProvider rather than installing a global one, so tests can give it an
in-memory exporter (`use_processor`) and a host application's tracing is left alone.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from herald.config import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.trace import Span

_provider: TracerProvider | None = None
_STANDARD = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def endpoint(settings: Settings) -> str | None:
    if settings.otel_exporter_otlp_endpoint:
        return settings.otel_exporter_otlp_endpoint
    for name in _STANDARD:
        if os.environ.get(name):
            return os.environ[name]
    return None


def enabled() -> bool:
    return _provider is not None


def configure(settings: Settings, role: str) -> bool:
    """Turn tracing on for this process when an endpoint is configured; True when it is on."""
    url = endpoint(settings)
    if url is None:
        return False
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The HERALD_ variable names the collector's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT does.
    traces_url = (
        url
        if os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == url
        else url.rstrip("/") + "/v1/traces"
    )
    use_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url)), role)
    return True


def use_processor(processor: SpanProcessor, role: str = "herald") -> None:
    """Trace through `processor` from now on (tests pass a SimpleSpanProcessor over an
    InMemorySpanExporter)."""
    global _provider
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider(
        resource=Resource.create({SERVICE_NAME: "herald", "herald.role": role})
    )
    provider.add_span_processor(processor)
    _provider = provider


def shutdown() -> None:
    """Flush and stop (process exit); tracing is off afterwards."""
    global _provider
    if _provider is not None:
        _provider.shutdown()
        _provider = None


@contextlib.contextmanager
def span(
    name: str,
    *,
    parent: str | None = None,
    kind: str = "internal",
    attributes: Mapping[str, str | int | bool] | None = None,
) -> Iterator[Span | None]:
    """A span named `name`, child of the current span, or of `parent` (a traceparent read from a
    row) when given. Yields None with tracing off."""
    if _provider is None:
        yield None
        return
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    context = (
        TraceContextTextMapPropagator().extract({"traceparent": parent})
        if parent is not None
        else None
    )
    span_kind = {
        "server": trace.SpanKind.SERVER,
        "client": trace.SpanKind.CLIENT,
        "consumer": trace.SpanKind.CONSUMER,
    }.get(kind, trace.SpanKind.INTERNAL)
    tracer = _provider.get_tracer("herald")
    with tracer.start_as_current_span(
        name, context=context, kind=span_kind, attributes=dict(attributes or {})
    ) as current:
        yield current


def current_traceparent() -> str | None:
    """The W3C traceparent of the current span, to store on a row; None with tracing off."""
    if _provider is None:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier)
    return carrier.get("traceparent")


def set_attributes(current: Any, **attributes: str | int | bool | None) -> None:
    """Set attributes on a span from span() (None with tracing off: nothing to do)."""
    if current is None:
        return
    for key, value in attributes.items():
        if value is not None:
            current.set_attribute(key, value)
