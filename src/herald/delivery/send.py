"""The one channel-send routine for every remote channel (R-CHAN-2).

Order, the same for email, SMS, push, Telegram, Slack, Teams and WhatsApp (R-CHAN-3): claim (done
by the worker),
liveness, secret, render, address, send, record. Liveness comes before render, so a deleted
person's name is never rendered (R-CHAN-4); the secret is resolved immediately before rendering
and lives only in memory for this one send (R-SECRET-4).

`prepare()` runs liveness → address and returns either a Message to send or the skipped status
to record; the worker sends outside any transaction and hands the outcome to the recorder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from herald.channels.base import Message, TemplateCall
from herald.channels.email import mask_email
from herald.channels.slack import mask_slack_id
from herald.channels.sms import mask_phone, normalize_phone
from herald.channels.teams import webhook_host
from herald.config import Settings
from herald.kinds import Kind, Registry
from herald.observability import logs
from herald.rendering.render import Override, OverrideKey, Rendered, render
from herald.rendering.urls import safe_action_url_or_none
from herald.secrets import service as secrets
from herald.secrets.vault import Vault
from herald.values import value

GONE_STATUSES = frozenset({"suspended"})
# Values a vault secret may carry that redirect the send instead of filling a template (R-CHAN-6..8).
ADDRESS_OVERRIDES = ("toEmail", "toPhone")


@value
class Prepared:
    """One claimed delivery, ready to send (message set) or to record as skipped (skip set)."""

    context: Mapping[str, Any]
    message: Message | None = None
    skip: str | None = None
    destination_hint: str | None = None
    rendered: Rendered | None = None
    # False for kinds that carry secrets: their rendering (and its hash) is never stored (R-SECRET-5).
    persist: bool = False
    # The reference of the secret this delivery claimed: released once the outcome is recorded
    # final, kept for a retry otherwise. The values themselves live only in the message.
    secret_ref: str | None = field(default=None, repr=False)
    # Why a skip happened, when the status alone does not say (recorded as last_error).
    skip_reason: str | None = None


async def prepare(
    context: Mapping[str, Any],
    *,
    registry: Registry,
    vault: Vault,
    settings: Settings,
    overrides: Mapping[OverrideKey, Override],
) -> Prepared:
    channel = context["channel"]

    # Liveness: erased (user_id NULL), deleted or suspended since the fan-out (decision 5).
    if (
        context["person_id"] is None
        or context["person_deleted_at"] is not None
        or context["person_status"] in GONE_STATUSES
    ):
        return Prepared(context, skip="skipped_recipient_gone")

    if context.get("throttled"):
        return Prepared(context, skip="skipped_throttled")  # herald.throttle

    kind = registry.get(context["kind"])
    if kind is None or channel not in kind.channels:
        return Prepared(context, skip="skipped_no_template")

    # Secret: resolved now, kept in memory only for this send.
    event_variables: dict[str, str] = dict(context["event_variables"] or {})
    secret_values: dict[str, str] = {}
    ref = event_variables.pop("secretRef", None)
    if ref is not None:
        found = await secrets.resolve(
            vault, context["tenant_id"], ref, holder=str(context["public_id"])
        )
        if found is None:
            return Prepared(context, skip="skipped_no_destination")  # R-SECRET-11
        secret_values = found
        # Resolved secrets (a reset token, an OTP) are cut out of any line this send logs.
        logs.mark_sensitive(*found.values())

    # Render: the reference never reaches the template (R-SECRET-15); the recipient overlay and the
    # secret's values do.
    values = {**event_variables, **(context["recipient_variables"] or {}), **secret_values}
    rendered = render(kind, channel, context["locale"], values, overrides)
    if rendered is None:
        return Prepared(context, skip="skipped_no_template", secret_ref=ref)
    persist = kind.persist_rendered and not kind.secret_variables

    # Address.
    to, hint, platform = _address(context, secret_values, settings)
    if to is None:
        return Prepared(
            context,
            skip="skipped_no_destination",
            rendered=rendered,
            persist=persist,
            secret_ref=ref,
        )
    stored = (channel == "email" and to == context["email"]) or (
        channel in ("sms", "whatsapp") and not secret_values.get("toPhone")
    )
    if stored and context.get("address_undeliverable"):
        # A hard bounce marked the person's address or number (herald.receipts): skipped until
        # the host changes it. A vault override (a reset to another address) is not this one.
        return Prepared(
            context,
            skip="skipped_no_destination",
            skip_reason="ADDRESS_UNDELIVERABLE",
            rendered=rendered,
            persist=persist,
            secret_ref=ref,
        )
    message = Message(
        channel=channel,
        to=to,
        body=rendered.body,
        title=rendered.title,
        body_html=rendered.body_html,
        # Re-derived through the safety check at send time, never passed in (R-CHAN-15, R-RENDER-25).
        action_url=safe_action_url_or_none(context["action_url"]),
        platform=platform,
        push_keys=_push_keys(context) if platform == "webpush" else None,
        idempotency_key=str(context["public_id"]),
        kind=context["kind"],
        priority=context["priority"],
        template=_whatsapp_template(kind, context["locale"], values)
        if channel == "whatsapp"
        else None,
    )
    return Prepared(
        context,
        message=message,
        destination_hint=hint,
        rendered=rendered,
        persist=persist,
        secret_ref=ref,
    )


def _whatsapp_template(
    kind: Kind, locale: str | None, values: Mapping[str, str]
) -> TemplateCall | None:
    """The kind's approved WhatsApp template with its parameters' values in the template's
    order. The wording rendered above uses exactly these variables, so each has a value."""
    mapping = kind.whatsapp
    if mapping is None:
        return None
    return TemplateCall(
        name=mapping.name,
        language=mapping.language_for(locale),
        parameters=tuple(str(values.get(name, "")) for name in mapping.parameters),
    )


def _push_keys(context: Mapping[str, Any]) -> tuple[str, str] | None:
    """A browser subscription's (p256dh, auth), read with the device row at send time."""
    p256dh, auth = context.get("push_p256dh"), context.get("push_auth")
    return (p256dh, auth) if p256dh and auth else None


