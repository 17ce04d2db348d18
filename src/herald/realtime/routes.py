"""The live stream: `GET /v1/me/notifications/stream`, Server-Sent Events for one end user.

The token is checked once, at connect time (the database connection it used goes back to the
pool before the stream starts); the stream then holds a subscription on the process's hub, never
a database connection. With a read standby, subscribing fences the person (herald.db.replica):
the inbox a client reads once subscribed comes from a server that has everything the stream
missed. Events are named `notification` with the five keys of R-REALTIME-7;
comments are keep-alives. A client that goes away ends its stream and its subscription.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

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
    app_state = state(request)
    hub = app_state.realtime

    async def synced() -> None:
        # A client refetches the inbox once subscribed. Anything committed before the
        # subscription must be in that answer, since its notice went out before the stream
        # listened: so the subscription is a read-your-writes point, like a mark-read, and the
        # person's next reads wait for a read standby to have replayed up to it.
        await app_state.reads.fence(actor.tenant_id, actor.external_id)

    return EventSourceResponse(
        _events(hub, Viewer.of(actor), synced),
        ping=hub.ping_seconds,
        send_timeout=SEND_TIMEOUT_SECONDS,
    )


async def _events(
    hub: RealtimeHub, viewer: Viewer, synced: Callable[[], Awaitable[None]]
) -> AsyncIterator[ServerSentEvent]:
    with hub.subscribe(viewer) as subscription:
        await synced()
        # The first comment says the stream is registered: what a client (or a test) waits for.
        yield ServerSentEvent(comment="subscribed", retry=RETRY_MILLISECONDS)
        while (notice := await subscription.next()) is not None:
            data = StreamNotification.of(notice).model_dump_json(by_alias=True)
            yield ServerSentEvent(data=data, event=EVENT_NAME)
