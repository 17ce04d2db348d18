"""A channel worker's loop body: claim a batch, prepare, send concurrently, record.

Provider calls happen outside any open transaction: the claim commits first, the sends run with
no connection held, and the outcomes are written in a new transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.base import Provider, ProviderOutcome
from herald.config import Settings
from herald.delivery import queries, recorder
from herald.delivery.recorder import Result
from herald.delivery.send import prepare
from herald.kinds import Registry
from herald.rendering.render import Override, OverrideKey
from herald.secrets import service as secrets
from herald.secrets.vault import Vault

log = logging.getLogger(__name__)

# R-CHAN-19 (and Telegram, bounded further by its provider's rate limiter).
CONCURRENCY = {"sms": 2, "email": 4, "push": 8, "telegram": 4}
# Rows claimed (and recorded) together. Outcomes are written once per batch, so a worker that
# dies mid-batch repeats the sends it made but had not recorded — the at-least-once window. Paid,
# slow SMS keeps that window to a handful; cheap, fast email and push use larger batches.
BATCH_LIMIT = {"sms": 4, "telegram": 25, "email": 100, "push": 100}
RECORD_EVERY = 25


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
) -> int:
    """Claim up to `limit` due deliveries of one channel and see each to a recorded outcome.

    Returns how many were claimed (0: nothing was due).
    """
    async with engine.begin() as conn:
        contexts = await queries.claim_due_deliveries(
            conn, channel, limit or BATCH_LIMIT.get(channel, 100), settings.lease_seconds, tenant_id
        )
        if not contexts:
            return 0
        pairs = sorted({(c["tenant_id"], c["kind"]) for c in contexts})
        overrides = _overrides(await queries.published_overrides(conn, pairs))
    sends = _start_sends(
        contexts,
        provider,
        registry=registry,
        vault=vault,
        settings=settings,
        overrides=overrides,
        gate=gate,
    )
    # Record outcomes in groups as they complete, not once at the end of the batch: a crash then
    # repeats at most one group's unrecorded sends, not the whole batch's.
    pending: list[Result] = []
    for finished in asyncio.as_completed(sends):
        pending.append(await finished)
        if len(pending) >= RECORD_EVERY:
            await recorder.record(engine, pending, settings)
            pending = []
    if pending:
        await recorder.record(engine, pending, settings)
    return len(contexts)


def _start_sends(
    contexts: Sequence[dict[str, Any]],
    provider: Provider,
    *,
    registry: Registry,
    vault: Vault,
    settings: Settings,
    overrides: dict[tuple[str, str], dict[OverrideKey, Override]],
    gate: asyncio.Semaphore | None,
) -> list[asyncio.Task[Result]]:
    # Shared across a channel's batch loops, so the channel's provider concurrency is a process total.
    gate = gate or asyncio.Semaphore(CONCURRENCY.get(provider.channel, 4))

    async def one(context: dict[str, Any]) -> Result:
        async with gate:
            prepared = await prepare(
                context,
                registry=registry,
                vault=vault,
                settings=settings,
                overrides=overrides.get((context["tenant_id"], context["kind"]), {}),
            )
            if prepared.message is None:
                return Result(prepared)
            try:
                outcome = await provider.send(prepared.message)
            except Exception as exc:
                # A provider must not raise; if one does, it is a transport fault to retry, and the
                # log says which provider, never the message.
                log.error(
                    "%s provider raised %s; treated as a retryable failure",
                    provider.name,
                    type(exc).__name__,
                )
                outcome = ProviderOutcome.failure(
                    recorder.UNKNOWN_CODES.get(provider.channel, "PROVIDER_UNKNOWN"), retryable=True
                )
            if outcome.outcome == "failed" and outcome.retryable and prepared.secret is not None:
                ref, values = prepared.secret
                await secrets.give_back(
                    vault, context["tenant_id"], ref, values, settings.vault_ttl_seconds
                )
            return Result(prepared, outcome)

    return [asyncio.ensure_future(one(c)) for c in contexts]


def _overrides(
    rows: Sequence[dict[str, Any]],
) -> dict[tuple[str, str], dict[OverrideKey, Override]]:
    found: dict[tuple[str, str], dict[OverrideKey, Override]] = {}
    for row in rows:
        found.setdefault((row["tenant_id"], row["kind"]), {})[
            (row["kind"], row["channel"], row["locale"])
        ] = Override(title=row["title"], body=row["body"], version=row["version"])
    return found


# Two batch loops per channel: while one waits on the database (claim, record), the other
# prepares and sends, so a 2-core machine keeps both PostgreSQL and Python busy.
LOOPS_PER_CHANNEL = 2


async def drain_channel(
    engine: AsyncEngine,
    channel: str,
    provider: Provider,
    *,
    registry: Registry,
    vault: Vault,
    settings: Settings,
    tenant_id: str | None = None,
    loops: int = LOOPS_PER_CHANNEL,
) -> int:
    """Deliver until nothing of `channel` is due, with `loops` batch loops; returns rows claimed."""
    gate = asyncio.Semaphore(CONCURRENCY.get(channel, 4))

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
        ):
            total += claimed
        return total

    return sum(await asyncio.gather(*(loop() for _ in range(loops))))
