"""A tenant's own provider accounts (issue 46): what each provider lets a tenant override.

A school district runs one Herald for many schools, and each school sends from its own address,
SMS sender and bot. A tenant's account for a provider is a small set of fields, each one
HERALD_* setting of the deployment; the tenant's provider is built from the deployment's
Settings with those fields laid over them (`overlay`). Nothing else is per tenant: base URLs,
timeouts, the failover list and circuit settings stay the deployment's, so a tenant can never
point Herald's HTTP providers at a host of its choosing (SSRF). The SMTP host is the one host a
tenant names; herald.admin.providers checks it against the same address rules as webhook URLs.

Secret fields (passwords, API keys, tokens) are write-only: kept encrypted with the vault key
(herald.secrets.vault.key_ring) in `secret_ciphertext`, never answered back (only whether each
is set), never logged.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from cryptography.fernet import MultiFernet
from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic.alias_generators import to_camel

from herald.config import Settings

# A host name (RFC 1123 labels) or an IPv4 literal; IPv6 literals in brackets are not needed
# by any SMTP relay a school uses and are refused rather than half-parsed.
_HOST = re.compile(
    r"^(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$"
)
# An address as an SMTP From header may carry it: `Name <a@b.c>` or `a@b.c`, one line.
_FROM = re.compile(r"^[^\r\n<>]{0,200}<[^\s@<>]+@[^\s@<>]+>$|^[^\s@<>]+@[^\s@<>]+$")
# E.164 or an alphanumeric sender id (Twilio accepts both as From).
_SMS_FROM = re.compile(r"^(\+[1-9][0-9]{6,14}|[A-Za-z0-9 ]{1,11})$")


class _Account(BaseModel):
    """Every field optional: an account overrides the fields it names and nothing else."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )


def _secret() -> Any:
    """A secret field: one line of text, never echoed back."""
    return Field(default=None, min_length=1, max_length=4096, pattern=r"^[^\r\n\x00]+$")


def _sender(value: str | None) -> str | None:
    if value is not None and not _FROM.fullmatch(value):
        raise ValueError("must be an email address, optionally as `Name <address>`")
    return value


class SmtpAccount(_Account):
    host: str | None = Field(default=None, max_length=253)
    port: int | None = Field(default=None, ge=1, le=65_535)
    username: str | None = Field(default=None, min_length=1, max_length=320)
    password: str | None = _secret()
    from_address: str | None = Field(default=None, alias="from", max_length=320)
    starttls: bool | None = None

    @field_validator("host")
    @classmethod
    def _host(cls, value: str | None) -> str | None:
        if value is not None and not _HOST.fullmatch(value):
            raise ValueError("must be a host name or an IPv4 address")
        return value.lower().rstrip(".") if value is not None else None

    _from = field_validator("from_address")(_sender)


class ResendAccount(_Account):
    api_key: str | None = _secret()
    from_address: str | None = Field(default=None, alias="from", max_length=320)

    _from = field_validator("from_address")(_sender)


class TwilioAccount(_Account):
    account_sid: str | None = Field(default=None, pattern=r"^AC[0-9a-fA-F]{32}$")
    auth_token: str | None = _secret()
    from_number: str | None = Field(default=None, alias="from", pattern=_SMS_FROM.pattern)


class AakashAccount(_Account):
    auth_token: str | None = _secret()


class TelegramAccount(_Account):
    bot_token: str | None = Field(default=None, pattern=r"^[0-9]{1,20}:[A-Za-z0-9_-]{20,100}$")


class SlackAccount(_Account):
    bot_token: str | None = Field(default=None, pattern=r"^xox[bp]-[A-Za-z0-9-]{10,250}$")


