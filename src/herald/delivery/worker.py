"""A channel worker's loop body: claim a batch, prepare, send concurrently, record.

Provider calls happen outside any open transaction: the claim commits first, the sends run with
no connection held, and the outcomes are written in a new transaction.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import outages
from herald.channels.base import Message, Provider, ProviderOutcome
from herald.config import Settings
from herald.db import tenancy
from herald.delivery import queries, quiet, recorder
from herald.delivery.accounts import TenantProviders
from herald.delivery.recorder import Result
from herald.delivery.send import Prepared, prepare
from herald.kinds import Registry
from herald.observability import logs, metrics, tracing
from herald.rendering.render import Override, OverrideKey
from herald.secrets import service as secrets
from herald.secrets.service import SecretVaultUnavailable
from herald.secrets.vault import Vault
from herald.throttle import service as throttle

log = logging.getLogger(__name__)

# R-CHAN-19 (and Telegram, bounded further by its provider's rate limiter).
CONCURRENCY = {
    "sms": 2,
    "email": 4,
    "push": 8,
    "telegram": 4,
    "slack": 4,
    "teams": 4,
    "whatsapp": 4,
}
# Rows claimed together. Paid, slow SMS keeps its batches to a handful; cheap, fast email and
# push use larger ones. A batch's leases are renewed while it is being worked (the heartbeat), so
# rows waiting for their turn behind a slow provider never expire under a live worker.
BATCH_LIMIT = {
    "sms": 4,
    "telegram": 25,
    "email": 200,
    "push": 200,
    "slack": 25,
    "teams": 25,
    "whatsapp": 25,
}
# Outcomes are written in groups as sends finish — once RECORD_EVERY results are waiting, or
# after RECORD_AFTER_SECONDS, together with every other send already finished — so a worker that
# dies mid-batch repeats only the sends finished since the last write (the at-least-once
# window), not the whole batch's.
RECORD_EVERY = 50
RECORD_AFTER_SECONDS = 1.0
# Email and push claim more than BATCH_LIMIT when their provider keeps pace: each batch costs
# about ten statements whatever its size (the claim's transaction, its tenant and planner
# settings, the send contexts, the overrides, the recorder's write), and with a provider that
# answers at once that fixed cost was a fifth of a delivery — batches of 1,000 drained 16,000
# email deliveries a second where batches of 200 drained 12,700 (docs/scaling.md, the worker). A claim
# is sized to what the provider sent in BATCH_SECONDS at its pace on the last full batch, between
# BATCH_LIMIT and PACED_LIMIT: a provider that sends 100 emails a second keeps batches of 200,
# so rows are never held by one worker much longer than today while another could send them.
PACED_LIMIT = {"email": 1000, "push": 1000}
BATCH_SECONDS = 2.0


class Pace:
    """How many rows the next claim of one channel takes, shared by the channel's batch loops."""

    def __init__(self, channel: str) -> None:
        self.floor = BATCH_LIMIT.get(channel, 100)
        self.ceiling = max(self.floor, PACED_LIMIT.get(channel, self.floor))
        self.limit = self.floor

    def observe(self, claimed: int, limit: int, seconds: float) -> None:
        """A batch of `claimed` rows, claimed with `limit`, was sent in `seconds`. A batch the
        queue could not fill says nothing of the provider's pace and changes nothing."""
        if claimed < limit or self.ceiling == self.floor:
            return
        per_second = claimed / max(seconds, 0.001)
        self.limit = max(self.floor, min(self.ceiling, int(per_second * BATCH_SECONDS)))


