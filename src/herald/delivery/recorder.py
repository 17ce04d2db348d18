"""The DeliveryRecorder: the only writer of notification_delivery.status after the fan-out's
initial insert (R-STATE-5).

It turns each send's result into one row of a batch write and decides the transition:
- sent → `sent`, one attempt;
- a skip (gone, no template, no destination, unconfigured or mock provider) → `skipped_*`, no
  attempt consumed (R-STATE-13) and never a dead letter (R-DLQ-7, R-DLQ-19);
- a retryable failure with attempts left → `failed` with backoff (sweep 2 re-queues it);
- a non-retryable failure, or the last attempt → `dead` with its dead letter, no backoff
  (R-STATE-9, R-DLQ-17).
`last_error` is a code from the channel's fixed table plus at most an allowlisted detail
(R-STATE-15). The batch is written in one statement; if that statement fails, each row is written
on its own so one bad row never loses another's outcome.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import outages, vocabulary
from herald.channels.base import ProviderOutcome, bounded_detail
from herald.config import Settings
from herald.db import tenancy
from herald.delivery import queries
from herald.delivery.backoff import backoff_seconds
from herald.delivery.queries import OutcomeRows
from herald.delivery.send import Prepared
from herald.receipts import service as receipts
from herald.values import value

log = logging.getLogger(__name__)

UNKNOWN_CODES = {
    "email": "EMAIL_UNKNOWN",
    "sms": "SMS_UNKNOWN",
    "push": "PUSH_UNKNOWN",
    "telegram": "TELEGRAM_UNKNOWN",
    "slack": "SLACK_UNKNOWN",
    "teams": "TEAMS_UNKNOWN",
    "whatsapp": "WHATSAPP_UNKNOWN",
}


@value
class Result:
    """What happened to one claimed delivery: a skip decided before sending, or a provider outcome."""

    prepared: Prepared
    outcome: ProviderOutcome | None = None
    # The provider that gave the outcome (a failover provider's member): the attempt's evidence.
    provider: str | None = None


def will_retry(result: Result, settings: Settings) -> bool:
    """True when the outcome schedules another attempt (a retryable failure with attempts left)."""
    outcome = result.outcome
    return (
        outcome is not None
        and outcome.outcome == "failed"
        and outcome.retryable
        and result.prepared.context["attempts"] + 1 < settings.max_attempts
    )


def last_error(outcome: ProviderOutcome, channel: str) -> str:
    code = outcome.error_code or UNKNOWN_CODES.get(channel, "PROVIDER_UNKNOWN")
    detail = bounded_detail(outcome.detail)
    return f"{code} ({detail})" if detail else code


def plan(results: Sequence[Result], settings: Settings) -> OutcomeRows:
    rows = OutcomeRows()
    for result in results:
        ctx = result.prepared.context
        prepared, outcome = result.prepared, result.outcome
        status: str
        attempt_inc = failure_inc = 0
        delay: int | None = None
        error: str | None = None
        called = False
        outcome_name: str | None = None
        if outcome is None:
            status = prepared.skip or "skipped_no_template"
            error = prepared.skip_reason
        elif outcome.outcome == "sent":
            status, attempt_inc, called, outcome_name = "sent", 1, True, "sent"
        elif outcome.outcome == "skipped":
            # Unconfigured and mock alike: re-driven by backfill once a real provider is configured.
            status = (
                "skipped_unconfigured"
                if outcome.skip_reason != "no_destination"
                else "skipped_no_destination"
            )
            called, outcome_name = outcome.skip_reason == "mock", "skipped"
        else:
            attempt_inc, failure_inc, called = 1, 1, True
            error = last_error(outcome, ctx["channel"])
            if will_retry(result, settings):
                status, outcome_name = "failed", "failed"
                delay = backoff_seconds(
                    ctx["failure_count"] + 1,
                    base=settings.retry_base_seconds,
                    ceiling=settings.retry_max_seconds,
                    retry_after=outcome.retry_after_seconds,
                )
            else:
                status, outcome_name = "dead", "dead"
        rendered = prepared.rendered if prepared.persist else None
        rows.ids.append(ctx["id"])
        rows.claimed_ats.append(ctx["claimed_at"])
        rows.occurred_ats.append(ctx["occurred_at"])
        rows.statuses.append(status)
        rows.attempt_incs.append(attempt_inc)
        rows.failure_incs.append(failure_inc)
        rows.delays.append(delay)
        rows.errors.append(error)
        rows.message_ids.append(outcome.provider_message_id if outcome else None)
        rows.hints.append(prepared.destination_hint)
        rows.titles.append(rendered.title if rendered else None)
        rows.bodies.append(rendered.body if rendered else None)
        rows.hashes.append(rendered.content_hash if rendered else None)
        rows.template_versions.append(rendered.template_version if rendered else None)
        rows.called.append(called)
        rows.provider_statuses.append(outcome.provider_status if outcome else None)
        rows.outcomes.append(outcome_name)
        rows.providers.append(result.provider if outcome else None)
        rows.passed_over.append(
            ",".join(outcome.passed_over) if outcome and outcome.passed_over else None
        )
    return rows


async def record(engine: AsyncEngine, results: Sequence[Result], settings: Settings) -> set[int]:
    """Write every outcome; returns the ids written. Side effects of an outcome (a dead push token,
    a bot the person blocked) are applied in the same transaction as the row (R-CHAN-16).

    While the database is unavailable the write is retried with backoff for up to one lease: the
    sends already happened, and recording them when the database is back spares their recipients
    a second copy after the leases expire. A write whose COMMIT was cut off is asked about
    (pg_xact_status) before it is tried again: had it landed, the second try would find its rows
    finished and call their outcomes lost — and their secrets would never be released."""
    rows = plan(results, settings)
    database = outages.state(outages.DATABASE)
    backoff = outages.Backoff()
    deadline = time.monotonic() + settings.lease_seconds
    in_doubt: tuple[set[int], str] | None = None  # a write whose COMMIT's answer was lost
    while True:
        started = time.monotonic()
        ran: tuple[set[int], str | None] | None = None
        try:
            if in_doubt is not None:
                async with engine.connect() as conn:
                    status = await queries.transaction_status(conn, in_doubt[1])
                if status == "committed":
                    written = in_doubt[0]
                    database.succeeded(started)
                    break
                if status != "in progress":  # in progress: its session has not noticed yet
                    in_doubt = None  # aborted (or too old to tell): the write is tried again
            if in_doubt is None:
                async with engine.begin() as conn:
                    ran = await _write(conn, results, rows)
                written = ran[0]
                database.succeeded(started)
                break
        except Exception as exc:
            dependency = outages.unavailable(exc)
            if dependency is None:
                written = await _record_one_by_one(engine, results, rows)
                break
            outages.state(dependency).failed(exc)
            if ran is not None and ran[1] is not None:  # the statements ran; the COMMIT failed
                in_doubt = (ran[0], ran[1])
        if time.monotonic() >= deadline:
            log.warning(
                "%d outcome(s) not recorded: the database was unavailable for a whole lease; "
                "the reaper will re-queue those deliveries once it is back",
                len(rows),
            )
            return set()
        await asyncio.sleep(backoff.next_delay())
    lost = set(rows.ids) - written
    if lost:
        # The reaper reclaimed these while the provider call was open: the newer state stands.
        log.warning(
            "%d outcome(s) arrived after their lease was reclaimed and were not written", len(lost)
        )
    return written


async def _record_one_by_one(
    engine: AsyncEngine, results: Sequence[Result], rows: OutcomeRows
) -> set[int]:
    """The batch statement failed for a reason other than an outage: write each row on its own,
    so one bad row never loses another's outcome."""
    log.exception("batch record failed; recording the %d outcomes one by one", len(rows))
    written: set[int] = set()
    for index, result in enumerate(results):
        try:
            async with engine.begin() as conn:
                one, _ = await _write(conn, [result], rows.row(index))
            written |= one
        except Exception:
            log.exception(
                "could not record delivery %s; its lease will expire and the reaper retries it",
                result.prepared.context["public_id"],
            )
    return written


