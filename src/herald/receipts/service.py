"""Delivery receipts (issue 16): providers tell Herald what became of a message it sent.

POST /v1/providers/whatsapp/webhook — Meta's WhatsApp webhook, signed with X-Hub-Signature-256
(HMAC-SHA256 of the raw body keyed by HERALD_WHATSAPP_APP_SECRET, compared in constant time); its
GET answers Meta's subscription handshake with HERALD_WHATSAPP_VERIFY_TOKEN.
POST /v1/providers/resend/events — Resend's webhook, signed by Svix; verified with the `svix`
package against HERALD_RESEND_WEBHOOK_SECRET. POST /v1/providers/twilio/status — Twilio's status
callback, signed with X-Twilio-Signature (HMAC-SHA1 of the URL Twilio called and the sorted form
parameters, keyed by the account's auth token; checked here by hand: the `twilio` package would
bring its whole REST client and an HTTP stack for the one RequestValidator, and the algorithm is
Twilio's documented one, compared in constant time).

A verified receipt moves the delivery it names (by provider message id and channel; an id that
matches more than one row changes nothing; one that matches none changes nothing, except a
Twilio receipt, which is kept — see below) from `sent` to `delivered`, or to the final
`bounced` with the provider's code. The move is a compare-and-set on `sent`, so a duplicate, an
out-of-order or a late receipt changes nothing. A hard bounce — a permanent email bounce, or an
SMS error that says the number cannot take SMS (TWILIO_PERMANENT_ERRORS) — also marks the
recipient's address on that channel undeliverable (undeliverable_address, a hash only): later
messages to it are skipped_no_destination with ADDRESS_UNDELIVERABLE until the host changes it. The
webhook delivery.delivered / delivery.bounced is written in the same transaction.
An unsigned or forged callback is 401 and changes nothing.

Issue 44: Twilio may post the callback while the recorder is still writing the SID, and posts it
once. A Twilio receipt whose SID no delivery carries yet is kept (pending_receipt, 202 "pending")
and applied by apply_parked in the recorder's transaction that stores the SID, then deleted. Both
sides take an advisory lock on the SID (queries.lock_message_ids) — the route before it looks for
the delivery, the recorder after writing it and before reading the kept rows — so a callback
racing the recorder's commit is either kept before the recorder looks or sees the committed
delivery. Resend's receipts are not kept: its webhook carries every email of the Resend account,
and Svix retries the 409 PROVIDER_RECEIPT_EARLY.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from sqlalchemy.ext.asyncio import AsyncConnection
from svix.webhooks import Webhook as SvixWebhook
from svix.webhooks import WebhookVerificationError

from herald import vocabulary
from herald.channels.base import bounded_detail
from herald.config import Settings
from herald.db import tenancy
from herald.errors import Conflict, Forbidden, NotFound, Unauthenticated, ValidationFailed
from herald.receipts import queries
from herald.webhooks import service as webhooks

log = logging.getLogger(__name__)

MAX_PROVIDER_ID = 200


class ReceiptSignatureInvalid(Unauthenticated):
    """The provider callback is unsigned or its signature does not verify."""

    code = "PROVIDER_SIGNATURE_INVALID"


class WebhookVerifyTokenInvalid(Forbidden):
    """The webhook subscription handshake did not present this deployment's verify token."""

    code = "PROVIDER_VERIFY_TOKEN_INVALID"


class ReceiptsNotConfigured(NotFound):
    """This provider's delivery receipts are not configured."""

    code = "PROVIDER_RECEIPTS_NOT_CONFIGURED"


class ReceiptTooEarly(Conflict):
    """The delivery's send is still being recorded; send the receipt again later."""

    code = "PROVIDER_RECEIPT_EARLY"


class ReceiptMalformed(ValidationFailed):
    """The provider callback is not in the provider's format."""

    code = "PROVIDER_CALLBACK_MALFORMED"


@dataclass(frozen=True)
class Receipt:
    channel: str
    provider_message_id: str
    # "delivered" or "bounced"; None: a status Herald does not act on (opened, queued, …).
    status: str | None
    code: str | None = None
    hard: bool = False
    # Who sent it, and its own word for the status (kept with a receipt that is parked).
    provider: str = ""
    provider_status: str = ""


@dataclass(frozen=True)
class Applied:
    # "delivered", "bounced", "pending" (kept until its send is recorded) or "ignored" (unknown,
    # duplicate, out of order, not acted on).
    result: str


# ---------------------------------------------------------------------------------------------
# Resend (Svix-signed JSON)