class FcmAccount(_Account):
    # The Firebase project to send to; default: the service account's own project_id.
    project_id: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9-]{4,61}[a-z0-9]$")
    # The service account key file's JSON, as Google gives it (secret: it holds a private key).
    service_account_json: str | None = Field(default=None, min_length=2, max_length=20_000)

    @field_validator("service_account_json")
    @classmethod
    def _usable(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from herald.channels.fcm import parse_service_account

        try:
            raw = json.loads(value)
        except ValueError:
            raise ValueError("must be the service account key file's JSON") from None
        account, problem = parse_service_account(raw)
        if account is None:
            # What is wrong, never a byte of the key.
            raise ValueError(f"the service account JSON {problem}")
        return value


class WebPushAccount(_Account):
    # RFC 8292 §2.1: a mailto: or https: URL the push service may contact.
    vapid_subject: str | None = Field(
        default=None, max_length=500, pattern=r"^(mailto:[^\s@]+@[^\s@]+|https://[^\s/]+(/\S*)?)$"
    )


class WhatsAppAccount(_Account):
    # A system user's Cloud API access token, and the business phone number id it sends from.
    # The webhook's app secret stays the deployment's: Meta signs every receipt to one endpoint.
    token: str | None = _secret()
    phone_number_id: str | None = Field(default=None, pattern=r"^[0-9]{5,20}$")


class ProviderSpec(BaseModel):
    """One provider a tenant may hold an account for."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str
    channel: str
    schema_: type[_Account]
    # Account field → the Settings field it overrides.
    settings: Mapping[str, str]
    # The fields that are secrets: write-only, encrypted.
    secrets: frozenset[str]


def _spec(
    name: str, channel: str, schema: type[_Account], settings: dict[str, str], secrets: set[str]
) -> ProviderSpec:
    return ProviderSpec(
        name=name,
        channel=channel,
        schema_=schema,
        settings=settings,
        secrets=frozenset(secrets),
    )


SPECS: Final[Mapping[str, ProviderSpec]] = {
    spec.name: spec
    for spec in (
        _spec(
            "smtp",
            "email",
            SmtpAccount,
            {
                "host": "smtp_host",
                "port": "smtp_port",
                "username": "smtp_username",
                "password": "smtp_password",
                "from_address": "email_from",
                "starttls": "smtp_starttls",
            },
            {"password"},
        ),
        _spec(
            "resend",
            "email",
            ResendAccount,
            {"api_key": "resend_api_key", "from_address": "email_from"},
            {"api_key"},
        ),
        _spec(
            "twilio",
            "sms",
            TwilioAccount,
            {
                "account_sid": "twilio_account_sid",
                "auth_token": "twilio_auth_token",
                "from_number": "twilio_from",
            },
            {"auth_token"},
        ),
        _spec("aakash", "sms", AakashAccount, {"auth_token": "aakash_auth_token"}, {"auth_token"}),
        _spec(
            "telegram",
            "telegram",
            TelegramAccount,
            {"bot_token": "telegram_bot_token"},
            {"bot_token"},
        ),
        _spec("slack", "slack", SlackAccount, {"bot_token": "slack_bot_token"}, {"bot_token"}),
        _spec(
            "fcm",
            "push",
            FcmAccount,
            {
                "project_id": "fcm_project_id",
                "service_account_json": "fcm_service_account_json",
            },
            {"service_account_json"},
        ),
        _spec("webpush", "push", WebPushAccount, {"vapid_subject": "webpush_vapid_subject"}, set()),
        _spec(
            "whatsapp",
            "whatsapp",
            WhatsAppAccount,
            {"token": "whatsapp_token", "phone_number_id": "whatsapp_phone_number_id"},
            {"token"},
        ),
    )
}
PROVIDERS: Final[tuple[str, ...]] = tuple(SPECS)
# Notified (payload: the tenant) by every change to an account; the workers LISTEN on it.
NOTIFY_CHANNEL: Final = "herald_provider_account"
# The channels some provider account can change: the only ones a tenant's provider differs on.
CHANNELS: Final[frozenset[str]] = frozenset(spec.channel for spec in SPECS.values())


def field_alias(spec: ProviderSpec, field: str) -> str:
    """The field's name in the API (its alias, e.g. `from`)."""
    info = spec.schema_.model_fields[field]
    return info.alias or field


def split(spec: ProviderSpec, account: _Account) -> tuple[dict[str, Any], dict[str, str]]:
    """(plain settings, secret settings) of a validated account; fields left unset are absent."""
    plain: dict[str, Any] = {}
    secret: dict[str, str] = {}
    for field in account.model_fields_set:
        value = getattr(account, field)
        if value is None:
            continue
        if field in spec.secrets:
            secret[field] = str(value)
        else:
            plain[field] = value
    return plain, secret


def encrypt(ring: MultiFernet, secret: Mapping[str, str]) -> bytes | None:
    return ring.encrypt(json.dumps(dict(secret)).encode()) if secret else None


def decrypt(ring: MultiFernet, ciphertext: bytes | None) -> dict[str, str]:
    """The secret fields; an InvalidToken (a key outside the ring) propagates to the caller."""
    if not ciphertext:
        return {}
    loaded = json.loads(ring.decrypt(bytes(ciphertext)))
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def overlay(settings: Settings, accounts: Mapping[str, Mapping[str, Any]]) -> Settings:
    """The deployment's Settings with the tenant's accounts (provider → its fields, plain and
    secret merged) laid over them. Unknown providers and fields are ignored: the table may hold
    a field a newer Herald wrote."""
    update: dict[str, Any] = {}
    for provider, fields in sorted(accounts.items()):
        spec = SPECS.get(provider)
        if spec is None:
            continue
        for field, value in fields.items():
            target = spec.settings.get(field)
            if target is not None and value is not None:
                update[target] = value
    if not update:
        return settings
    overlaid = settings.model_copy(update=update)
    for channel in ("email", "sms"):
        chosen = _chosen(settings, channel, accounts)
        if chosen is not None:
            overlaid = overlaid.model_copy(update={f"{channel}_provider": chosen})
    return overlaid


def _chosen(settings: Settings, channel: str, accounts: Mapping[str, Any]) -> str | None:
    """A channel the deployment leaves unconfigured (no provider named, no failover list, its
    default provider without credentials) takes the tenant's provider of that channel: a
    deployment without email delivers a tenant's email through the tenant's Resend account. A
    provider the deployment names stays the tenant's too (its account only changes its fields)."""
    if channel == "email":
        named = settings.email_provider or settings.email_providers.strip()
        default, configured = "smtp", bool(settings.smtp_host)
    else:
        named = settings.sms_provider or settings.sms_providers.strip()
        default, configured = "aakash", bool(settings.aakash_auth_token)
    if named or configured:
        return None
    held = sorted(p for p in accounts if p in SPECS and SPECS[p].channel == channel)
    if not held or default in held:
        return None
    return held[0]
