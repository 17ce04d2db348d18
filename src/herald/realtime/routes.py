"""The live stream: `GET /v1/me/notifications/stream`, Server-Sent Events for one end user.

The token is checked once, at connect time (the database connection it used goes back to the
pool before the stream starts); the stream then holds a subscription on the process's hub, never
a database connection. Events are named `notification` with the five keys of R-REALTIME-7;
comments are keep-alives. A client that goes away ends its stream and its subscription.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from herald.auth.deps import ActorDep, state
from herald.realtime.hub import RealtimeHub
from herald.realtime.schemas import StreamNotification
from herald.realtime.service import Viewer

router = APIRouter(prefix="/v1/me/notifications", tags=["realtime"])

EVENT_NAME = "notification"
# How long a browser's EventSource waits before reconnecting after the stream ends.
RETRY_MILLISECONDS = 3000
# A client that stops reading for this long is disconnected (its subscription goes with it).
SEND_TIMEOUT_SECONDS = 30.0


@router.get("/stream", response_class=EventSourceResponse)
async def stream(request: Request, actor: ActorDep) -> EventSourceResponse:
    hub = state(request).realtime
    return EventSourceResponse(
        _events(hub, Viewer.of(actor)), ping=hub.ping_seconds, send_timeout=SEND_TIMEOUT_SECONDS
    )


async def _events(hub: RealtimeHub, viewer: Viewer) -> AsyncIterator[ServerSentEvent]:
    with hub.subscribe(viewer) as subscription:
        # The first comment says the stream is registered: what a client (or a test) waits for.
        yield ServerSentEvent(comment="subscribed", retry=RETRY_MILLISECONDS)
        while (notice := await subscription.next()) is not None:
            data = StreamNotification.of(notice).model_dump_json(by_alias=True)
            yield ServerSentEvent(data=data, event=EVENT_NAME)