async def deliver_batch(
    engine: AsyncEngine,
    channel: str,
    provider: Provider,
    *,
    registry: Registry,
    vault: Vault,
    settings: Settings,
    limit: int | None = None,
    tenant_id: str | None = None,
    gate: asyncio.Semaphore | None = None,
    pace: Pace | None = None,
    accounts: TenantProviders | None = None,
) -> int:
    """Claim up to `limit` due deliveries of one channel (default: the `pace`'s, else the
    channel's BATCH_LIMIT) and see each to a recorded outcome. With `accounts`, a delivery of a
    tenant holding its own provider account goes through that tenant's provider
    (herald.delivery.accounts); every other through `provider`.

    Returns how many were claimed (0: nothing was due).
    """
    size = limit or (pace.limit if pace is not None else BATCH_LIMIT.get(channel, 100))
    if accounts is not None:
        # Before the claim: a refresh that fails leaves nothing claimed. A no-op until a change
        # is notified or REFRESH_SECONDS pass.
        await accounts.refresh(engine)
    async with engine.begin() as conn:
        await tenancy.plan_generically(conn)
        claimed = await queries.claim_due_deliveries(
            conn, channel, size, settings.lease_seconds, tenant_id
        )
        if not claimed:
            return 0
        # Cross-tenant above (ids only); from here each tenant's rows are read as that tenant.
        contexts: list[dict[str, Any]] = []
        overrides: dict[tuple[str, str], dict[OverrideKey, Override]] = {}
        for tenant, rows in _by_tenant(claimed).items():
            await tenancy.enter_tenant(conn, tenant)
            span = queries.span_of(row[2] for row in rows)
            loaded = await queries.load_send_contexts(conn, [row[0] for row in rows], span)
            loaded = await _hold_quiet(conn, loaded, span, registry, settings)
            await throttle.mark_throttled(conn, loaded, settings)
            pairs = sorted({(c["tenant_id"], c["kind"]) for c in loaded})
            overrides |= _overrides(await queries.published_overrides(conn, pairs))
            contexts.extend(loaded)
    if not contexts:
        return 0  # every row claimed waits for the end of quiet hours
    own: dict[str, Provider] = {}
    if accounts is not None:
        own = accounts.providers_of(sorted({c["tenant_id"] for c in contexts}), channel)
    batch = _Batch(contexts)
    calls = _Calls(provider)
    heartbeat = asyncio.create_task(_heartbeat(engine, batch, settings.lease_seconds))
    sends = _Sends(
        batch,
        provider,
        calls,
        registry=registry,
        vault=vault,
        settings=settings,
        overrides=overrides,
        gate=gate,
        own=own,
    )
    pending: list[Result] = []
    started = last_flush = time.monotonic()
    try:
        while not sends.finished():
            # Every send finished by now, not just the first: when a group is due, the write
            # takes all of them (fast providers: one or two writes per batch instead of one per
            # RECORD_EVERY). The at-least-once window is unchanged — these sends have happened
            # either way, and writing them sooner only shortens it.
            pending.extend(await sends.next_results())
            if pending and (
                len(pending) >= RECORD_EVERY
                or time.monotonic() - last_flush >= RECORD_AFTER_SECONDS
            ):
                calls.flush()
                await _record(engine, vault, pending, settings)
                pending, last_flush = [], time.monotonic()
        sends.raise_failure()
        if pace is not None:
            pace.observe(len(contexts), size, time.monotonic() - started)
    finally:
        heartbeat.cancel()
        sends.cancel()
        pending.extend(sends.take())
        calls.flush()
        if pending:
            await _record(engine, vault, pending, settings)
        calls.summary(len(contexts))
    return len(contexts)


async def _hold_quiet(
    conn: AsyncConnection,
    loaded: list[dict[str, Any]],
    span: queries.Span,
    registry: Registry,
    settings: Settings,
) -> list[dict[str, Any]]:
    """The rows to send now; those due inside the person's quiet hours go back on the queue,
    due at their end, in this claim's transaction (herald.delivery.quiet)."""
    held = []
    for context in loaded:
        until = quiet.held_until(context, registry, settings)
        if until is not None:
            held.append((context["id"], context["claimed_at"], until))
    if not held:
        return loaded
    await queries.hold_until(conn, held, span)
    waiting = {row[0] for row in held}
    return [context for context in loaded if context["id"] not in waiting]


async def _record(
    engine: AsyncEngine, vault: Vault, results: Sequence[Result], settings: Settings
) -> None:
    """Record outcomes, then release the secrets of deliveries that are finished: only once the
    outcome is written may nothing read the secret again (a crash in between retries the send)."""
    written = await recorder.record(engine, results, settings)
    for result in results:
        ref = result.prepared.secret_ref
        context = result.prepared.context
        if ref is None or context["id"] not in written or recorder.will_retry(result, settings):
            continue
        await secrets.release(vault, context["tenant_id"], ref, holder=str(context["public_id"]))


class _Batch:
    """The rows of one claim that this worker still holds and has not finished."""

    def __init__(self, contexts: Sequence[dict[str, Any]]) -> None:
        self.contexts = list(contexts)
        # Each row's claim (its queue row's claimed_at), the lease token the heartbeat renews.
        self.open: dict[int, datetime] = {c["id"]: c["claimed_at"] for c in contexts}
        self.lost: set[int] = set()

    def done(self, delivery_id: int) -> None:
        self.open.pop(delivery_id, None)


