"""The API process's realtime hub: one listener, many streams.

Each API process holds ONE transport subscription — a LISTEN connection (application_name
`herald-realtime`) or one Redis pub/sub — and fans what arrives out, in memory, to its own open
streams, keyed by (tenant, person). An open stream costs a queue, never a database connection,
so the connections of an API process stay bounded however many streams it serves.

Slow clients: each stream has a bounded queue (QUEUE_SIZE). When a stream falls that far behind,
the hub drops its OLDEST pending notice to make room for the newest. A notice is only a hint to
refetch (R-REALTIME-2), so the client that catches up still learns that something arrived and
refetches the truth; the hub's memory stays bounded and one stuck client never slows the others.

Transport failures: when the listener's connection drops, the hub logs it and reconnects with a
capped exponential backoff while the streams stay open (they keep receiving keep-alives). Notices
published during the gap are lost, which a refetch repairs.

Liveness: the token is checked once, at connect time, but a stream can stay open for hours. Once
per keep-alive interval the hub asks the database, in one query per tenant with open streams,
whether each stream's person still exists and still holds the staff role the stream was opened
with; a stream that fails the check ends (its client reconnects and is authenticated afresh:
refused for a deleted person, shown no staff rows for a dismissed teacher). A failing check
leaves the streams open and is retried on the next interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

import psycopg
import redis.asyncio as redis

from herald.db import tenancy
from herald.realtime import queries, service
from herald.realtime.service import Notice, Viewer

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from herald.config import Settings

log = logging.getLogger(__name__)

LISTENER_APPLICATION_NAME = "herald-realtime"
QUEUE_SIZE = 100
# Keep-alive comment interval of every stream; tests shorten it on the hub.
PING_SECONDS = 15.0
BACKOFF_FIRST_SECONDS = 0.5
BACKOFF_MAX_SECONDS = 15.0

Deliver = Callable[[str | bytes], None]


class LivenessCheck(Protocol):
    """Who of these viewers may keep their streams open (see the module docstring)."""

    async def still_live(self, viewers: list[Viewer]) -> set[Viewer]: ...


class DatabaseLiveness:
    """The liveness check over the API's own pool: one short transaction per tenant, as
    herald_app under that tenant (row-level security), like any other per-tenant work."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine

    async def still_live(self, viewers: list[Viewer]) -> set[Viewer]:
        by_tenant: dict[str, list[Viewer]] = {}
        for viewer in viewers:
            by_tenant.setdefault(viewer.tenant_id, []).append(viewer)
        live: set[Viewer] = set()
        for tenant_id, group in by_tenant.items():
            people = sorted({v.person_id for v in group})
            roles = sorted({v.role_id for v in group if v.staff_role and v.role_id is not None})
            async with self._engine.begin() as conn:
                await tenancy.enter_tenant(conn, tenant_id)
                rows = await queries.live_people_and_roles(conn, tenant_id, people, roles)
            held: dict[int, set[int]] = {}
            for person_id, role_id in rows:
                held.setdefault(person_id, set()).update([role_id] if role_id is not None else [])
            live.update(v for v in group if v.still_live(held))
        return live


class NoticeSource(Protocol):
    """One transport subscription. `run` returns or raises when the subscription is lost."""

    name: str

    async def run(self, deliver: Deliver, connected: Callable[[], None]) -> None: ...


class PostgresSource:
    """LISTEN herald_realtime on one autocommit psycopg connection."""

    name = "PostgreSQL LISTEN"

    def __init__(self, url: str) -> None:
        self._url = url

    async def run(self, deliver: Deliver, connected: Callable[[], None]) -> None:
        conn = await psycopg.AsyncConnection.connect(
            self._url,
            autocommit=True,
            application_name=LISTENER_APPLICATION_NAME,
            connect_timeout=10,
            # A silent network drop is noticed by TCP keep-alives, not only by the next NOTIFY.
            keepalives=1,
            keepalives_idle=30,
            keepalives_interval=10,
            keepalives_count=3,
        )
        async with conn:
            await queries.listen(conn, service.NOTIFY_CHANNEL)
            connected()
            async for notify in conn.notifies():
                deliver(notify.payload)


class RedisSource:
    """SUBSCRIBE herald:realtime on one Redis connection."""

    name = "Redis pub/sub"

    def __init__(self, url: str) -> None:
        self._url = url

    async def run(self, deliver: Deliver, connected: Callable[[], None]) -> None:
        client = redis.from_url(self._url, socket_connect_timeout=5, health_check_interval=30)
        try:
            async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(service.REDIS_CHANNEL)
                connected()
                while True:
                    message = await pubsub.get_message(timeout=1.0)
                    if message is not None and message.get("type") == "message":
                        deliver(message["data"])
        finally:
            await client.aclose()


class Subscription:
    """One open stream: who it belongs to and its bounded queue of notices."""

    def __init__(self, viewer: Viewer, size: int) -> None:
        self.viewer = viewer
        self.dropped = 0
        # None is the end-of-stream marker (the hub is closing).
        self._queue: asyncio.Queue[Notice | None] = asyncio.Queue(maxsize=size)

    def offer(self, item: Notice | None) -> None:
        """Enqueue without waiting; a full queue gives up its oldest notice (see module doc)."""
        while True:
            try:
                self._queue.put_nowait(item)
                return
            except asyncio.QueueFull:
                with contextlib.suppress(asyncio.QueueEmpty):
                    self._queue.get_nowait()
                    self.dropped += 1

    async def next(self) -> Notice | None:
        """The next notice for this stream, or None when the hub has closed."""
        return await self._queue.get()


