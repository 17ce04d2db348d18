"""Counters and histograms counted by each process, as work happens.

What only the process doing the work can know: provider calls and their latency, lease expiries
the reaper reclaimed, rows the fan-out wrote, HTTP request latency. (The queue's state is read
from the database at scrape time instead: herald.observability.service.)

Multiprocess mode (prometheus-client's): `herald api`, `herald worker` and `herald scheduler`
write their counters to files in one directory per host (HERALD_METRICS_DIR, default
<HERALD_DATA_DIR>/metrics), and `GET /metrics` of any API process on that host reports the sum
over every process that wrote there, live or exited. A worker on a host with no API process can
serve its own figures on HERALD_METRICS_PORT. Outside those commands (tests, `herald dev`, an
embedding application) the figures live in the process's default registry.

Every label value comes from a fixed, small set: channel, provider name, outcome, reaper channel,
row type, notification category, HTTP method, route *template* and status code. None carries a person, an address, an id
or free text.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
from pathlib import Path
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

PROVIDER_CALLS = Counter(
    "herald_provider_calls_total",
    "Provider calls by channel, provider and outcome (sent, failed_retryable, failed_permanent, "
    "skipped, raised).",
    ["channel", "provider", "outcome"],
)
PROVIDER_LATENCY = Histogram(
    "herald_provider_call_duration_seconds",
    "How long one provider call took, by channel and provider.",
    ["channel", "provider"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
PROVIDER_FAILOVERS = Counter(
    "herald_provider_failovers_total",
    "Sends a channel's provider passed to the next provider of its list (HERALD_EMAIL_PROVIDERS, "
    "HERALD_SMS_PROVIDERS), by channel, the provider passed over and why: provider (it certainly "
    "did not take the message: refused, unreachable, 429/503), destination (it cannot serve "
    "that destination) or circuit_open.",
    ["channel", "provider", "reason"],
)
# 1 while the provider's circuit is open or half-open (sends pass it by), 0 while closed; across
# processes the highest live value, so 1 means at least one worker is routing around it.
PROVIDER_CIRCUIT_OPEN = Gauge(
    "herald_provider_circuit_open",
    "1 while a failover provider's circuit is open or half-open in some live process (its sends "
    "go to the next provider), 0 while closed; by channel and provider.",
    ["channel", "provider"],
    multiprocess_mode="livemax",
)
LEASE_EXPIRIES = Counter(
    "herald_lease_expiries_reclaimed_total",
    "Delivery leases that expired and were reclaimed by the reaper, by channel.",
    ["channel"],
)
FANOUT_ROWS = Counter(
    "herald_fanout_rows_written_total",
    "Rows the fan-out committed, by row type (recipient, delivery); rate() gives rows per second.",
    ["row"],
)
WEBHOOK_MESSAGES = Counter(
    "herald_webhook_messages_total",
    "Webhook posts to the host by outcome: sent, retry (answered but not accepted, or "
    "unreachable; tried again later) and dead (gave up: permanent refusal or out of attempts).",
    ["outcome"],
)
DIGESTS_SENT = Counter(
    "herald_digests_sent_total",
    "Digests the sweeper built (one message listing several held deliveries), by channel.",
    ["channel"],
)
DIGEST_ITEMS = Counter(
    "herald_digest_items_total",
    "Held deliveries the digest sweeper let go, by channel and outcome: digested (carried by a "
    "digest) or released (sent on their own: a group of one).",
    ["channel", "outcome"],
)
THROTTLE_SKIPS = Counter(
    "herald_throttle_skips_total",
    "Deliveries the throttle recorded skipped_throttled (the person's cap for the category was "
    "reached within the window), by channel and category.",
    ["channel", "category"],
)
HTTP_LATENCY = Histogram(
    "herald_http_request_duration_seconds",
    "HTTP request latency by method, route template and status code.",
    ["method", "route", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)

COUNTED: tuple[Counter | Histogram | Gauge, ...] = (
    PROVIDER_CALLS,
    PROVIDER_LATENCY,
    PROVIDER_FAILOVERS,
    PROVIDER_CIRCUIT_OPEN,
    LEASE_EXPIRIES,
    FANOUT_ROWS,
    WEBHOOK_MESSAGES,
    DIGESTS_SENT,
    DIGEST_ITEMS,
    THROTTLE_SKIPS,
    HTTP_LATENCY,
)

PROVIDER_OUTCOMES = ("sent", "failed_retryable", "failed_permanent", "skipped", "raised")


def provider_outcome(outcome: str, retryable: bool) -> str:
    if outcome == "failed":
        return "failed_retryable" if retryable else "failed_permanent"
    return outcome if outcome in PROVIDER_OUTCOMES else "skipped"


def use_directory(directory: Path) -> bool:
    """Switch this process to multiprocess mode in `directory` (created if missing); call before
    any metric is touched. False, with a warning, when the directory cannot be used."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        log.warning(
            "metrics directory %s is not writable (%s); this process's counters are served "
            "only by its own /metrics",
            directory,
            type(exc).__name__,
        )
        return False
    os.environ[MULTIPROC_ENV] = str(directory)
    from prometheus_client import values

    # The value class is chosen when prometheus_client is imported; re-choose it now.
    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    for metric in COUNTED:
        metric._metrics.clear()  # children made before the switch (none in practice)
    return True


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


def registry() -> CollectorRegistry:
    """The registry that holds this process's (or, multiprocess, this host's) figures."""
    if not multiprocess():
        return REGISTRY
    from prometheus_client import multiprocess as mp

    collected = CollectorRegistry()
    collected.register(settled_collector(mp.MultiProcessCollector)(None))
    return collected


# A file shorter than this holds no figure yet: prometheus_client's header is 8 bytes.
_HEADER_BYTES = 8


@functools.cache
def settled_collector(base: type[Any]) -> type[Any]:
    """prometheus_client's MultiProcessCollector, leaving out the files another process has
    created but not yet sized. A process's first figure of a kind creates its file empty and
    then grows it to its initial size; a scrape that read it in between failed as a whole
    (struct.error on a zero-byte buffer), so GET /metrics answered 500 while a worker started.
    A file left out now is read by the next scrape, once sized."""

    class SettledFiles(base):  # type: ignore[misc]
        def collect(self) -> Any:
            files = [f for f in glob.glob(os.path.join(self._path, "*.db")) if _sized(f)]
            return self.merge(files, accumulate=True)

    return SettledFiles


def _sized(path: str) -> bool:
    try:
        return os.path.getsize(path) >= _HEADER_BYTES
    except FileNotFoundError:  # a live gauge's file, removed as its process ended
        return False


def render() -> bytes:
    return generate_latest(registry())