async def _heartbeat(engine: AsyncEngine, batch: _Batch, lease_seconds: int) -> None:
    """Renew the leases of the batch's unfinished rows every third of a lease."""
    while batch.open:
        await asyncio.sleep(lease_seconds / 3)
        held = list(batch.open.items())
        try:
            async with engine.begin() as conn:
                await tenancy.plan_generically(conn)
                kept = await queries.extend_leases(conn, held, lease_seconds)
        except Exception as exc:
            dependency = outages.unavailable(exc)
            if dependency is not None:
                outages.state(dependency).failed(exc)
            else:
                log.warning("lease renewal failed; will try again", exc_info=True)
            continue
        for delivery_id, _ in held:
            if delivery_id not in kept:
                batch.lost.add(delivery_id)


class _Calls:
    """The provider calls of one batch, counted and timed together.

    The per-call metric updates and INFO line were two fifths of a worker's CPU per delivery with a
    fast provider: the counter is now incremented once per outcome per group (before each
    record write and at the batch's end), the latency histogram observed from the same flush,
    and one INFO line summarises the batch. Each call's own line stays — at WARNING for a
    failure (the runbook's `delivery … via smtp: failed_retryable (…) in 12 ms`), at DEBUG
    otherwise."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self.started = time.monotonic()
        # By the provider that answered: a failover provider's calls count under its members.
        self.outcomes: dict[tuple[str, str], int] = {}
        self.total: dict[str, int] = {}
        self.latencies: dict[str, list[float]] = {}

    def add(self, name: str, label: str, elapsed: float) -> None:
        key = (name, label)
        self.outcomes[key] = self.outcomes.get(key, 0) + 1
        self.latencies.setdefault(name, []).append(elapsed)

    def flush(self) -> None:
        """Publish the calls counted since the last flush."""
        channel = self.provider.channel
        for (name, label), count in self.outcomes.items():
            metrics.PROVIDER_CALLS.labels(channel, name, label).inc(count)
            self.total[label] = self.total.get(label, 0) + count
        for name, latencies in self.latencies.items():
            latency = metrics.PROVIDER_LATENCY.labels(channel, name)
            for elapsed in latencies:
                latency.observe(elapsed)
        self.outcomes, self.latencies = {}, {}

    def summary(self, claimed: int) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        outcomes = ", ".join(f"{count} {label}" for label, count in sorted(self.total.items()))
        log.info(
            "%s batch of %d via %s: %s in %.0f ms",
            self.provider.channel,
            claimed,
            self.provider.name,
            outcomes or "no provider calls",
            (time.monotonic() - self.started) * 1000,
            extra={"channel": self.provider.channel, "provider": self.provider.name},
        )


class _Sends:
    """A batch's sends, run by a few sender tasks (the channel's concurrency), each taking the
    batch's next row when it is free; their results are collected as they finish.

    A task per row (200 for an email batch) cost a fifth of the worker's CPU per delivery with a
    fast provider — creating, scheduling and finishing each task, and binding four log ids into
    its context — while no more than the channel's concurrency of them could ever be sending."""

    def __init__(
        self,
        batch: _Batch,
        provider: Provider,
        calls: _Calls,
        *,
        registry: Registry,
        vault: Vault,
        settings: Settings,
        overrides: dict[tuple[str, str], dict[OverrideKey, Override]],
        gate: asyncio.Semaphore | None,
        own: Mapping[str, Provider] | None = None,
    ) -> None:
        self.batch = batch
        self.provider = provider
        # Tenants with a provider of their own (herald.delivery.accounts); usually empty.
        self.own = own or {}
        self.calls = calls
        self.registry = registry
        self.vault = vault
        self.settings = settings
        self.overrides = overrides
        # Shared across a channel's batch loops, so the channel's provider concurrency is a
        # process total.
        width = CONCURRENCY.get(provider.channel, 4)
        self.gate = gate or asyncio.Semaphore(width)
        self.unknown = recorder.UNKNOWN_CODES.get(provider.channel, "PROVIDER_UNKNOWN")
        self.results: list[Result] = []
        self.ready = asyncio.Event()
        self.todo = iter(batch.contexts)
        self.senders = [
            asyncio.ensure_future(self._sender()) for _ in range(min(width, len(batch.contexts)))
        ]

    def finished(self) -> bool:
        return not self.results and all(task.done() for task in self.senders)

    async def next_results(self) -> list[Result]:
        """The results finished since the last call, once there is at least one (or every sender
        has stopped)."""
        while not self.results and not all(task.done() for task in self.senders):
            await self.ready.wait()
            self.ready.clear()
        return self.take()

    def take(self) -> list[Result]:
        taken, self.results = self.results, []
        return taken

    def raise_failure(self) -> None:
        """A sender that stopped on an exception (none is expected: each send's own failures
        become outcomes) fails the batch, as a failed task per row did."""
        for task in self.senders:
            failure = task.exception() if task.done() and not task.cancelled() else None
            if failure is not None:
                raise failure

    def cancel(self) -> None:
        """Stop the senders when the batch ends early (its loop was cancelled or raised). A send
        cut off here is sent again once its lease runs out — the at-least-once window of a crash."""
        for task in self.senders:
            task.cancel()

    async def _sender(self) -> None:
        try:
            # A place at the gate is taken once for the sender's whole run of rows, not once a
            # row: the channel's loops share the gate, so three email loops' twelve senders
            # queued at a gate of four, and taking and giving back a place for every row — the
            # standard semaphore walks its waiters on each acquire — was 5 % of the worker's CPU
            # a delivery with a fast provider (docs/scaling.md, the worker). At most the channel's
            # concurrency of rows are still being sent at once, process-wide; a loop whose
            # senders wait here meanwhile claims, records and renews its leases as before.
            async with self.gate:
                # One iterator shared by the senders: each next() hands a row to exactly one.
                for context in self.todo:
                    with logs.send_scope(
                        request_id=context.get("origin_request_id"),
                        event_id=context.get("event_public_id"),
                        delivery_id=context["public_id"],
                        tenant=context["tenant_id"],
                    ):
                        try:
                            result = await self._attempt(context)
                        finally:
                            self.batch.done(context["id"])
                    if result is not None:
                        self.results.append(result)
                        self.ready.set()
        finally:
            self.ready.set()

    async def _attempt(self, context: dict[str, Any]) -> Result | None:
        """One row, sent or skipped; the caller holds a place at the gate."""
        if context["id"] in self.batch.lost:
            # Reclaimed while it waited (the heartbeat could not renew it): another worker owns
            # it now, and sending here would send it twice. Nothing to record.
            return None
        try:
            prepared = await prepare(
                context,
                registry=self.registry,
                vault=self.vault,
                settings=self.settings,
                overrides=self.overrides.get((context["tenant_id"], context["kind"]), {}),
            )
        except SecretVaultUnavailable:
            # The vault did not answer. Whether or not the claim reached it, the retry's claim
            # finds the values (the same delivery may claim again), so try again later.
            return Result(
                Prepared(context),
                ProviderOutcome.failure("SECRET_VAULT_UNAVAILABLE", retryable=True),
            )
        except Exception as exc:
            log.error("preparing delivery %s raised %s", context["public_id"], type(exc).__name__)
            return Result(Prepared(context), ProviderOutcome.failure(self.unknown, retryable=True))
        if prepared.message is None:
            return Result(prepared)
        message = prepared.message
        # The rendered message and its destination never reach a log line, whatever logs.
        logs.mark_sensitive(message.to, message.title, message.body, message.body_html)
        provider = self.own.get(context["tenant_id"], self.provider) if self.own else self.provider
        outcome = await _call(provider, self.calls, message, context, self.unknown)
        # A send that will be retried keeps its claim on the secret, so the retry still sends the
        # reset email; the values went nowhere but the provider.
        return Result(prepared, outcome, provider=outcome.provider or provider.name)