def verify_resend(settings: Settings, body: bytes, headers: Mapping[str, str]) -> Receipt:
    if not settings.resend_webhook_secret:
        raise ReceiptsNotConfigured()
    try:
        SvixWebhook(settings.resend_webhook_secret).verify(body, dict(headers))
    except WebhookVerificationError:
        raise ReceiptSignatureInvalid() from None
    return parse_resend(body)


def parse_resend(body: bytes) -> Receipt:
    try:
        event = json.loads(body)
        kind = event["type"]
        data = event["data"]
        email_id = data["email_id"]
    except (ValueError, KeyError, TypeError):
        raise ReceiptMalformed() from None
    if not isinstance(kind, str) or not isinstance(email_id, str) or not email_id:
        raise ReceiptMalformed()
    email_id = email_id[:MAX_PROVIDER_ID]
    if kind == "email.delivered":
        return Receipt("email", email_id, "delivered")
    if kind == "email.bounced":
        bounce = data.get("bounce") if isinstance(data.get("bounce"), dict) else {}
        bounce_type = str(bounce.get("type") or "Permanent")
        if bounce_type.lower() == "transient":
            return Receipt("email", email_id, None)  # a soft bounce: the provider retries
        detail = bounded_detail(str(bounce.get("subType") or "")) if bounce else None
        code = f"EMAIL_BOUNCED ({detail})" if detail else "EMAIL_BOUNCED"
        return Receipt("email", email_id, "bounced", code, hard=True)
    return Receipt("email", email_id, None)


# ---------------------------------------------------------------------------------------------
# Twilio (form-encoded, X-Twilio-Signature)


def twilio_signature(auth_token: str, url: str, params: Sequence[tuple[str, str]]) -> str:
    """Twilio's documented scheme: base64(HMAC-SHA1(token, url + each key+value, sorted by key
    then value))."""
    payload = url + "".join(k + v for k, v in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode()


def _url_variants(url: str) -> list[str]:
    """The URL as given, without its port and with the scheme's default port: Twilio signs the
    URL as it was configured, which a proxy may have changed either way."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    default = 443 if parts.scheme == "https" else 80
    bare = urlunsplit(parts._replace(netloc=host))
    ported = urlunsplit(parts._replace(netloc=f"{host}:{parts.port or default}"))
    return list(dict.fromkeys([url, bare, ported]))


def verify_twilio(
    settings: Settings, url: str, params: Sequence[tuple[str, str]], signature: str | None
) -> Receipt:
    if not settings.twilio_auth_token:
        raise ReceiptsNotConfigured()
    if not signature:
        raise ReceiptSignatureInvalid()
    url = settings.twilio_status_callback_url or url
    if not any(
        hmac.compare_digest(
            twilio_signature(settings.twilio_auth_token, variant, params).encode(),
            signature.encode(),
        )
        for variant in _url_variants(url)
    ):
        raise ReceiptSignatureInvalid()
    return parse_twilio(params)


# Twilio's error codes that say the number itself cannot take SMS from this sender, so sending
# again is pointless until the host changes it (issue 44): 30003 unreachable destination handset,
# 30005 unknown, inactive or no longer in service, 30006 a landline or an unreachable carrier
# (Twilio: "do not retry the same SMS to that destination"); 21610 the person opted out (STOP).
# 30003 can also be a handset that is off for days; it marks the number like the others, and the
# mark clears when the host records a new number. Queue overflow (30001), the filtering codes
# and unknown errors (30008) bounce this message only.
TWILIO_PERMANENT_ERRORS = frozenset({"30003", "30005", "30006", "21610"})


def parse_twilio(params: Sequence[tuple[str, str]]) -> Receipt:
    form = dict(params)
    sid, status = form.get("MessageSid"), form.get("MessageStatus")
    if not sid or not status:
        raise ReceiptMalformed()
    sid = sid[:MAX_PROVIDER_ID]
    if status == "delivered":
        return Receipt("sms", sid, "delivered", provider="twilio", provider_status=status)
    if status in ("undelivered", "failed"):
        error = form.get("ErrorCode", "")
        error = error if error.isascii() and error.isdigit() and len(error) <= 6 else ""
        code = f"SMS_UNDELIVERED (twilio_{error})" if error else "SMS_UNDELIVERED"
        return Receipt(
            "sms",
            sid,
            "bounced",
            code,
            hard=error in TWILIO_PERMANENT_ERRORS,
            provider="twilio",
            provider_status=status,
        )
    return Receipt("sms", sid, None, provider="twilio")


# ---------------------------------------------------------------------------------------------
# WhatsApp (Meta's webhook: JSON signed with X-Hub-Signature-256)


def whatsapp_signature(app_secret: str, body: bytes) -> str:
    """Meta's scheme: `sha256=` and the hex HMAC-SHA256 of the raw body, keyed by the app
    secret."""
    return "sha256=" + hmac.new(app_secret.encode(), body, hashlib.sha256).hexdigest()


def verify_whatsapp(settings: Settings, body: bytes, signature: str | None) -> list[Receipt]:
    """The receipts of one webhook POST, once its signature verifies (compared in constant time
    over the raw body); a forged or unsigned one is refused before anything is read."""
    secret = settings.whatsapp_app_secret
    if not secret:
        raise ReceiptsNotConfigured()
    given = (signature or "").strip()
    if not given.startswith("sha256="):
        raise ReceiptSignatureInvalid()
    expected = whatsapp_signature(secret, body)
    if not hmac.compare_digest(expected.encode(), given.lower().encode()):
        raise ReceiptSignatureInvalid()
    return parse_whatsapp(body)


def verify_whatsapp_subscription(
    settings: Settings, mode: str | None, token: str | None, challenge: str | None
) -> str:
    """Meta's subscription handshake (GET with hub.mode=subscribe, hub.verify_token,
    hub.challenge): the challenge, echoed, when the verify token is this deployment's."""
    expected = settings.whatsapp_verify_token
    if not expected:
        raise ReceiptsNotConfigured()
    if mode != "subscribe" or not challenge:
        raise ReceiptMalformed()
    if not token or not hmac.compare_digest(token.encode(), expected.encode()):
        raise WebhookVerifyTokenInvalid()
    if len(challenge) > MAX_PROVIDER_ID or not challenge.isascii() or not challenge.isprintable():
        raise ReceiptMalformed()
    return challenge