async def _write(
    conn: AsyncConnection, results: Sequence[Result], rows: OutcomeRows
) -> tuple[set[int], str | None]:
    """One statement per tenant in the batch, each under its tenant (row-level security); the
    ids written and the transaction's id (None when nothing was written)."""
    by_tenant: dict[str, list[int]] = {}
    for index, result in enumerate(results):
        by_tenant.setdefault(result.prepared.context["tenant_id"], []).append(index)
    written: set[int] = set()
    transaction: str | None = None
    for tenant, indexes in by_tenant.items():
        await tenancy.enter_tenant(conn, tenant, generic_plans=True)
        # A batch of one tenant (nearly every batch) is written as it is, not copied row by row.
        part = rows if len(by_tenant) == 1 else rows.subset(indexes)
        done, xid = await queries.record_outcomes(conn, part)
        await _side_effects(conn, [results[i] for i in indexes], done)
        await _apply_parked_receipts(conn, tenant, [results[i] for i in indexes], done)
        written |= done
        transaction = transaction or xid
    return written, transaction


async def _apply_parked_receipts(
    conn: AsyncConnection, tenant: str, results: Sequence[Result], written: set[int]
) -> None:
    """Receipts that came before this write (a fast provider's status callback) are applied in
    its transaction, the one that stores the message ids they name (herald.receipts)."""
    sent: dict[str, dict[str, int]] = {}
    for result in results:
        ctx, outcome = result.prepared.context, result.outcome
        if (
            outcome is not None
            and outcome.outcome == "sent"
            and outcome.provider_message_id
            and ctx["id"] in written
            and ctx["channel"] in vocabulary.PARKED_RECEIPT_CHANNELS
        ):
            sent.setdefault(ctx["channel"], {})[outcome.provider_message_id] = ctx["id"]
    for channel, by_message_id in sent.items():
        await receipts.apply_parked(conn, tenant, channel, by_message_id)


async def _side_effects(
    conn: AsyncConnection, results: Sequence[Result], written: set[int]
) -> None:
    for result in results:
        ctx, outcome = result.prepared.context, result.outcome
        if outcome is None or ctx["id"] not in written:
            continue
        if outcome.invalidate_token and ctx["provider_target_id"] is not None:
            await queries.deactivate_push_token(conn, ctx["provider_target_id"], "unregistered")
        if outcome.recipient_blocked and ctx["person_id"] is not None:
            await queries.forbid_destination(conn, ctx["channel"], ctx["person_id"])
        if outcome.destination_undeliverable and ctx["person_id"] is not None:
            await receipts.mark_refused_destination(
                conn,
                ctx["channel"],
                ctx["person_id"],
                last_error(outcome, ctx["channel"]),
                str(ctx["public_id"]),
            )