async def _call(
    provider: Provider, calls: _Calls, message: Message, context: dict[str, Any], unknown: str
) -> ProviderOutcome:
    """One provider call: timed, counted by outcome (in the batch's tally), traced under the
    event's trace when tracing is on, logged (a failure at WARNING, anything else at DEBUG)."""
    started = time.perf_counter()
    if tracing.enabled():
        with tracing.span(
            "provider.send",
            parent=context.get("traceparent"),
            kind="client",
            attributes={
                "herald.channel": provider.channel,
                "herald.provider": provider.name,
                "herald.delivery_id": str(context["public_id"]),
            },
        ) as current:
            outcome, label = await _send(provider, message, unknown)
            tracing.set_attributes(
                current,
                **{
                    "herald.outcome": label,
                    "herald.error_code": outcome.error_code,
                    # A failover provider's member that answered, and those passed over.
                    "herald.provider_used": outcome.provider,
                    "herald.passed_over": ",".join(outcome.passed_over) or None,
                },
            )
    else:
        # With tracing off no span is opened at all: the no-op context manager and its
        # attributes were measurable work per call for nothing.
        outcome, label = await _send(provider, message, unknown)
    elapsed = time.perf_counter() - started
    name = outcome.provider or provider.name
    calls.add(name, label, elapsed)
    level = _log_level(outcome)
    if log.isEnabledFor(level):
        log.log(
            level,
            "delivery %s via %s: %s%s%s in %.0f ms",
            context["public_id"],
            name,
            label,
            f" ({outcome.error_code})" if outcome.error_code else "",
            f" after passing over {', '.join(outcome.passed_over)}" if outcome.passed_over else "",
            elapsed * 1000,
            extra={"channel": provider.channel, "provider": name, "outcome": label},
        )
    return outcome