# WhatsApp's failed-status codes that say the number cannot take WhatsApp messages: 131026
# (not on WhatsApp, an old app, or the terms not accepted). Marked for WhatsApp only: SMS may
# still reach it. Every other failure (131049 Meta chose not to deliver, 131047, 131053, …)
# bounces this message only.
WHATSAPP_PERMANENT_ERRORS = frozenset({131026})
_WHATSAPP_STATUSES = frozenset({"sent", "delivered", "read", "failed", "deleted", "warning"})


def parse_whatsapp(body: bytes) -> list[Receipt]:
    """Every status in the POST (Meta batches them), in order. `sent` is what the recorder
    already wrote; `delivered` and `read` move the delivery to delivered (a `read` after
    `delivered` finds it final and changes nothing); `failed` bounces it with WhatsApp's code.
    Incoming messages and other fields carry no receipt and are skipped."""
    try:
        event = json.loads(body)
        entries = event["entry"]
    except (ValueError, KeyError, TypeError):
        raise ReceiptMalformed() from None
    if not isinstance(entries, list):
        raise ReceiptMalformed()
    receipts: list[Receipt] = []
    for entry in entries:
        changes = entry.get("changes") if isinstance(entry, dict) else None
        for change in changes if isinstance(changes, list) else []:
            value = change.get("value") if isinstance(change, dict) else None
            statuses = value.get("statuses") if isinstance(value, dict) else None
            for status in statuses if isinstance(statuses, list) else []:
                receipt = _whatsapp_status(status)
                if receipt is not None:
                    receipts.append(receipt)
    return receipts


def _whatsapp_status(status: Any) -> Receipt | None:
    if not isinstance(status, dict):
        raise ReceiptMalformed()
    message_id, word = status.get("id"), status.get("status")
    if not isinstance(message_id, str) or not message_id or not isinstance(word, str):
        raise ReceiptMalformed()
    message_id = message_id[:MAX_PROVIDER_ID]
    word = word if word in _WHATSAPP_STATUSES else "other"
    if word in ("delivered", "read"):
        return Receipt(
            "whatsapp", message_id, "delivered", provider="whatsapp", provider_status=word
        )
    if word == "failed":
        code = None
        errors = status.get("errors")
        if isinstance(errors, list) and errors and isinstance(errors[0], dict):
            raw = errors[0].get("code")
            code = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
            code = code if code is not None and 0 < code < 10_000_000 else None
        return Receipt(
            "whatsapp",
            message_id,
            "bounced",
            f"WHATSAPP_UNDELIVERED (whatsapp_{code})" if code else "WHATSAPP_UNDELIVERED",
            hard=code in WHATSAPP_PERMANENT_ERRORS,
            provider="whatsapp",
            provider_status=word,
        )
    return Receipt("whatsapp", message_id, None, provider="whatsapp", provider_status=word)


# ---------------------------------------------------------------------------------------------
# Applying a verified receipt


def parks(receipt: Receipt) -> bool:
    """Whether a receipt naming no delivery yet is kept for its send's recording (Twilio's: it
    calls back once, and only for the messages Herald sent with its StatusCallback)."""
    return (
        receipt.status is not None
        and receipt.provider in vocabulary.PARKED_RECEIPT_PROVIDERS
        and receipt.channel in vocabulary.PARKED_RECEIPT_CHANNELS
    )


