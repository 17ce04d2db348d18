"""Outbound webhooks to the host application (issue 16).

Endpoints (`/v1/admin/webhooks`, permissions NotificationWebhook_CREATE|READ|UPDATE|DELETE): a
URL checked against SSRF (herald.channels.destination), the event types it wants, and a signing
secret in the Standard Webhooks format (`whsec_…`) shown once. The secret must stay readable to
sign, so it is stored encrypted with the vault key (HERALD_VAULT_KEY or the key file under the
data dir: a key that never lives in the database; HERALD_VAULT_OLD_KEYS still decrypt during a
rotation), not hashed.

Messages are written by `emit` in the transaction of the state change they report (the
transactional outbox): a rolled-back change tells the host nothing, a committed one always
reaches it. The sender (herald.webhooks.worker) claims them with a lease, signs, posts, and
retries with backoff; after webhook_max_attempts a message is dead with a dead letter that the
admin dead-letter screen replays. Payloads carry ids and statuses, never content or addresses.
"""

from __future__ import annotations

import base64
import secrets as random
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from cryptography.fernet import MultiFernet
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.audit.service import field_changes, record_audit
from herald.auth.service import Operator
from herald.channels import destination
from herald.config import Settings
from herald.errors import Conflict, NotFound
from herald.secrets.vault import key_ring
from herald.webhooks import queries
from herald.webhooks.schemas import (
    WebhookEndpoint,
    WebhookEndpointCreated,
    WebhookEndpointIn,
    WebhookEndpointList,
    WebhookEndpointPatch,
    WebhookSecret,
    WebhookTestQueued,
)

READ = "NotificationWebhook_READ"
CREATE = "NotificationWebhook_CREATE"
UPDATE = "NotificationWebhook_UPDATE"
DELETE = "NotificationWebhook_DELETE"
ENTITY = "webhook_endpoint"
AUDITED_FIELDS = ("url", "event_types", "description", "enabled")
# Each endpoint multiplies every emitted event by one message; a small cap keeps that bounded.
MAX_ENDPOINTS = 20
SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32
QUEUE_NAME = "webhook"
JOB_NAME = "webhook_send"


class WebhookEndpointNotFound(NotFound):
    """No such webhook endpoint."""

    code = "WEBHOOK_ENDPOINT_NOT_FOUND"


class WebhookEndpointLimit(Conflict):
    """The tenant already has the most webhook endpoints allowed."""

    code = "WEBHOOK_ENDPOINT_LIMIT"


class WebhookMessageNotReplayable(Conflict):
    """The webhook message this dead letter names is gone or no longer dead."""

    code = "WEBHOOK_MESSAGE_NOT_REPLAYABLE"


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(random.token_bytes(SECRET_BYTES)).decode()


def _fernet(settings: Settings) -> MultiFernet:
    # The key ring: a secret written under an old key still signs while a rotation runs.
    return key_ring(settings)


def encrypt_secret(settings: Settings, secret: str) -> bytes:
    return _fernet(settings).encrypt(secret.encode())


def decrypt_secret(settings: Settings, ciphertext: bytes) -> str:
    return _fernet(settings).decrypt(bytes(ciphertext)).decode()


