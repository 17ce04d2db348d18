"""Operational email: alerts to the one fixed support mailbox (R-OPMAIL-*).

An operational notice is addressed to a mailbox, not a person, so it has no event, recipient or
delivery row (R-OPMAIL-2), no preferences and no place in any centre (R-OPMAIL-3). Its own table
is its work type (R-OPMAIL-1), claimed only by the sender here (R-PLAT-10).

The producer renders it when it enqueues — at most three label/value rows, values HTML-escaped —
and the sender sends exactly that stored rendering (R-OPMAIL-5), so a template edit never changes
a notice already waiting (R-OPMAIL-6). It goes out through the email channel's own provider
instance (R-OPMAIL-4: one configuration, one is_configured() rule, one place to swap it), with
the same layout every email gets.

Outcomes: sent; a transport failure is retried with the delivery backoff on the notice's own
budget, `operational_email_max_attempts` (R-PLAT-9), and dead after that (or at once on a
rejection) with a dead letter whose payload_ref is {aggregateType, aggregateId, eventType},
absent keys omitted (R-DLQ-2, R-SCHEMA-53). With no provider configured or no support mailbox the
notice completes as `skipped` with a warning and no dead letter (R-OPMAIL-7), and is never sent
later (R-OPMAIL-8); whoever raised it relays its feed toast independently (R-OPMAIL-9).
An event type outside OPERATIONAL_EVENT_TYPES is refused at enqueue, and a stored row of an
unknown type is recorded dead with its error, never completed quietly (R-OPMAIL-10, R-PLAT-11).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.channels.base import Message, Provider, ProviderOutcome, bounded_detail
from herald.config import Settings
from herald.delivery.backoff import backoff_seconds
from herald.errors import OperationalEmailInvalid, OperationalEventUnknown
from herald.maintenance import queries
from herald.rendering.escaping import escape_html

log = logging.getLogger(__name__)

# The operational work this sender knows how to send, with what each one is. Anything else is
# refused at enqueue and recorded dead at send (R-OPMAIL-10).
OPERATIONAL_EVENT_TYPES: Final[Mapping[str, str]] = MappingProxyType(
    {
        "sms.credit_low": "The SMS provider's balance fell below HERALD_SMS_CREDIT_THRESHOLD.",
        "delivery.dead": "A delivery used up its attempts and was dead-lettered.",
        "feedback.submitted": "Somebody submitted feedback for the support team.",
    }
)

MAX_ROWS: Final = 3
MAX_SUBJECT: Final = 200
MAX_LABEL: Final = 100
MAX_VALUE: Final = 2_000
MAX_AGGREGATE: Final = 200

UNKNOWN_EVENT_TYPE_ERROR: Final = "OPMAIL_UNKNOWN_EVENT_TYPE"
SEND_RAISED_ERROR: Final = "EMAIL_UNKNOWN"
SEND_BATCH: Final = 10
MAX_BATCHES_PER_TICK: Final = 10


# -- enqueue ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendering:
    subject: str
    body_text: str
    body_html: str


def render(subject: str, rows: Sequence[tuple[str, str]]) -> Rendering:
    """The stored rendering: one `Label: value` line per row. The HTML part escapes every label
    and value; the email layout (channels.email.render_html) wraps it when it is sent."""
    subject = " ".join(subject.split())
    if not subject or len(subject) > MAX_SUBJECT:
        raise OperationalEmailInvalid(f"the subject must be 1 to {MAX_SUBJECT} characters")
    if not 1 <= len(rows) <= MAX_ROWS:
        raise OperationalEmailInvalid(
            f"an operational email has 1 to {MAX_ROWS} label/value rows; got {len(rows)}"
        )
    lines: list[tuple[str, str]] = []
    for label, value in rows:
        label = " ".join(str(label).split())
        value = str(value).strip()
        if not label or len(label) > MAX_LABEL:
            raise OperationalEmailInvalid(f"each label must be 1 to {MAX_LABEL} characters")
        if len(value) > MAX_VALUE:
            value = value[: MAX_VALUE - 1].rstrip() + "…"
        lines.append((label, value))
    text = "\n".join(f"{label}: {value}" for label, value in lines)
    html = "\n".join(
        f"<strong>{escape_html(label)}</strong>: {escape_html(value)}" for label, value in lines
    )
    return Rendering(subject=subject, body_text=text, body_html=html)


def _aggregate(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    if not value or len(value) > MAX_AGGREGATE:
        raise OperationalEmailInvalid(f"{what} must be 1 to {MAX_AGGREGATE} characters")
    return value


async def enqueue_operational_email(
    conn: AsyncConnection,
    *,
    tenant_id: str,
    event_type: str,
    aggregate_type: str | None = None,
    aggregate_id: str | None = None,
    rows: Sequence[tuple[str, str]],
    subject: str,
) -> uuid.UUID:
    """Render and store one notice for the support mailbox in the caller's transaction; the
    maintenance tick sends it. Returns its public id. Raises OperationalEventUnknown for an event
    type outside OPERATIONAL_EVENT_TYPES and OperationalEmailInvalid for a malformed notice,
    before anything is written. Writes no event, recipient or delivery row (R-OPMAIL-2)."""
    if event_type not in OPERATIONAL_EVENT_TYPES:
        raise OperationalEventUnknown(
            f"unknown operational event type {event_type!r}; known: "
            + ", ".join(sorted(OPERATIONAL_EVENT_TYPES))
        )
    rendering = render(subject, rows)
    return await queries.insert_operational_email(
        conn,
        {
            "tenant_id": tenant_id,
            "event_type": event_type,
            "aggregate_type": _aggregate(aggregate_type, "aggregate_type"),
            "aggregate_id": _aggregate(aggregate_id, "aggregate_id"),
            "subject": rendering.subject,
            "body_text": rendering.body_text,
            "body_html": rendering.body_html,
        },
    )


# -- send ------------------------------------------------------------------------------------


@dataclass
class SendReport:
    sent: int = 0
    retried: int = 0
    dead: int = 0
    skipped: int = 0
    reclaimed: int = 0
    lost: int = 0  # outcomes not written: the lease had been reclaimed meanwhile


@dataclass(frozen=True)
class _Decision:
    status: str
    attempt_inc: int
    delay: int | None = None
    error: str | None = None


async def send_due_operational_emails(
    engine: AsyncEngine,
    settings: Settings,
    provider: Provider | None,
    *,
    tenant_id: str | None = None,
    limit: int = SEND_BATCH,
    max_batches: int = MAX_BATCHES_PER_TICK,
) -> SendReport:
    """Reclaim expired leases, then claim and send due notices batch by batch. The claim commits
    before any send, and each outcome is written in its own short transaction, so no database
    transaction stays open across a provider call. `provider` is the email channel's instance;
    None (or unconfigured) completes every due notice as skipped (R-OPMAIL-7)."""
    report = SendReport()
    async with engine.begin() as conn:
        reclaimed = await queries.reclaim_operational_email_leases(
            conn, max_attempts=settings.operational_email_max_attempts, limit=limit * max_batches
        )
    report.reclaimed = len(reclaimed)
    report.dead += reclaimed.count("dead")
    if reclaimed:
        log.warning(
            "operational email: reclaimed %d expired lease(s), %d now dead",
            len(reclaimed),
            reclaimed.count("dead"),
        )
    for _ in range(max_batches):
        async with engine.begin() as conn:
            claimed = await queries.claim_due_operational_emails(
                conn, limit=limit, lease_seconds=settings.lease_seconds, tenant_id=tenant_id
            )
        for row in claimed:
            decision = await _send_one(settings, provider, row)
            async with engine.begin() as conn:
                written = await queries.finish_operational_email(
                    conn,
                    id=row["id"],
                    claimed_at=row["claimed_at"],
                    status=decision.status,
                    attempt_inc=decision.attempt_inc,
                    delay=decision.delay,
                    error=decision.error,
                )
            _count(report, written)
        if len(claimed) < limit:
            break
    return report


def _count(report: SendReport, status: str | None) -> None:
    if status is None:
        report.lost += 1
    elif status == "sent":
        report.sent += 1
    elif status == "queued":
        report.retried += 1
    elif status == "dead":
        report.dead += 1
    else:
        report.skipped += 1


async def _send_one(
    settings: Settings, provider: Provider | None, row: Mapping[str, Any]
) -> _Decision:
    ref = f"{row['event_type']} {row['public_id']}"
    if row["event_type"] not in OPERATIONAL_EVENT_TYPES:
        # R-OPMAIL-10 / R-PLAT-11: nothing knows how to send it; recorded as a failure, never as
        # a quiet completion.
        log.error("operational email %s: unknown event type; recorded dead", ref)
        return _Decision("dead", 1, error=UNKNOWN_EVENT_TYPE_ERROR)
    if provider is None or not provider.is_configured():
        log.warning(
            "operational email %s skipped: no email provider is configured; it will not be "
            "sent later",
            ref,
        )
        return _Decision("skipped", 0, error="skipped:unconfigured")
    mailbox = (settings.support_mailbox or "").strip()
    if not mailbox:
        log.warning(
            "operational email %s skipped: HERALD_SUPPORT_MAILBOX is not set; it will not be "
            "sent later",
            ref,
        )
        return _Decision("skipped", 0, error="skipped:no_support_mailbox")
    message = Message(
        channel="email",
        to=mailbox,
        title=row["subject"],
        body=row["body_text"],
        body_html=row["body_html"],
        # Stable across retries: a provider that deduplicates (Resend) sends a retried notice once.
        idempotency_key=f"operational-{row['public_id']}",
        kind=f"operational.{row['event_type']}",
        priority="high",
    )
    try:
        outcome = await provider.send(message)
    except Exception as exc:
        # A provider must not raise; one that does has a defect a retry would repeat.
        log.error("operational email %s: the provider raised %s", ref, type(exc).__name__)
        return _Decision("dead", 1, error=SEND_RAISED_ERROR)
    return _decide(settings, row, outcome, ref)


def _decide(
    settings: Settings, row: Mapping[str, Any], outcome: ProviderOutcome, ref: str
) -> _Decision:
    if outcome.outcome == "sent":
        return _Decision("sent", 1)
    if outcome.outcome == "skipped":
        reason = outcome.skip_reason or "unconfigured"
        if reason == "mock":
            log.info("operational email %s recorded by the mock email provider, not sent", ref)
        else:
            log.warning("operational email %s skipped (%s); it will not be sent later", ref, reason)
        return _Decision("skipped", 0, error=f"skipped:{reason}")
    error = _error_text(outcome)
    attempts = int(row["attempts"]) + 1
    if outcome.retryable and attempts < settings.operational_email_max_attempts:
        delay = backoff_seconds(
            attempts,
            base=settings.retry_base_seconds,
            ceiling=settings.retry_max_seconds,
            retry_after=outcome.retry_after_seconds,
        )
        log.warning(
            "operational email %s failed (%s), attempt %d of %d; retrying in %d s",
            ref,
            error,
            attempts,
            settings.operational_email_max_attempts,
            delay,
        )
        return _Decision("queued", 1, delay=delay, error=error)
    log.error("operational email %s failed (%s) on attempt %d; dead-lettered", ref, error, attempts)
    return _Decision("dead", 1, error=error)


def _error_text(outcome: ProviderOutcome) -> str:
    code = outcome.error_code or SEND_RAISED_ERROR
    detail = bounded_detail(outcome.detail)
    return f"{code} ({detail})" if detail else code