async def apply(conn: AsyncConnection, receipt: Receipt) -> Applied:
    """Move the delivery the receipt names, in the caller's (all-tenant) transaction; the move,
    the undeliverable mark and the webhook message commit together. A parking provider's receipt
    that names no delivery yet is kept (pending_receipt) for the recorder to apply."""
    if receipt.status is None:
        return Applied("ignored")
    if parks(receipt):
        # Taken before looking: a recorder writing this id holds it until its commit, so either
        # the delivery is seen below, or the recorder (after this commits) sees the kept row.
        await queries.lock_message_ids(conn, receipt.channel, [receipt.provider_message_id])
    found = await queries.find_by_provider_message_id(
        conn, receipt.channel, receipt.provider_message_id
    )
    if not found and parks(receipt):
        await queries.park_receipt(
            conn,
            provider=receipt.provider,
            channel=receipt.channel,
            provider_message_id=receipt.provider_message_id,
            status=str(receipt.status),
            code=receipt.code,
            hard=receipt.hard,
            provider_status=receipt.provider_status,
        )
        log.info("a %s receipt came before its send was recorded: kept", receipt.provider)
        return Applied("pending")
    if len(found) != 1:
        return Applied("ignored")
    [(delivery_id, tenant_id)] = found
    await tenancy.enter_tenant(conn, tenant_id)
    moved = await queries.apply_receipt(conn, delivery_id, receipt.status, receipt.code)
    if moved is None:
        if await queries.delivery_status(conn, delivery_id) == "processing":
            # A fast provider beat the recorder (the call returned, its outcome is not written
            # yet): a 409 makes a retrying sender (Svix) bring it back instead of losing it.
            raise ReceiptTooEarly()
        return Applied("ignored")
    await _after_move(conn, tenant_id, delivery_id, moved, receipt)
    return Applied(receipt.status)


async def _after_move(
    conn: AsyncConnection,
    tenant_id: str,
    delivery_id: int,
    moved: Mapping[str, Any],
    receipt: Receipt,
) -> None:
    """What a receipt that moved its delivery also does: mark a hard-bounced address, tell the
    application's webhooks."""
    if receipt.hard:
        await queries.mark_undeliverable(
            conn,
            receipt.channel,
            moved["recipient_id"],
            receipt.code or f"{receipt.channel.upper()}_BOUNCED",
            moved["public_id"],
        )
    await webhooks.emit_for_deliveries(conn, tenant_id, [delivery_id])
    log.info("delivery %s: %s by the provider's receipt", moved["public_id"], receipt.status)


async def apply_parked(
    conn: AsyncConnection, tenant_id: str, channel: str, sent: Mapping[str, int]
) -> int:
    """In the recorder's transaction, under `tenant_id`, right after it stored these message ids
    (`sent`: message id → delivery id, all now `sent`): apply the receipts kept for them, oldest
    first, and delete them, so each is applied exactly once. Returns how many were applied."""
    if channel not in vocabulary.PARKED_RECEIPT_CHANNELS or not sent:
        return 0
    ids = sorted(sent)
    await queries.lock_message_ids(conn, channel, ids)
    applied = 0
    for row in await queries.take_parked_receipts(conn, channel, ids):
        delivery_id = sent.get(str(row["provider_message_id"]))
        if delivery_id is None:
            continue
        receipt = Receipt(
            channel, row["provider_message_id"], row["status"], row["code"], hard=row["hard"]
        )
        # The same compare-and-set on `sent` as a live receipt: a second kept receipt for the
        # same message (delivered, then a late failure) finds it final and changes nothing.
        moved = await queries.apply_receipt(conn, delivery_id, row["status"], row["code"])
        if moved is not None:
            await _after_move(conn, tenant_id, delivery_id, moved, receipt)
            applied += 1
    return applied


async def mark_refused_destination(
    conn: AsyncConnection, channel: str, person_id: int, reason: str, delivery_public_id: str
) -> None:
    """The recorder's side effect of a send the provider refused because the person's address or
    number can never take a message (ProviderOutcome.destination_undeliverable): the same mark a
    hard-bounce receipt leaves, under the delivery's tenant, in the recorder's transaction."""
    if channel in vocabulary.UNDELIVERABLE_CHANNELS:
        await queries.mark_person_undeliverable(
            conn, channel, person_id, reason, uuid.UUID(delivery_public_id)
        )


def form_params(body: bytes) -> list[tuple[str, str]]:
    try:
        return parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
    except (UnicodeDecodeError, ValueError):
        raise ReceiptMalformed() from None


def headers_of(raw: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in raw.items()}