class RealtimeHub:
    """One per API process: started and closed by the application's lifespan."""

    def __init__(
        self,
        source: NoticeSource | None,
        *,
        queue_size: int = QUEUE_SIZE,
        ping_seconds: float = PING_SECONDS,
        liveness: LivenessCheck | None = None,
    ) -> None:
        self.source = source
        self.liveness = liveness
        self.queue_size = queue_size
        self.ping_seconds = ping_seconds
        # Set while the listener is subscribed; cleared while it reconnects.
        self.listening = asyncio.Event()
        self._subscribers: dict[tuple[str, int], set[Subscription]] = {}
        self._task: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def stream_count(self) -> int:
        return sum(len(subs) for subs in self._subscribers.values())

    def start(self) -> None:
        """Start the listener (once); without a source the hub serves streams that stay quiet."""
        if self._task is None and self.source is not None and not self._closed:
            self._task = asyncio.create_task(self._listen(self.source), name="herald-realtime")
        if self._sweeper is None and self.liveness is not None and not self._closed:
            self._sweeper = asyncio.create_task(
                self._sweep(self.liveness), name="herald-realtime-liveness"
            )

    async def aclose(self) -> None:
        """Stop listening and end every open stream cleanly (idempotent)."""
        self._closed = True
        tasks = [t for t in (self._task, self._sweeper) if t is not None]
        self._task = self._sweeper = None
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.listening.clear()
        for subs in self._subscribers.values():
            for sub in subs:
                sub.offer(None)

    @contextlib.contextmanager
    def subscribe(self, viewer: Viewer) -> Iterator[Subscription]:
        """Register a stream for the duration of the block; leaving it always unregisters."""
        sub = Subscription(viewer, self.queue_size)
        if self._closed:
            sub.offer(None)
        subs = self._subscribers.setdefault(viewer.key, set())
        subs.add(sub)
        try:
            yield sub
        finally:
            subs.discard(sub)
            if not subs and self._subscribers.get(viewer.key) is subs:
                del self._subscribers[viewer.key]

    def dispatch(self, payload: str | bytes) -> int:
        """Hand one transport payload to the streams allowed to see it; returns how many got it."""
        handed = 0
        for notice in service.decode(payload, self._has_stream):
            for sub in self._subscribers.get((notice.tenant_id, notice.person_id), ()):
                if sub.viewer.may_see(notice):
                    sub.offer(notice)
                    handed += 1
        return handed

    def _has_stream(self, tenant_id: str, person_id: int) -> bool:
        return (tenant_id, person_id) in self._subscribers

    async def _listen(self, source: NoticeSource) -> None:
        backoff = BACKOFF_FIRST_SECONDS

        def connected() -> None:
            nonlocal backoff
            backoff = BACKOFF_FIRST_SECONDS
            self.listening.set()
            log.info("realtime listener subscribed (%s)", source.name)

        while True:
            try:
                await source.run(self._deliver, connected)
                log.warning("realtime listener (%s) ended; reconnecting", source.name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "realtime listener (%s) lost (%s); streams stay open, retrying in %.1f s",
                    source.name,
                    type(exc).__name__,
                    backoff,
                )
            self.listening.clear()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_SECONDS)

    async def sweep_once(self, liveness: LivenessCheck) -> int:
        """End every open stream whose viewer is no longer live; returns how many ended."""
        subs = [sub for group in self._subscribers.values() for sub in group]
        if not subs:
            return 0
        live = await liveness.still_live(list({sub.viewer for sub in subs}))
        ended = 0
        for sub in subs:
            if sub.viewer not in live:
                sub.offer(None)
                ended += 1
        return ended

    async def _sweep(self, liveness: LivenessCheck) -> None:
        while True:
            await asyncio.sleep(self.ping_seconds)
            try:
                ended = await self.sweep_once(liveness)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Streams stay open; the next interval tries again (module docstring).
                log.warning("realtime liveness check failed (%s); retrying", type(exc).__name__)
                continue
            if ended:
                log.info("ended %d stream(s) whose person or staff role is gone", ended)

    def _deliver(self, payload: str | bytes) -> None:
        try:
            self.dispatch(payload)
        except Exception:  # one bad payload must not cost the listener its connection
            log.exception("realtime dispatch failed")


def build_hub(settings: Settings, engine: AsyncEngine) -> RealtimeHub:
    """Redis when HERALD_REDIS_URL is set, else LISTEN on the API's own database (through
    HERALD_DATABASE_SESSION_URL when set: LISTEN needs a session, herald.db.pooler)."""
    from herald.db import pooler

    source: NoticeSource
    if settings.redis_url:
        source = RedisSource(settings.redis_url)
    else:
        source = PostgresSource(pooler.session_url(settings.database_session_url, engine))
    return RealtimeHub(source, liveness=DatabaseLiveness(engine))
