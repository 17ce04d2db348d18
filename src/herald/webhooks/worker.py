"""The webhook sender: claim due messages, sign, post, record — the delivery worker's shape.

The claim commits first; the posts run with no connection held; the outcomes are written in a new
transaction, each conditional on the claim it was sent under. A batch is small enough that its
posts, each bounded by webhook_timeout_seconds from DNS to response, finish well inside one lease,
so no heartbeat is needed; a sender that dies mid-batch leaves leases that pass, and the next
iteration's reclaim queues those messages again (at-least-once: the `webhook-id` lets the host
drop the second copy).

Every attempt is signed afresh (its `webhook-timestamp` is the attempt's, so a receiver's
five-minute tolerance accepts a retry sent hours later) with the endpoint's current secret.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from cryptography.fernet import InvalidToken
from sqlalchemy.ext.asyncio import AsyncEngine
from standardwebhooks import Webhook

from herald.channels import destination
from herald.config import Settings
from herald.db import tenancy
from herald.delivery.backoff import backoff_seconds
from herald.observability import metrics
from herald.webhooks import queries, service

log = logging.getLogger(__name__)

BATCH_LIMIT = 16
CONCURRENCY = 8
RECLAIM_LIMIT = 500
USER_AGENT = "Herald-Webhooks/1"


@dataclass(frozen=True)
class Outcome:
    context: dict[str, Any]
    sent: bool
    error: str | None = None
    permanent: bool = False
    response_status: int | None = None
    retry_after: int | None = None


def build_client(settings: Settings) -> httpx.AsyncClient:
    # No redirects: a 3xx is a failure, never a hop to an address nobody checked.
    return httpx.AsyncClient(
        follow_redirects=False,
        timeout=httpx.Timeout(settings.webhook_timeout_seconds),
        headers={"user-agent": USER_AGENT},
    )


def body_of(payload: dict[str, Any]) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def signed_headers(secret: str, message_id: str, body: str, now: datetime) -> dict[str, str]:
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, now, body),
        "content-type": "application/json",
    }


async def post_one(
    client: httpx.AsyncClient, settings: Settings, context: dict[str, Any]
) -> Outcome:
    """One attempt, sorted into sent, retry or permanent failure; never raises."""
    try:
        secret = service.decrypt_secret(settings, context["secret_ciphertext"])
    except InvalidToken:
        # Encrypted under another vault key: no attempt can sign it. Rotate, then replay.
        return Outcome(context, False, "WEBHOOK_SECRET_UNREADABLE", permanent=True)
    body = body_of(context["payload"])
    try:
        async with asyncio.timeout(settings.webhook_timeout_seconds):
            target = await destination.resolve(context["url"], settings)
            headers = signed_headers(secret, str(context["public_id"]), body, datetime.now(UTC))
            headers["host"] = target.host_header()
            extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
            response = await client.post(
                target.request_url(),
                content=body.encode(),
                headers=headers,
                extensions=extensions,
            )
    except (destination.WebhookUrlForbidden, destination.WebhookUrlInvalid):
        return Outcome(context, False, "WEBHOOK_DESTINATION_FORBIDDEN", permanent=True)
    except destination.WebhookUrlUnresolvable:
        return Outcome(context, False, "WEBHOOK_DNS_FAILED")
    except TimeoutError:
        return Outcome(context, False, "WEBHOOK_TIMEOUT")
    except httpx.HTTPError as exc:
        return Outcome(context, False, f"WEBHOOK_TRANSPORT ({type(exc).__name__})")
    if 200 <= response.status_code < 300:
        return Outcome(context, True, response_status=response.status_code)
    return Outcome(
        context,
        False,
        f"WEBHOOK_HTTP_{response.status_code}",
        response_status=response.status_code,
        retry_after=_retry_after(response),
    )


def _retry_after(response: httpx.Response) -> int | None:
    raw = response.headers.get("retry-after")
    if raw is None or not raw.strip().isdigit():
        return None
    return int(raw.strip())


# herald_webhook_messages_total's outcome for each status a post's outcome writes.
OUTCOME_LABELS = {"sent": "sent", "queued": "retry", "dead": "dead"}


def plan(outcomes: Sequence[Outcome], settings: Settings) -> queries.MessageOutcomes:
    rows = queries.MessageOutcomes()
    for outcome in outcomes:
        ctx = outcome.context
        delay: int | None = None
        if outcome.sent:
            status = "sent"
        elif outcome.permanent or ctx["attempts"] >= settings.webhook_max_attempts:
            status = "dead"
        else:
            status = "queued"
            delay = backoff_seconds(
                ctx["attempts"],
                base=settings.retry_base_seconds,
                ceiling=settings.webhook_retry_max_seconds,
                retry_after=outcome.retry_after,
            )
        rows.ids.append(ctx["id"])
        rows.claimed_ats.append(ctx["claimed_at"])
        rows.statuses.append(status)
        rows.delays.append(delay)
        rows.errors.append(outcome.error)
        rows.response_statuses.append(outcome.response_status)
    return rows


async def send_batch(
    engine: AsyncEngine,
    settings: Settings,
    client: httpx.AsyncClient,
    *,
    limit: int = BATCH_LIMIT,
    tenant_id: str | None = None,
) -> int:
    """Reclaim expired leases, claim up to `limit` due messages and see each to a recorded
    outcome; how many were claimed (0: nothing was due)."""
    contexts: list[dict[str, Any]] = []
    async with engine.begin() as conn:
        reclaimed = await queries.reclaim_expired_messages(
            conn, settings.webhook_max_attempts, RECLAIM_LIMIT
        )
        claimed = await queries.claim_due_messages(conn, limit, settings.lease_seconds, tenant_id)
        for tenant, ids in _by_tenant(claimed).items():
            await tenancy.enter_tenant(conn, tenant)
            contexts.extend(await queries.load_message_contexts(conn, ids))
    for status in reclaimed:  # a sender died holding them: tried again, or out of attempts
        metrics.WEBHOOK_MESSAGES.labels(OUTCOME_LABELS[status]).inc()
    if not claimed:
        return 0
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(context: dict[str, Any]) -> Outcome:
        async with gate:
            return await post_one(client, settings, context)

    outcomes = await asyncio.gather(*(one(c) for c in contexts))
    rows = plan(outcomes, settings)
    async with engine.begin() as conn:
        written: set[int] = set()
        for tenant, indexes in _indexes_by_tenant(outcomes).items():
            await tenancy.enter_tenant(conn, tenant)
            written |= await queries.record_message_outcomes(conn, rows.subset(indexes))
    for outcome in outcomes:
        log.log(
            logging.INFO if outcome.sent else logging.WARNING,
            "webhook %s (%s): %s",
            outcome.context["public_id"],
            outcome.context["event_type"],
            "sent" if outcome.sent else outcome.error,
        )
    for index, status in enumerate(rows.statuses):
        if rows.ids[index] in written:
            metrics.WEBHOOK_MESSAGES.labels(OUTCOME_LABELS[status]).inc()
    lost = len(outcomes) - len(written)
    if lost:
        log.warning("%d webhook outcome(s) arrived after their lease was reclaimed", lost)
    return len(contexts)


async def drain(
    engine: AsyncEngine,
    settings: Settings,
    client: httpx.AsyncClient,
    *,
    tenant_id: str | None = None,
) -> int:
    """Send until nothing is due; how many messages were claimed."""
    total = 0
    while claimed := await send_batch(engine, settings, client, tenant_id=tenant_id):
        total += claimed
    return total


def _by_tenant(claimed: Sequence[tuple[int, str]]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for message_id, tenant in claimed:
        grouped.setdefault(tenant, []).append(message_id)
    return grouped


def _indexes_by_tenant(outcomes: Sequence[Outcome]) -> dict[str, list[int]]:
    grouped: dict[str, list[int]] = {}
    for index, outcome in enumerate(outcomes):
        grouped.setdefault(outcome.context["tenant_id"], []).append(index)
    return grouped