def _address(
    context: Mapping[str, Any], secret_values: Mapping[str, str], settings: Settings
) -> tuple[str | None, str | None, str | None]:
    """(destination, masked hint, platform) — destination None means nowhere to send."""
    channel = context["channel"]
    if channel == "email":
        # The override comes only from the vault, never from stored variables (R-CHAN-6, R-CHAN-7).
        address = secret_values.get("toEmail") or context["email"]
        return (address, mask_email(address), None) if address else (None, None, None)
    if channel in ("sms", "whatsapp"):
        # WhatsApp reaches the same number, normalised the same way (E.164).
        raw = secret_values.get("toPhone") or context["phone"]
        number = normalize_phone(raw, settings.sms_default_region) if raw else None
        # An unusable number is a skip, not a failure: retrying cannot change it (R-CHAN-9).
        return (number, mask_phone(number), None) if number else (None, None, None)
    if channel == "push":
        # The token row was re-read with the claim: it must still exist and be active (R-CHAN-12/13).
        if context["provider_target_id"] is None or not context["push_active"]:
            return None, None, None
        return context["push_token"], None, context["push_platform"]  # no hint for push (R-CHAN-18)
    if channel == "telegram":
        chat = context["telegram_chat_id"]
        if not chat or not context["telegram_can_write"]:
            return None, None, None
        return str(chat), f"telegram:…{str(chat)[-4:]}", None
    if channel == "slack":
        slack_id = context["slack_id"]
        if not slack_id or not context["slack_can_write"]:
            return None, None, None
        return str(slack_id), f"slack:{mask_slack_id(str(slack_id))}", None
    if channel == "teams":
        url = context["teams_webhook_url"]
        if not url or not context["teams_can_write"]:
            return None, None, None
        # The URL is a credential: the hint names its host only.
        return str(url), f"teams:{webhook_host(str(url)) or '?'}", None
    return None, None, None
