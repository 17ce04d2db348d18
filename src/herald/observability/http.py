"""The HTTP side of observability, as one ASGI middleware: the request id, the request's log line,
its latency histogram and its server span.

The request id is the caller's `X-Request-ID` when it is a sane one (printable ASCII, no spaces,
at most 128 characters), else a new one; it is bound to every log line the request causes,
returned in the response's `X-Request-ID`, and stored on any event the request records
(notification_event.origin_request_id), so the worker's lines about its deliveries carry it too.

Latency is labelled by the route *template* (`/v1/events/{event_id}`), never the raw path, so the
label set stays bounded; a request no route matched is `unmatched`. Pure ASGI (no
BaseHTTPMiddleware), so server-sent event streams pass through untouched.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from herald.observability import logs, metrics, tracing

log = logging.getLogger("herald.http")

HEADER = "X-Request-ID"
_SANE = re.compile(r"^[\x21-\x7e]{1,128}$")
# Probes and scrapes come every few seconds: their lines are DEBUG, not INFO.
_QUIET = frozenset({"/healthz", "/readyz", "/metrics"})


def accepted_request_id(value: str | None) -> str:
    if value is not None and _SANE.match(value):
        return value
    return uuid.uuid4().hex


def route_template(scope: Scope) -> str:
    route: Any = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class ObservabilityMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        request_id = accepted_request_id(headers.get(HEADER))
        method = str(scope.get("method", "GET"))
        status = 500
        started = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                MutableHeaders(scope=message)[HEADER] = request_id
            await send(message)

        with (
            logs.bound(request_id=request_id, tenant=None),
            tracing.span(
                f"{method} request", parent=headers.get("traceparent"), kind="server"
            ) as current,
        ):
            try:
                await self.app(scope, receive, send_with_id)
            finally:
                route = route_template(scope)
                elapsed = time.perf_counter() - started
                metrics.HTTP_LATENCY.labels(method, route, str(status)).observe(elapsed)
                if current is not None:
                    current.update_name(f"{method} {route}")
                    current.set_attributes(
                        {
                            "http.request.method": method,
                            "http.route": route,
                            "http.response.status_code": status,
                            "herald.request_id": request_id,
                        }
                    )
                log.log(
                    logging.DEBUG if route in _QUIET else logging.INFO,
                    "%s %s %s in %.1f ms",
                    method,
                    route,
                    status,
                    elapsed * 1000,
                )