def _log_level(outcome: ProviderOutcome) -> int:
    """A failure at WARNING; a send that failed over from a provider that was called at INFO (that
    provider logged its own failure); anything else, passing open circuits by included, at DEBUG:
    an outage of the first provider must not write a line per send (its circuit says it once)."""
    if outcome.outcome == "failed":
        return logging.WARNING
    if any(not entry.endswith(":circuit_open") for entry in outcome.passed_over):
        return logging.INFO
    return logging.DEBUG


async def _send(provider: Provider, message: Message, unknown: str) -> tuple[ProviderOutcome, str]:
    """The provider's answer and its metric label. A provider must not raise; if one does, it is a
    transport fault to retry, and the log says which provider, never the message."""
    try:
        outcome = await provider.send(message)
    except Exception as exc:
        log.error(
            "%s provider raised %s; treated as a retryable failure",
            provider.name,
            type(exc).__name__,
        )
        return ProviderOutcome.failure(unknown, retryable=True), "raised"
    return outcome, metrics.provider_outcome(outcome.outcome, outcome.retryable)


def _by_tenant(
    claimed: Sequence[tuple[int, str, datetime]],
) -> dict[str, list[tuple[int, str, datetime]]]:
    grouped: dict[str, list[tuple[int, str, datetime]]] = {}
    for row in claimed:
        grouped.setdefault(row[1], []).append(row)
    return grouped


def _overrides(
    rows: Sequence[dict[str, Any]],
) -> dict[tuple[str, str], dict[OverrideKey, Override]]:
    found: dict[tuple[str, str], dict[OverrideKey, Override]] = {}
    for row in rows:
        found.setdefault((row["tenant_id"], row["kind"]), {})[
            (row["kind"], row["channel"], row["locale"])
        ] = Override(title=row["title"], body=row["body"], version=row["version"])
    return found


# Batch loops per channel: while one waits on the database (claim, record), another prepares
# and sends, so a 2-core machine keeps both PostgreSQL and Python busy. Email and push — large
# batches (200 when this was measured; up to 1,000 now, Pace), providers that answer in
# milliseconds — take three: with two, a million-person broadcast's senders fell behind its
# fan-out and drained the rest alone once it completed
# (24-45 s); with three they kept pace, the machine stayed 1.91 of 2 cores busy instead of
# 1.80, and the broadcast completed 8 % sooner on 3 % less CPU (docs/scaling.md, the worker). Four —
# a second senders process on the same two cores — made it slower: each loop's claim walks
# past the rows the others hold.
LOOPS_PER_CHANNEL = {"email": 3, "push": 3}
DEFAULT_LOOPS = 2  # SMS and Telegram: small batches behind slow, rate-limited providers


def loops_of(channel: str) -> int:
    """How many batch loops a worker runs for `channel`."""
    return LOOPS_PER_CHANNEL.get(channel, DEFAULT_LOOPS)


async def drain_channel(
    engine: AsyncEngine,
    channel: str,
    provider: Provider,
    *,
    registry: Registry,
    vault: Vault,
    settings: Settings,
    tenant_id: str | None = None,
    loops: int | None = None,
    accounts: TenantProviders | None = None,
) -> int:
    """Deliver until nothing of `channel` is due, with `loops` batch loops (default: the
    channel's, loops_of); returns rows claimed."""
    gate = asyncio.Semaphore(CONCURRENCY.get(channel, 4))
    pace = Pace(channel)

    async def loop() -> int:
        total = 0
        while claimed := await deliver_batch(
            engine,
            channel,
            provider,
            registry=registry,
            vault=vault,
            settings=settings,
            tenant_id=tenant_id,
            gate=gate,
            pace=pace,
            accounts=accounts,
        ):
            total += claimed
        return total

    return sum(await asyncio.gather(*(loop() for _ in range(loops or loops_of(channel)))))
