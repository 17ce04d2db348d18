"""Prometheus metrics for GET /metrics: the queue's state read from PostgreSQL at scrape time, then
the counters and histograms the processes keep (herald.observability.metrics).

PostgreSQL is the queue, so the queue's state is a query away from any process: every API
process serves the same figures. The figures come from the partial indexes (in-flight deliveries,
unreplayed dead letters, due events, due reminder schedules, waiting webhook messages, held
digest rows), so a scrape costs the size of the
backlog, not of history. The queries read counts and ages only, across tenants.

`skipped_unconfigured` is reported on its own and never as a failure (R-OBS-1, R-OBS-6): an
environment without a provider must not look like an outage.

The gauges are built as metric families for this one scrape, never as process-wide Gauge objects:
in multiprocess mode those would be written to the shared directory and summed across processes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy.ext.asyncio import AsyncConnection
from typing_extensions import override

from herald.kinds import Registry
from herald.observability import metrics, queries

# The scheduler's sources of due work, each answering "how late is the oldest due item" in
# seconds. Broadcast release and follow-up sweeps add theirs here as they land.
SCHEDULER_LAG_SOURCES: dict[str, Callable[[AsyncConnection], Awaitable[float]]] = {
    "reminder": queries.reminder_lag,
    "escalation": queries.escalation_lag,
}


class _Snapshot(Collector):
    def __init__(self, families: list[GaugeMetricFamily]) -> None:
        self.families = families

    @override
    def collect(self) -> list[GaugeMetricFamily]:
        return self.families


async def database_families(
    conn: AsyncConnection, registry: Registry | None = None
) -> list[GaugeMetricFamily]:
    in_flight = GaugeMetricFamily(
        "herald_deliveries_in_flight",
        "Deliveries not yet finished, by channel and status (queued, processing, failed).",
        labels=["channel", "status"],
    )
    for channel, status, count in await queries.open_deliveries(conn):
        in_flight.add_metric([channel, status], count)
    oldest = GaugeMetricFamily(
        "herald_deliveries_oldest_age_seconds",
        "Seconds since the oldest unfinished delivery of each channel and status was queued "
        "(queued rows once due; failed rows waiting for a retry; processing rows).",
        labels=["channel", "status"],
    )
    for channel, status, age in await queries.oldest_delivery_ages(conn):
        oldest.add_metric([channel, status], age)
    unconfigured = GaugeMetricFamily(
        "herald_deliveries_skipped_unconfigured",
        "Deliveries waiting for a provider to be configured (re-driven by backfill); not failures.",
        labels=["channel"],
    )
    for channel, count in await queries.unconfigured_deliveries(conn):
        unconfigured.add_metric([channel], count)
    dead = GaugeMetricFamily(
        "herald_dead_letters_unreplayed",
        "Dead letters nobody has replayed yet, by work type.",
        labels=["queue"],
    )
    for queue, count in await queries.unreplayed_dead_letters(conn):
        dead.add_metric([queue], count)
    backlog = await queries.fanout_backlog(conn)
    lag = GaugeMetricFamily(
        "herald_scheduler_lag_seconds",
        "Now minus the oldest due scheduled item not yet fired, by source (0: nothing due).",
        labels=["source"],
    )
    for source, read in SCHEDULER_LAG_SOURCES.items():
        lag.add_metric([source], await read(conn))
    return [
        *await _webhook_families(conn),
        *await _digest_families(conn, registry),
        in_flight,
        oldest,
        unconfigured,
        dead,
        GaugeMetricFamily(
            "herald_fanout_due", "Events due for fan-out and not yet claimed.", backlog["due"]
        ),
        GaugeMetricFamily(
            "herald_fanout_running", "Events claimed and not yet complete.", backlog["running"]
        ),
        GaugeMetricFamily(
            "herald_fanout_oldest_due_age_seconds",
            "How long the oldest unclaimed due event has waited.",
            backlog["oldest_due_age_seconds"],
        ),
        lag,
    ]


async def _webhook_families(conn: AsyncConnection) -> list[GaugeMetricFamily]:
    waiting = GaugeMetricFamily(
        "herald_webhook_messages_waiting",
        "Webhook messages not yet settled, by state: queued (first try), retrying (queued again "
        "after a failed post) and processing (being posted).",
        labels=["state"],
    )
    for state, count in await queries.webhook_messages_waiting(conn):
        waiting.add_metric([state], count)
    health = await queries.webhook_endpoint_health(conn)
    endpoints = GaugeMetricFamily(
        "herald_webhook_endpoints",
        "Webhook endpoints by state: failing (holds a message queued again after a failed post), "
        "healthy (enabled, nothing failing) and disabled. Which one fails: GET /v1/admin/webhooks.",
        labels=["state"],
    )
    for state in ("failing", "healthy", "disabled"):
        endpoints.add_metric([state], health[state])
    return [
        waiting,
        endpoints,
        GaugeMetricFamily(
            "herald_webhook_failing_seconds",
            "Seconds since the oldest webhook message still being retried was written "
            "(0: no enabled endpoint is failing).",
            health["failing_seconds"],
        ),
    ]


async def _digest_families(
    conn: AsyncConnection, registry: Registry | None
) -> list[GaugeMetricFamily]:
    windows = {} if registry is None else registry.digest_windows()
    groups = GaugeMetricFamily(
        "herald_digest_groups",
        "Digest groups (one person, channel and kind) held for their window, by channel and "
        "state: pending (all held) and due (the window has passed, the sweeper has not yet "
        "taken them).",
        labels=["channel", "state"],
    )
    overdue = GaugeMetricFamily(
        "herald_digest_overdue_seconds",
        "How long past its due time the most overdue digest group of each channel has waited "
        "(0: none overdue). Grows when no worker runs the digest sweeper.",
        labels=["channel"],
    )
    for channel, pending, due, late in await queries.digest_groups(conn, windows):
        groups.add_metric([channel, "pending"], pending)
        groups.add_metric([channel, "due"], due)
        overdue.add_metric([channel], late)
    return [groups, overdue]


async def render_metrics(conn: AsyncConnection, registry: Registry | None = None) -> bytes:
    """The scrape: the database's gauges (digest groups need the kind registry) and then the
    processes' counters."""
    collected = CollectorRegistry(auto_describe=False)
    collected.register(_Snapshot(await database_families(conn, registry)))
    return generate_latest(collected) + metrics.render()