def _out(row: Mapping[str, Any]) -> WebhookEndpoint:
    return WebhookEndpoint(
        id=row["public_id"],
        url=row["url"],
        event_types=list(row["event_types"]),
        description=row["description"],
        enabled=row["enabled"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _snapshot(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in AUDITED_FIELDS}


def _require(operator: Operator, permission: str) -> None:
    """404 for a caller without the permission, the same answer as for a missing endpoint."""
    if not operator.may(permission):
        raise WebhookEndpointNotFound()


async def _find(conn: AsyncConnection, operator: Operator, endpoint_id: str) -> dict[str, Any]:
    try:
        public_id = uuid.UUID(endpoint_id)
    except ValueError:
        raise WebhookEndpointNotFound() from None
    row = await queries.lock_endpoint(conn, operator.tenant_id, public_id)
    if row is None:
        raise WebhookEndpointNotFound()
    return row


def _event_types(values: list[str]) -> list[str]:
    # Catalogue order, once each, whatever order the caller sent.
    return [t for t in vocabulary.WEBHOOK_EVENT_TYPES if t in set(values)]


async def create_endpoint(
    conn: AsyncConnection, operator: Operator, settings: Settings, data: WebhookEndpointIn
) -> WebhookEndpointCreated:
    _require(operator, CREATE)
    await destination.resolve(data.url, settings)
    if await queries.count_endpoints(conn, operator.tenant_id) >= MAX_ENDPOINTS:
        raise WebhookEndpointLimit(f"at most {MAX_ENDPOINTS} webhook endpoints per tenant")
    secret = new_secret()
    row = await queries.insert_endpoint(
        conn,
        operator.tenant_id,
        {
            "url": data.url,
            "event_types": _event_types(list(data.event_types)),
            "description": data.description,
            "enabled": data.enabled,
            "secret_ciphertext": encrypt_secret(settings, secret),
        },
    )
    await record_audit(conn, operator, "create", ENTITY, str(row["public_id"]), _snapshot(row))
    return WebhookEndpointCreated(**_out(row).model_dump(), secret=secret)


async def list_endpoints(conn: AsyncConnection, operator: Operator) -> WebhookEndpointList:
    if not operator.may(READ):
        return WebhookEndpointList(items=[])
    return WebhookEndpointList(
        items=[_out(row) for row in await queries.list_endpoints(conn, operator.tenant_id)]
    )


async def get_endpoint(
    conn: AsyncConnection, operator: Operator, endpoint_id: str
) -> WebhookEndpoint:
    _require(operator, READ)
    return _out(await _find(conn, operator, endpoint_id))


async def update_endpoint(
    conn: AsyncConnection,
    operator: Operator,
    settings: Settings,
    endpoint_id: str,
    data: WebhookEndpointPatch,
) -> WebhookEndpoint:
    _require(operator, UPDATE)
    before = await _find(conn, operator, endpoint_id)
    values: dict[str, Any] = {}
    if data.url is not None:
        await destination.resolve(data.url, settings)
        values["url"] = data.url
    if data.event_types is not None:
        values["event_types"] = _event_types(list(data.event_types))
    if "description" in data.model_fields_set:
        values["description"] = data.description
    if data.enabled is not None:
        values["enabled"] = data.enabled
    if not values:
        return _out(before)
    after = await queries.update_endpoint(conn, before["id"], values)
    changes = field_changes(before, after, AUDITED_FIELDS)
    if changes:
        await record_audit(conn, operator, "update", ENTITY, str(after["public_id"]), changes)
    return _out(after)


async def delete_endpoint(conn: AsyncConnection, operator: Operator, endpoint_id: str) -> None:
    """Delete the endpoint and every message still waiting for it (nothing would send them)."""
    _require(operator, DELETE)
    row = await _find(conn, operator, endpoint_id)
    await queries.delete_endpoint(conn, row["id"])
    await record_audit(conn, operator, "delete", ENTITY, str(row["public_id"]), _snapshot(row))


async def rotate_secret(
    conn: AsyncConnection, operator: Operator, settings: Settings, endpoint_id: str
) -> WebhookSecret:
    """A new signing secret, shown once. Messages sent from now on, retries included, are signed
    with it; the audit records that it changed, never its value."""
    _require(operator, UPDATE)
    row = await _find(conn, operator, endpoint_id)
    secret = new_secret()
    await queries.update_endpoint(
        conn, row["id"], {"secret_ciphertext": encrypt_secret(settings, secret)}
    )
    await record_audit(
        conn,
        operator,
        "update",
        ENTITY,
        str(row["public_id"]),
        {"secret": {"before": "(rotated)", "after": "(rotated)"}},
    )
    return WebhookSecret(secret=secret)


async def send_test(
    conn: AsyncConnection, operator: Operator, endpoint_id: str
) -> WebhookTestQueued:
    """Queue a `webhook.test` message to this endpoint alone, through the same sender as every
    other message (signed, retried, dead-lettered)."""
    _require(operator, UPDATE)
    row = await _find(conn, operator, endpoint_id)
    message_id = await queries.insert_test_message(
        conn,
        operator.tenant_id,
        row["id"],
        {
            "type": vocabulary.WEBHOOK_TEST_EVENT,
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "data": {"endpointId": str(row["public_id"])},
        },
    )
    return WebhookTestQueued(message_id=message_id)


async def emit(
    conn: AsyncConnection, tenant_id: str, event_type: str, data: Mapping[str, Any]
) -> int:
    """Write `event_type` for every endpoint of the tenant subscribed to it, in the caller's
    transaction; how many messages were written (0, in one cheap statement, without endpoints).
    `data` must hold ids and statuses only."""
    if event_type not in vocabulary.WEBHOOK_EVENT_TYPES:
        raise ValueError(f"unknown webhook event type {event_type!r}")
    return await queries.emit(conn, tenant_id, event_type, data)


async def emit_for_deliveries(conn: AsyncConnection, tenant_id: str, ids: list[int]) -> int:
    """delivery.<status> for each delivery (by internal id) at its current status."""
    return await queries.emit_for_deliveries(conn, tenant_id, ids)


async def replay_message(
    conn: AsyncConnection, tenant_id: str, payload_ref: Mapping[str, Any]
) -> uuid.UUID:
    """Queue a dead webhook message again, under the same id, with a fresh attempt budget."""
    try:
        public_id = uuid.UUID(str(payload_ref["webhookMessagePublicId"]))
    except (KeyError, TypeError, ValueError):
        raise WebhookMessageNotReplayable("the dead letter's reference names no message") from None
    replayed = await queries.requeue_dead_message(conn, tenant_id, public_id)
    if replayed is None:
        raise WebhookMessageNotReplayable()
    return replayed
