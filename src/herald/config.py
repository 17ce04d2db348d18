"""Settings, read from the environment only (HERALD_*), validated and bounded at start-up."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from herald import vocabulary

DEFAULT_FOLLOWUP_SWEEP_SECONDS = 60
# Every tenant's zone for a person whose directory record names none (HERALD_DEFAULT_TIMEZONE).
DEFAULT_TIMEZONE = "Asia/Kathmandu"
# The providers HERALD_EMAIL_PROVIDERS and HERALD_SMS_PROVIDERS may name (a mock only alone).
EMAIL_PROVIDERS = ("smtp", "smtp_backup", "resend", "mock")
SMS_PROVIDERS = ("aakash", "twilio", "mock")


class Settings(BaseSettings):
    """Every value Herald reads from its environment."""

    model_config = SettingsConfigDict(
        env_prefix="HERALD_", extra="ignore", use_attribute_docstrings=True
    )

    environment: str = "development"
    """`production` or anything else (default `development`)."""
    database_url: str | None = None
    """PostgreSQL >= 14, libpq or SQLAlchemy form. Unset: Herald starts its embedded PostgreSQL
    under HERALD_DATA_DIR and uses database `herald` there.
    """
    database_session_url: str | None = None
    """Optional: a direct PostgreSQL URL (not through a transaction pooler) for what needs a
    session of its own: LISTEN (realtime, the worker's wake-up) and the worker's presence locks.
    Set it when HERALD_DATABASE_URL points at PgBouncer in transaction mode; same database.
    """
    database_read_url: str | None = None
    """Optional: a streaming-replication standby of HERALD_DATABASE_URL's cluster, for the end
    user's inbox list and unread count (herald api only). A person who just wrote (marked read,
    saved preferences) reads from the primary until the standby has replayed that write; with
    several API processes set HERALD_REDIS_URL too, so they all know it. Refused at start-up when
    it is no standby of the same cluster.
    """
    read_max_lag_seconds: float = Field(default=5.0, gt=0, le=3600)
    """The standby's replay lag beyond which inbox reads go to the primary (HERALD_DATABASE_READ_URL).
    More than 0, at most 3600.
    """
    data_dir: Path = Path(".herald")
    """Where the embedded PostgreSQL and `herald dev`'s state (dev.json) live."""
    db_pool_size: int = Field(default=10, ge=1, le=200)
    """Database connections per process: at most twice this many, opened as needed and kept.
    1..200.
    """
    redis_url: str | None = None
    """Optional. Set: the secret vault and realtime events use Redis; unset: PostgreSQL does."""
    # End-user and operator JWTs (DESIGN.md §5): exactly one key source, which pins the
    # algorithm — HS256 with the secret, RS256/ES256 with the PEM public key (its type decides),
    # or RS256/ES256 keys fetched from a JWKS URL (cached, refetched for an unknown `kid`).
    jwt_secret: str | None = None
    """HS256 with this secret (32+ random bytes). Set exactly one of HERALD_JWT_SECRET,
    HERALD_JWT_PUBLIC_KEY and HERALD_JWT_JWKS_URL; it pins the algorithm (`alg: none`, and HS256
    tokens against a public key, are refused). `herald dev` generates a secret when none is set.
    """
    jwt_public_key: str | None = None
    """A PEM public key: RSA means RS256, EC P-256 means ES256. The one key source when set (see
    HERALD_JWT_SECRET).
    """
    jwt_jwks_url: str | None = None
    """RS256/ES256 keys fetched from this JWKS URL, chosen by the token's `kid`. The one key source
    when set (see HERALD_JWT_SECRET).
    """
    jwt_jwks_cache_seconds: int = Field(default=300, ge=10, le=86_400)
    """How long the fetched key set is cached (10..86400 s), and how often an unknown kid (a
    rotated key) may refetch it at most (0..3600 s).
    """
    # An unknown `kid` refetches the set at most this often (tokens with made-up kids must not
    # turn Herald into a flood of requests to the identity provider).
    jwt_jwks_refresh_cooldown_seconds: int = Field(default=30, ge=0, le=3600)
    """How long the fetched key set is cached (10..86400 s), and how often an unknown kid (a
    rotated key) may refetch it at most (0..3600 s).
    """
    # Checked when set: a token must then carry this `aud` / `iss`.
    jwt_audience: str | None = None
    """When set, a token must carry exactly this audience / issuer. `exp` is always required."""
    jwt_issuer: str | None = None
    """When set, a token must carry exactly this audience / issuer. `exp` is always required."""
    # Clock skew tolerated on `exp`, `nbf` and `iat`.
    jwt_leeway_seconds: int = Field(default=30, ge=0, le=300)
    """Clock skew tolerated on exp/nbf/iat. 0..300 seconds."""
    # Browser origins answered with CORS headers, comma-separated (scheme://host[:port]).
    cors_origins: str = ""
    """Browser origins allowed to call the API (CORS), comma-separated, each scheme://host[:port]
    exactly as the browser sends it, e.g. https://school.example.com. Default: none, so browsers on
    other origins (the <herald-inbox> element on a host's page) are refused.
    """
    kinds: str | None = None
    """The kind registry, as package.module:attribute. Unset: the sample school registry."""
    required_channels: str = ""
    """Channels a deployment must have configured, comma-separated, from
    in_app,email,sms,push,telegram,slack,teams,whatsapp. Default: none.
    """

    lease_seconds: int = Field(default=60, ge=5, le=3600)
    """A claim's lease; an expired one is released by the reaper. 5..3600 seconds."""
    max_attempts: int = Field(default=5, ge=1, le=100)
    """Attempts before a delivery is dead-lettered. 1..100."""
    retry_base_seconds: int = Field(default=30, ge=1, le=86_400)
    """Exponential backoff: base and cap between attempts. 1..86400 seconds each."""
    retry_max_seconds: int = Field(default=3600, ge=1, le=86_400)
    """Exponential backoff: base and cap between attempts. 1..86400 seconds each."""
    poll_interval_seconds: float = Field(default=1.0, gt=0, le=60)
    """How often an idle worker looks for work besides LISTEN/NOTIFY wake-ups. >0..60 seconds."""
    fanout_batch_size: int = Field(default=500, ge=1, le=10_000)
    """Recipients written per fan-out page. 1..10000."""
    backfill_max_age_hours: int = Field(default=72, ge=1, le=24 * 90)
    """How far back the backfill looks for events whose fan-out never happened. 1..2160 hours."""
    device_limit: int = Field(default=10, ge=1, le=100)
    """Active push tokens one person may hold; a registration at the cap is refused. 1..100."""
    vault_ttl_seconds: int = Field(default=900, ge=30, le=86_400)
    """How long a stashed secret (reset token, OTP) waits in the vault. 30..86400 seconds."""
    # Fernet key of the embedded vault (urlsafe base64, 32 bytes). Unset: a key file under
    # data_dir, created on first use. Either way the key never lives in the database.
    vault_key: str | None = None
    """The embedded vault's Fernet key (urlsafe base64 of 32 bytes). Unset: a key file under
    HERALD_DATA_DIR, created on first use. Either way the key never lives in the database.
    """
    # The key ring of a rotation (docs/tenancy-and-security.md): every process reads with these
    # too, so secrets written under the old key stay readable until `herald vault rotate-key`
    # has re-encrypted them.
    vault_old_keys: str = ""
    """Other vault keys, comma-separated, accepted for reading and never for writing: the old key
    while `herald vault rotate-key` re-encrypts what it wrote under HERALD_VAULT_KEY. Empty once
    a rotation is finished.
    """
    # Provider timeouts (R-PROVIDER-22, R-PROVIDER-23); the lease must outlast them (R-PLAT-14).
    provider_connect_timeout_seconds: float = Field(default=3.0, gt=0, le=30)
    """Every provider call's connect and read timeouts (the lease must outlast them). >0..30 and
    >0..60 seconds.
    """
    provider_read_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    """Every provider call's connect and read timeouts (the lease must outlast them). >0..30 and
    >0..60 seconds.
    """

    # Failover between a channel's providers (herald.channels.failover).
    provider_circuit_failures: int = Field(default=5, ge=1, le=1000)
    """Failover: after this many failed sends in a row a provider's circuit opens and its sends go
    to the next provider of HERALD_EMAIL_PROVIDERS / HERALD_SMS_PROVIDERS; after the cooldown one
    probe send goes to it again, and a success closes the circuit. 1..1000 failures, 0.1..3600 s.
    """
    provider_circuit_cooldown_seconds: float = Field(default=30.0, ge=0.1, le=3600)
    """Failover: after this many failed sends in a row a provider's circuit opens and its sends go
    to the next provider of HERALD_EMAIL_PROVIDERS / HERALD_SMS_PROVIDERS; after the cooldown one
    probe send goes to it again, and a success closes the circuit. 1..1000 failures, 0.1..3600 s.
    """

    # Email (DESIGN.md §5.1).
    email_provider: Literal["smtp", "resend", "mock"] | None = None
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    email_providers: str = ""
    """Failover: the email providers to try in order, comma-separated, from smtp, smtp_backup and
    resend (e.g. `smtp,resend`). A send moves to the next only when the one before certainly did
    not take the message or its circuit is open (docs/sending-and-delivery.md, "Provider
    failover"). Each named provider must be configured. Instead of HERALD_EMAIL_PROVIDER, not with
    it.
    """
    email_from: str = "Herald <no-reply@localhost>"
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    support_mailbox: str | None = None
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    smtp_host: str | None = None
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    smtp_port: int = Field(default=587, ge=1, le=65_535)
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    smtp_username: str | None = None
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    smtp_password: str | None = None
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    smtp_starttls: bool = True
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    smtp_backup_host: str | None = None
    """A second SMTP server, the `smtp_backup` provider of HERALD_EMAIL_PROVIDERS: host, port,
    login and STARTTLS, with the same meaning and defaults as the HERALD_SMTP_* settings.
    """
    smtp_backup_port: int = Field(default=587, ge=1, le=65_535)
    """A second SMTP server, the `smtp_backup` provider of HERALD_EMAIL_PROVIDERS: host, port,
    login and STARTTLS, with the same meaning and defaults as the HERALD_SMTP_* settings.
    """
    smtp_backup_username: str | None = None
    """A second SMTP server, the `smtp_backup` provider of HERALD_EMAIL_PROVIDERS: host, port,
    login and STARTTLS, with the same meaning and defaults as the HERALD_SMTP_* settings.
    """
    smtp_backup_password: str | None = None
    """A second SMTP server, the `smtp_backup` provider of HERALD_EMAIL_PROVIDERS: host, port,
    login and STARTTLS, with the same meaning and defaults as the HERALD_SMTP_* settings.
    """
    smtp_backup_starttls: bool = True
    """A second SMTP server, the `smtp_backup` provider of HERALD_EMAIL_PROVIDERS: host, port,
    login and STARTTLS, with the same meaning and defaults as the HERALD_SMTP_* settings.
    """
    resend_api_key: str | None = None
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    resend_base_url: str = "https://api.resend.com"
    """A channel whose provider is unset is unconfigured: its deliveries are recorded as
    skipped_unconfigured. `mock` records messages instead of sending them (`herald dev` uses it for
    every channel you leave unset). Every HTTP provider's base URL can point at a proxy. Email:
    smtp | resend | mock.
    """
    # Resend's webhook signing secret (whsec_…): delivery receipts at /v1/providers/resend/events
    # are verified with it; unset, that route answers 404.
    resend_webhook_secret: str | None = None
    """Resend's webhook signing secret (whsec_…) for delivery receipts at
    /v1/providers/resend/events.
    """

    # SMS.
    sms_provider: Literal["aakash", "twilio", "mock"] | None = None
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    sms_providers: str = ""
    """Failover: the SMS providers to try in order, comma-separated, from aakash and twilio (e.g.
    `aakash,twilio`; a number outside Nepal then goes straight to Twilio). Each must be configured.
    Instead of HERALD_SMS_PROVIDER, not with it.
    """
    sms_default_region: str = "NP"
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    aakash_auth_token: str | None = None
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    aakash_base_url: str = "https://sms.aakashsms.com/sms/v3"
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    twilio_account_sid: str | None = None
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    twilio_auth_token: str | None = None
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    twilio_from: str | None = None
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    twilio_base_url: str = "https://api.twilio.com"
    """SMS: aakash | twilio | mock. Numbers without a country code are read in the default region.
    """
    # The public URL of /v1/providers/twilio/status as Twilio calls it (behind a proxy Herald
    # sees another): sent as each message's StatusCallback and used to check X-Twilio-Signature.
    twilio_status_callback_url: str | None = None
    """The public URL of /v1/providers/twilio/status as Twilio reaches it: each SMS's
    StatusCallback, and the URL X-Twilio-Signature is checked against (signed with
    HERALD_TWILIO_AUTH_TOKEN).
    """

    # Push.
    push_provider: Literal["fcm", "mock"] | None = None
    """Push: fcm | mock."""
    fcm_service_account_file: Path | None = None
    """Push: fcm | mock."""
    fcm_service_account_json: str | None = None
    """The FCM service account's JSON itself, instead of HERALD_FCM_SERVICE_ACCOUNT_FILE (for a
    secret handed over in the environment); takes precedence over the file. A tenant's own
    provider account sets it for that tenant (docs/provider-accounts.md).
    """
    fcm_project_id: str | None = None
    """The Firebase project push messages are sent to. Default: the service account's
    project_id.
    """
    fcm_base_url: str = "https://fcm.googleapis.com"
    """Push: fcm | mock."""
    fcm_token_url: str = "https://oauth2.googleapis.com/token"
    """Push: fcm | mock."""
    # Browser Web Push (RFC 8030) with VAPID (RFC 8292): devices registered with platform
    # "webpush" are sent through their push service, the others through FCM.
    webpush_vapid_subject: str | None = None
    """Web Push: the VAPID subject push services may contact (a `mailto:` address or an
    `https:` URL). Set: Web Push is configured. Unset: webpush devices are skipped unconfigured.
    """
    webpush_vapid_key_file: Path | None = None
    """Web Push: the VAPID key pair, its private key encrypted with the vault key. Unset:
    <HERALD_DATA_DIR>/webpush-vapid.key, created on first use. Every node must share one file.
    """
    webpush_ttl_seconds: int = Field(default=86_400, ge=0, le=2_419_200)
    """Web Push: how long the push service keeps a message for an offline browser. 0..2419200 s."""

    # Telegram.
    telegram_provider: Literal["telegram", "mock"] | None = None
    """Telegram: telegram | mock. Messages per second across the bot. >0..30."""
    telegram_bot_token: str | None = None
    """Telegram: telegram | mock. Messages per second across the bot. >0..30."""
    telegram_base_url: str = "https://api.telegram.org"
    """Telegram: telegram | mock. Messages per second across the bot. >0..30."""
    telegram_rate_per_second: float = Field(default=25.0, gt=0, le=30)
    """Telegram: telegram | mock. Messages per second across the bot. >0..30."""

    # Slack and Microsoft Teams (issue 46): channels for staff.
    slack_provider: Literal["slack", "mock"] | None = None
    """Slack: slack | mock. The bot token (xoxb-…, with chat:write) posts with chat.postMessage to
    each person's Slack user or channel id; the base URL is the Web API's.
    """
    slack_bot_token: str | None = None
    """Slack: slack | mock. The bot token (xoxb-…, with chat:write) posts with chat.postMessage to
    each person's Slack user or channel id; the base URL is the Web API's.
    """
    slack_base_url: str = "https://slack.com/api/"
    """Slack: slack | mock. The bot token (xoxb-…, with chat:write) posts with chat.postMessage to
    each person's Slack user or channel id; the base URL is the Web API's.
    """
    teams_provider: Literal["teams", "mock"] | None = None
    """Microsoft Teams: teams | mock. Messages are Adaptive Cards posted to each person's incoming
    or Workflows webhook URL; there is no deployment-wide credential.
    """

    # WhatsApp Business Cloud API (issue 46): approved template messages to each person's phone.
    whatsapp_provider: Literal["whatsapp", "mock"] | None = None
    """WhatsApp: whatsapp | mock. Configured when the token and phone number id are set."""
    whatsapp_token: str | None = None
    """WhatsApp: the Cloud API access token (a system user's, with whatsapp_business_messaging),
    sent as a bearer token. A secret: never logged or shown.
    """
    whatsapp_phone_number_id: str | None = None
    """WhatsApp: the business phone number id messages are sent from (digits, from the app's
    WhatsApp setup page).
    """
    whatsapp_app_secret: str | None = None
    """WhatsApp: the Meta app's secret, which signs delivery receipts (X-Hub-Signature-256) posted
    to /v1/providers/whatsapp/webhook. Unset: the webhook answers 404. A secret.
    """
    whatsapp_verify_token: str | None = None
    """WhatsApp: the verify token typed into the app's webhook settings; Meta's subscription
    handshake (GET /v1/providers/whatsapp/webhook) must present it. A secret.
    """
    whatsapp_api_url: str = "https://graph.facebook.com/v21.0"
    """WhatsApp: the Graph API base URL with its version; messages are posted to
    {url}/{phone_number_id}/messages.
    """

    # Rate limits (R-SEC-14), in the `limits` notation ("100/second", "6000/minute") or "off";
    # shared by every process through Redis when HERALD_REDIS_URL is set, per process otherwise.
    # Sends (POST /v1/events, POST /v1/secrets) per API key and per tenant:
    rate_limit_send_per_key: str = "100/second"
    """Rates in the `limits` notation (`100/second`, `6000/minute`, `10/5 seconds`) or `off`. With
    HERALD_REDIS_URL they are shared by every API process; without, each process counts its own.
    Over a limit the API answers 429 RATE_LIMITED with Retry-After. Sends (POST /v1/events and,
    counted apart, POST /v1/secrets), per API key and per tenant:
    """
    rate_limit_send_per_tenant: str = "300/second"
    """Rates in the `limits` notation (`100/second`, `6000/minute`, `10/5 seconds`) or `off`. With
    HERALD_REDIS_URL they are shared by every API process; without, each process counts its own.
    Over a limit the API answers 429 RATE_LIMITED with Retry-After. Sends (POST /v1/events and,
    counted apart, POST /v1/secrets), per API key and per tenant:
    """
    # End-user routes (/v1/me/...) per person:
    rate_limit_per_person: str = "20/second"
    """End-user routes (/v1/me/...), per person:"""
    # GET /metrics: this bearer token, or an API key with the metrics:read scope.
    metrics_token: str | None = None
    """GET /metrics needs this bearer token, or an API key with the metrics:read scope."""

    # Retention (R-RETENTION-*): events, recipients and deliveries by `occurred_at`, invalidated
    # push tokens by `invalidated_at`, operations-feed rows by `occurred_at`. The events' window
    # must outlast the backfill window (R-OPS-6, checked below).
    retention_days: int = Field(default=180, ge=1, le=3650)
    """Events, their recipients and deliveries are deleted this many days after `occurred_at`,
    bottom-up in bounded statements; an event with a queued, processing or failed delivery, or an
    unreplayed dead letter, is kept. 1..3650. Must be longer than HERALD_BACKFILL_MAX_AGE_HOURS
    (retention_days * 24 > backfill_max_age_hours), or Herald refuses to start: a shorter window
    would delete skipped deliveries the backfill is still meant to send.
    """
    push_token_retention_days: int = Field(default=30, ge=1, le=3650)
    """Invalidated push tokens are pruned this many days after `invalidated_at`. 1..3650."""
    feed_retention_days: int = Field(default=90, ge=1, le=3650)
    """Operations-feed rows (and their read receipts) are deleted this many days after
    `occurred_at`. 1..3650.
    """
    # Rows one retention statement deletes at most (R-RETENTION-5, R-RETENTION-6).
    retention_batch_size: int = Field(default=1000, ge=10, le=10_000)
    """Rows one retention statement deletes at most; each level repeats it until done. 10..10000.
    """

    # SMS credit check (R-CREDIT-*): warn below this many credits, once per local day.
    sms_credit_threshold: int = Field(default=500, ge=0, le=100_000_000)
    """The SMS provider's balance is read once a day (day boundary in the time zone below); below
    this many credits Herald logs a warning, posts it to the operations feed and emails the support
    mailbox. 0..100000000.
    """
    credit_check_timezone: str = "Asia/Kathmandu"
    """The SMS provider's balance is read once a day (day boundary in the time zone below); below
    this many credits Herald logs a warning, posts it to the operations feed and emails the support
    mailbox. 0..100000000.
    """
    default_timezone: str = DEFAULT_TIMEZONE
    """The IANA time zone of a person whose directory record names none (or names one the IANA
    database does not know): `deliverAt` and quiet hours are read on its wall clock. Herald keeps
    no tenant record, so this is every tenant's zone.
    """
    # The tenant whose operations feed carries deployment-wide warnings (the SMS credit is one
    # account for every tenant).
    ops_tenant: str = Field(default="system", min_length=1, max_length=200)
    """The tenant whose operations feed receives deployment-wide warnings (the SMS credit belongs
    to the deployment, not to one school): set it to the tenant your operators sign in to.
    """

    # Operational email (R-OPMAIL-*, R-PLAT-9): its own retry budget, not the deliveries'.
    operational_email_max_attempts: int = Field(default=5, ge=1, le=100)
    """Attempts an operational email (an alert to HERALD_SUPPORT_MAILBOX) gets before it is dead-
    lettered; it retries on its own budget with the delivery backoff. 1..100.
    """

    # Throttle (issue 16): at most this many SMS per person per category within the window;
    # past it, SMS deliveries are skipped_throttled. 0: off. Security and account are exempt.
    throttle_sms_per_category: int = Field(default=0, ge=0, le=10_000)
    """At most this many SMS per person per category within the window; past it SMS deliveries are
    skipped_throttled (in-app and email unaffected; security and account never throttled). 0: off.
    """
    throttle_window_seconds: int = Field(default=86_400, ge=60, le=30 * 86_400)
    """At most this many SMS per person per category within the window; past it SMS deliveries are
    skipped_throttled (in-app and email unaffected; security and account never throttled). 0: off.
    """

    # Outbound webhooks to the host (issue 16). Endpoints must be https and resolve only to
    # public addresses (SSRF): private, loopback, link-local and metadata addresses are refused
    # at create time and again at every send, unless named here (comma-separated host names or
    # CIDR networks). `herald dev` allows loopback (http included) so a laptop can receive them.
    webhook_allow_loopback: bool = False
    """Loopback (http included) as a destination; `herald dev` turns it on unless set here."""
    webhook_allowed_hosts: str = ""
    """Endpoints must be https and resolve only to public addresses; these open exceptions (comma-
    separated host names or CIDR networks, e.g. "10.20.0.0/16,hooks.internal").
    """
    # Attempts before a message is dead (its dead letter replayable); with the default backoff
    # (retry_base_seconds doubling up to webhook_retry_max_seconds) 15 attempts span about a day.
    webhook_max_attempts: int = Field(default=15, ge=1, le=100)
    """Attempts before a message is dead (replayable from the dead-letter screen), the backoff's
    ceiling, and one attempt's whole time from DNS to response.
    """
    webhook_retry_max_seconds: int = Field(default=3600, ge=1, le=86_400)
    """Attempts before a message is dead (replayable from the dead-letter screen), the backoff's
    ceiling, and one attempt's whole time from DNS to response.
    """
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=60)
    """Attempts before a message is dead (replayable from the dead-letter screen), the backoff's
    ceiling, and one attempt's whole time from DNS to response.
    """

    # Scheduler and features of DESIGN.md §5.2 (off by default; `herald dev` turns them on).
    feature_reminders: bool = False
    """Reminder schedules (/v1/admin/reminders and their firing) and approved broadcasts. Off:
    their routes answer 404 NOTIFICATION_FEATURE_DISABLED and nothing fires; stored rows are kept.
    `herald dev` turns both on unless they are set here. Enable only once delivery and failure
    reporting are monitored, after a test with one internal recipient (R-OPS-21, R-OPS-22).
    """
    feature_broadcasts: bool = False
    """Reminder schedules (/v1/admin/reminders and their firing) and approved broadcasts. Off:
    their routes answer 404 NOTIFICATION_FEATURE_DISABLED and nothing fires; stored rows are kept.
    `herald dev` turns both on unless they are set here. Enable only once delivery and failure
    reporting are monitored, after a test with one internal recipient (R-OPS-21, R-OPS-22).
    """
    # The lease one of several `herald scheduler` processes holds to fire reminders; a killed
    # leader is replaced within two lease periods. The tick is how often the holder looks for
    # due work (and renews), so it must be well inside the lease (checked below).
    scheduler_lease_seconds: int = Field(default=15, ge=2, le=600)
    """Of several `herald scheduler` processes, the one holding this database lease fires
    reminders; a killed holder is replaced within two lease periods. 2..600 seconds.
    """
    scheduler_tick_seconds: float = Field(default=1.0, ge=0.1, le=60)
    """How often the scheduler looks for due occurrences (and renews its lease); at most half the
    lease. 0.1..60 seconds.
    """
    # A scheduler that was down fires the latest missed occurrence only if it is at most this
    # late; older ones are recorded as `missed`, never flooded out.
    reminder_max_lateness_minutes: int = Field(default=60, ge=1, le=10_080)
    """A scheduler that was down fires only the latest missed occurrence, and only if it is at most
    this late; older ones are recorded as `missed`. 1..10080 minutes.
    """
    # Follow-ups (DESIGN.md §5.2, R-FOLLOW-46..52): how often `herald scheduler` sweeps (0: no
    # timer, `sweep()` stays callable; unset: 60, or 0 when HERALD_ENVIRONMENT=test so a suite
    # drives sweep() itself, R-FOLLOW-48/54), the default grace before the notify and the
    # default delay from the notify to the reminder. Negative values refuse to start.
    followup_sweep_seconds: int | None = Field(default=None, ge=0, le=86_400)
    """Follow-ups (/v1/followups, herald.followups): the scheduler sweeps every this many seconds
    (no lease needed: each transition is a compare-and-set). 0: no timer. Unset: 60, or 0 when
    """
    followup_grace_minutes: int = Field(default=15, ge=0, le=10_080)
    """Default grace between arming and the notify (armAt = now + grace), and default delay from
    the notify to the one reminder; a follow-up may give its own. 0..10080 minutes.
    """
    followup_reminder_delay_minutes: int = Field(default=60, ge=0, le=10_080)
    """Default grace between arming and the notify (armAt = now + grace), and default delay from
    the notify to the one reminder; a follow-up may give its own. 0..10080 minutes.
    """

    # Observability (issue 14; docs/operations.md).
    # One JSON object a line, or text for a person; unset: json, except under `herald dev`.
    log_format: Literal["json", "text"] | None = None
    """Log lines: `json` (one object a line: time, level, logger, message, role, and request_id,
    event_id, delivery_id, tenant where there is one) or `text`. Unset: json, text under `herald
    dev`.
    """
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    """DEBUG, INFO, WARNING or ERROR."""
    # Where every Herald process on this host keeps its counters and histograms (Prometheus
    # multiprocess mode), so any API process's /metrics reports all of them. Unset: <data_dir>/metrics.
    metrics_dir: Path | None = None
    """Where this host's Herald processes keep their counters (Prometheus multiprocess mode), so
    /metrics of any API process reports every process's. Empty it when the host boots (a tmpfs).
    Unset: $PROMETHEUS_MULTIPROC_DIR if set, else <HERALD_DATA_DIR>/metrics.
    """
    # A worker or scheduler also serves its own /metrics on this port (a host with no API process).
    metrics_port: int | None = Field(default=None, ge=1, le=65_535)
    """A worker or scheduler serves its own /metrics on this port too (a host without an API
    process).
    """
    # Tracing is off unless an OTLP endpoint is set here or in OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT.
    otel_exporter_otlp_endpoint: str | None = None
    """OpenTelemetry traces over OTLP/HTTP to this collector (base URL; /v1/traces is appended).
    Unset and no OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT: tracing is off and costs nothing.
    """

    @field_validator("required_channels")
    @classmethod
    def _known_channels(cls, value: str) -> str:
        unknown = [c for c in _split(value) if c not in vocabulary.CHANNELS]
        if unknown:
            raise ValueError(f"unknown channel(s) in HERALD_REQUIRED_CHANNELS: {unknown}")
        return value

    @model_validator(mode="after")
    def _provider_lists(self) -> Settings:
        for channel, listed, single, known in (
            ("EMAIL", self.email_providers, self.email_provider, EMAIL_PROVIDERS),
            ("SMS", self.sms_providers, self.sms_provider, SMS_PROVIDERS),
        ):
            names = _split(listed)
            if not names:
                continue
            if single is not None:
                raise ValueError(
                    f"set HERALD_{channel}_PROVIDER or HERALD_{channel}_PROVIDERS, not both"
                )
            unknown = [n for n in names if n not in known]
            if unknown:
                raise ValueError(
                    f"HERALD_{channel}_PROVIDERS names unknown provider(s) {', '.join(unknown)}; "
                    f"known: {', '.join(known)}"
                )
            if len(set(names)) != len(names):
                raise ValueError(f"HERALD_{channel}_PROVIDERS names a provider twice")
            if len(names) > 1 and "mock" in names:
                raise ValueError(
                    f"HERALD_{channel}_PROVIDERS: mock records instead of sending, so it can only "
                    "be the one provider"
                )
        return self

    @property
    def email_provider_list(self) -> list[str]:
        """The email providers in order: HERALD_EMAIL_PROVIDERS, else the one provider (smtp
        when HERALD_EMAIL_PROVIDER is unset, configured once HERALD_SMTP_HOST is)."""
        return _split(self.email_providers) or [self.email_provider or "smtp"]

    @property
    def sms_provider_list(self) -> list[str]:
        return _split(self.sms_providers) or [self.sms_provider or "aakash"]

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: str) -> str:
        for origin in _split(value):
            if not _ORIGIN.fullmatch(origin):
                raise ValueError(
                    f"{origin!r} in HERALD_CORS_ORIGINS is not an origin "
                    "(scheme://host[:port], no path, no wildcard)"
                )
        return value

    @field_validator("vault_old_keys")
    @classmethod
    def _old_keys(cls, value: str) -> str:
        from cryptography.fernet import Fernet

        for position, key in enumerate(_split(value), start=1):
            try:
                Fernet(key)
            except (ValueError, TypeError):
                # The position, never the value: this message reaches logs and terminals.
                raise ValueError(
                    f"HERALD_VAULT_OLD_KEYS: entry {position} is not a Fernet key "
                    "(urlsafe base64 of 32 bytes)"
                ) from None
        return value

    @field_validator("webpush_vapid_subject")
    @classmethod
    def _vapid_subject(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        if not (value.startswith("mailto:") and "@" in value) and not value.startswith("https://"):
            raise ValueError(
                "HERALD_WEBPUSH_VAPID_SUBJECT must be a mailto: address or an https: URL"
            )
        return value

    @property
    def vault_old_key_list(self) -> list[str]:
        return _split(self.vault_old_keys)

    @property
    def cors_origin_list(self) -> list[str]:
        return [origin.rstrip("/") for origin in _split(self.cors_origins)]

    @field_validator(
        "rate_limit_send_per_key", "rate_limit_send_per_tenant", "rate_limit_per_person"
    )
    @classmethod
    def _rate(cls, value: str) -> str:
        from herald.ratelimit import parse_limit

        parse_limit(value)
        return value

    @field_validator("jwt_public_key")
    @classmethod
    def _public_key(cls, value: str | None) -> str | None:
        # Refused at start-up, not at the first request (where it could only be a 500).
        if not value:
            return value
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        try:
            key = serialization.load_pem_public_key(value.encode())
        except (ValueError, TypeError):
            raise ValueError("HERALD_JWT_PUBLIC_KEY is not a PEM public key") from None
        if not isinstance(key, rsa.RSAPublicKey) and not (
            isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1)
        ):
            raise ValueError("HERALD_JWT_PUBLIC_KEY must be an RSA or an EC P-256 public key")
        return value

    @model_validator(mode="after")
    def _one_jwt_key_source(self) -> Settings:
        # Two sources would let the token's header choose between them: the algorithm-confusion
        # attack (HS256 "signed" with the RS256 public key) starts exactly there.
        given = [
            name
            for name, value in (
                ("HERALD_JWT_SECRET", self.jwt_secret),
                ("HERALD_JWT_PUBLIC_KEY", self.jwt_public_key),
                ("HERALD_JWT_JWKS_URL", self.jwt_jwks_url),
            )
            if value
        ]
        if len(given) > 1:
            raise ValueError(f"set one JWT key source, not {' and '.join(given)}")
        return self

    @field_validator("credit_check_timezone", "default_timezone")
    @classmethod
    def _known_timezone(cls, value: str, info: ValidationInfo) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            name = f"HERALD_{(info.field_name or '').upper()}"
            raise ValueError(f"{name}: unknown time zone {value!r}") from None
        return value

    @model_validator(mode="after")
    def _retention_outlasts_backfill(self) -> Settings:
        # R-OPS-6: backfill re-drives skipped_unconfigured deliveries younger than
        # backfill_max_age_hours; retention deletes events older than retention_days. A
        # retention window that is not longer than the backfill window would delete the backlog
        # backfill exists to send, silently, so that pair refuses to start.
        if self.retention_days * 24 <= self.backfill_max_age_hours:
            raise ValueError(
                f"HERALD_RETENTION_DAYS ({self.retention_days} days) must be longer than "
                f"HERALD_BACKFILL_MAX_AGE_HOURS ({self.backfill_max_age_hours} hours), or retention "
                "deletes deliveries backfill would still send"
            )
        return self

    @model_validator(mode="after")
    def _tick_inside_lease(self) -> Settings:
        # A holder renews on every tick; a tick longer than half the lease would let the lease
        # lapse between two renewals and hand the cycle to another scheduler mid-flight.
        if self.scheduler_tick_seconds * 2 > self.scheduler_lease_seconds:
            raise ValueError(
                f"HERALD_SCHEDULER_TICK_SECONDS ({self.scheduler_tick_seconds}) must be at most "
                f"half of HERALD_SCHEDULER_LEASE_SECONDS ({self.scheduler_lease_seconds})"
            )
        return self

    @property
    def required_channel_set(self) -> frozenset[str]:
        return frozenset(_split(self.required_channels))

    @property
    def fanout_lease_seconds(self) -> int:
        # R-REAPER-7: a fan-out claim is released only after ten delivery leases.
        return 10 * self.lease_seconds

    @property
    def followup_sweep_interval(self) -> int:
        """Seconds between follow-up sweeps; 0 registers no timer."""
        if self.followup_sweep_seconds is not None:
            return self.followup_sweep_seconds
        return 0 if self.environment == "test" else DEFAULT_FOLLOWUP_SWEEP_SECONDS

    @property
    def is_production(self) -> bool:
        return self.environment == "production"


_ORIGIN = re.compile(
    r"https?://[A-Za-z0-9.\-]+(?::[0-9]{1,5})?/?|https?://\[[0-9A-Fa-f:.]+\](?::[0-9]{1,5})?/?"
)


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
