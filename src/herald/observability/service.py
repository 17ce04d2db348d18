"""Prometheus metrics, read from PostgreSQL at scrape time.

PostgreSQL is the queue, so the queue's state is a query away from any process: every API or
worker process serves the same figures, and there is no per-process counter to aggregate. The
figures come from the partial indexes (in-flight deliveries, unreplayed dead letters, due
events), so a scrape costs the size of the backlog, not of history.

`skipped_unconfigured` is reported on its own and never as a failure (R-OBS-1, R-OBS-6): an
environment without a provider must not look like an outage.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.observability import queries


async def render_metrics(conn: AsyncConnection) -> bytes:
    registry = CollectorRegistry()
    in_flight = Gauge(
        "herald_deliveries_in_flight",
        "Deliveries not yet finished, by channel and status (queued, processing, failed).",
        ["channel", "status"],
        registry=registry,
    )
    for channel, status, count in await queries.open_deliveries(conn):
        in_flight.labels(channel, status).set(count)
    unconfigured = Gauge(
        "herald_deliveries_skipped_unconfigured",
        "Deliveries waiting for a provider to be configured (re-driven by backfill); not failures.",
        ["channel"],
        registry=registry,
    )
    for channel, count in await queries.unconfigured_deliveries(conn):
        unconfigured.labels(channel).set(count)
    dead = Gauge(
        "herald_dead_letters_unreplayed",
        "Dead letters nobody has replayed yet, by work type.",
        ["queue"],
        registry=registry,
    )
    for queue, count in await queries.unreplayed_dead_letters(conn):
        dead.labels(queue).set(count)
    backlog = await queries.fanout_backlog(conn)
    Gauge(
        "herald_fanout_due", "Events due for fan-out and not yet claimed.", registry=registry
    ).set(backlog["due"])
    Gauge("herald_fanout_running", "Events claimed and not yet complete.", registry=registry).set(
        backlog["running"]
    )
    Gauge(
        "herald_fanout_oldest_due_age_seconds",
        "How long the oldest unclaimed due event has waited.",
        registry=registry,
    ).set(backlog["oldest_due_age_seconds"])
    return generate_latest(registry)
