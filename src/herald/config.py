"""Settings, read from the environment only (HERALD_*), validated and bounded at start-up."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from herald import vocabulary

DEFAULT_FOLLOWUP_SWEEP_SECONDS = 60


class Settings(BaseSettings):
    """Every value Herald reads from its environment."""

    model_config = SettingsConfigDict(env_prefix="HERALD_", extra="ignore")

    environment: str = "development"
    database_url: str | None = None
    data_dir: Path = Path(".herald")
    db_pool_size: int = Field(default=10, ge=1, le=200)
    redis_url: str | None = None
    # End-user and operator JWTs (DESIGN.md §5): exactly one key source, which pins the
    # algorithm — HS256 with the secret, RS256/ES256 with the PEM public key (its type decides),
    # or RS256/ES256 keys fetched from a JWKS URL (cached, refetched for an unknown `kid`).
    jwt_secret: str | None = None
    jwt_public_key: str | None = None
    jwt_jwks_url: str | None = None
    jwt_jwks_cache_seconds: int = Field(default=300, ge=10, le=86_400)
    # An unknown `kid` refetches the set at most this often (tokens with made-up kids must not
    # turn Herald into a flood of requests to the identity provider).
    jwt_jwks_refresh_cooldown_seconds: int = Field(default=30, ge=0, le=3600)
    # Checked when set: a token must then carry this `aud` / `iss`.
    jwt_audience: str | None = None
    jwt_issuer: str | None = None
    # Clock skew tolerated on `exp`, `nbf` and `iat`.
    jwt_leeway_seconds: int = Field(default=30, ge=0, le=300)
    kinds: str | None = None
    required_channels: str = ""

    lease_seconds: int = Field(default=60, ge=5, le=3600)
    max_attempts: int = Field(default=5, ge=1, le=100)
    retry_base_seconds: int = Field(default=30, ge=1, le=86_400)
    retry_max_seconds: int = Field(default=3600, ge=1, le=86_400)
    poll_interval_seconds: float = Field(default=1.0, gt=0, le=60)
    fanout_batch_size: int = Field(default=500, ge=1, le=10_000)
    backfill_max_age_hours: int = Field(default=72, ge=1, le=24 * 90)
    device_limit: int = Field(default=10, ge=1, le=100)
    vault_ttl_seconds: int = Field(default=900, ge=30, le=86_400)
    # Fernet key of the embedded vault (urlsafe base64, 32 bytes). Unset: a key file under
    # data_dir, created on first use. Either way the key never lives in the database.
    vault_key: str | None = None
    # Provider timeouts (R-PROVIDER-22, R-PROVIDER-23); the lease must outlast them (R-PLAT-14).
    provider_connect_timeout_seconds: float = Field(default=3.0, gt=0, le=30)
    provider_read_timeout_seconds: float = Field(default=10.0, gt=0, le=60)

    # Email (DESIGN.md §5.1).
    email_provider: Literal["smtp", "resend", "mock"] | None = None
    email_from: str = "Herald <no-reply@localhost>"
    support_mailbox: str | None = None
    smtp_host: str | None = None
    smtp_port: int = Field(default=587, ge=1, le=65_535)
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_starttls: bool = True
    resend_api_key: str | None = None
    resend_base_url: str = "https://api.resend.com"
    # Resend's webhook signing secret (whsec_…): delivery receipts at /v1/providers/resend/events
    # are verified with it; unset, that route answers 404.
    resend_webhook_secret: str | None = None

    # SMS.
    sms_provider: Literal["aakash", "twilio", "mock"] | None = None
    sms_default_region: str = "NP"
    aakash_auth_token: str | None = None
    aakash_base_url: str = "https://sms.aakashsms.com/sms/v3"
    twilio_account_sid: str | None = None
    twilio_auth_token: str | None = None
    twilio_from: str | None = None
    twilio_base_url: str = "https://api.twilio.com"
    # The public URL of /v1/providers/twilio/status as Twilio calls it (behind a proxy Herald
    # sees another): sent as each message's StatusCallback and used to check X-Twilio-Signature.
    twilio_status_callback_url: str | None = None

    # Push.
    push_provider: Literal["fcm", "mock"] | None = None
    fcm_service_account_file: Path | None = None
    fcm_base_url: str = "https://fcm.googleapis.com"
    fcm_token_url: str = "https://oauth2.googleapis.com/token"

    # Telegram.
    telegram_provider: Literal["telegram", "mock"] | None = None
    telegram_bot_token: str | None = None
    telegram_base_url: str = "https://api.telegram.org"
    telegram_rate_per_second: float = Field(default=25.0, gt=0, le=30)

    # Rate limits (R-SEC-14), in the `limits` notation ("100/second", "6000/minute") or "off";
    # shared by every process through Redis when HERALD_REDIS_URL is set, per process otherwise.
    # Sends (POST /v1/events, POST /v1/secrets) per API key and per tenant:
    rate_limit_send_per_key: str = "100/second"
    rate_limit_send_per_tenant: str = "300/second"
    # End-user routes (/v1/me/...) per person:
    rate_limit_per_person: str = "20/second"
    # GET /metrics: this bearer token, or an API key with the metrics:read scope.
    metrics_token: str | None = None

    # Retention (R-RETENTION-*): events, recipients and deliveries by `occurred_at`, invalidated
    # push tokens by `invalidated_at`, operations-feed rows by `occurred_at`. The events' window
    # must outlast the backfill window (R-OPS-6, checked below).
    retention_days: int = Field(default=180, ge=1, le=3650)
    push_token_retention_days: int = Field(default=30, ge=1, le=3650)
    feed_retention_days: int = Field(default=90, ge=1, le=3650)
    # Rows one retention statement deletes at most (R-RETENTION-5, R-RETENTION-6).
    retention_batch_size: int = Field(default=1000, ge=10, le=10_000)

    # SMS credit check (R-CREDIT-*): warn below this many credits, once per local day.
    sms_credit_threshold: int = Field(default=500, ge=0, le=100_000_000)
    credit_check_timezone: str = "Asia/Kathmandu"
    # The tenant whose operations feed carries deployment-wide warnings (the SMS credit is one
    # account for every tenant).
    ops_tenant: str = Field(default="system", min_length=1, max_length=200)

    # Operational email (R-OPMAIL-*, R-PLAT-9): its own retry budget, not the deliveries'.
    operational_email_max_attempts: int = Field(default=5, ge=1, le=100)

    # Throttle (issue 16): at most this many SMS per person per category within the window;
    # past it, SMS deliveries are skipped_throttled. 0: off. Security and account are exempt.
    throttle_sms_per_category: int = Field(default=0, ge=0, le=10_000)
    throttle_window_seconds: int = Field(default=86_400, ge=60, le=30 * 86_400)

    # Outbound webhooks to the host (issue 16). Endpoints must be https and resolve only to
    # public addresses (SSRF): private, loopback, link-local and metadata addresses are refused
    # at create time and again at every send, unless named here (comma-separated host names or
    # CIDR networks). `herald dev` allows loopback (http included) so a laptop can receive them.
    webhook_allow_loopback: bool = False
    webhook_allowed_hosts: str = ""
    # Attempts before a message is dead (its dead letter replayable); with the default backoff
    # (retry_base_seconds doubling up to webhook_retry_max_seconds) 15 attempts span about a day.
    webhook_max_attempts: int = Field(default=15, ge=1, le=100)
    webhook_retry_max_seconds: int = Field(default=3600, ge=1, le=86_400)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, le=60)

    # Scheduler and features of DESIGN.md §5.2 (off by default; `herald dev` turns them on).
    feature_reminders: bool = False
    feature_broadcasts: bool = False
    # The lease one of several `herald scheduler` processes holds to fire reminders; a killed
    # leader is replaced within two lease periods. The tick is how often the holder looks for
    # due work (and renews), so it must be well inside the lease (checked below).
    scheduler_lease_seconds: int = Field(default=15, ge=2, le=600)
    scheduler_tick_seconds: float = Field(default=1.0, ge=0.1, le=60)
    # A scheduler that was down fires the latest missed occurrence only if it is at most this
    # late; older ones are recorded as `missed`, never flooded out.
    reminder_max_lateness_minutes: int = Field(default=60, ge=1, le=10_080)
    # Follow-ups (DESIGN.md §5.2, R-FOLLOW-46..52): how often `herald scheduler` sweeps (0: no
    # timer, `sweep()` stays callable; unset: 60, or 0 when HERALD_ENVIRONMENT=test so a suite
    # drives sweep() itself, R-FOLLOW-48/54), the default grace before the notify and the
    # default delay from the notify to the reminder. Negative values refuse to start.
    followup_sweep_seconds: int | None = Field(default=None, ge=0, le=86_400)
    followup_grace_minutes: int = Field(default=15, ge=0, le=10_080)
    followup_reminder_delay_minutes: int = Field(default=60, ge=0, le=10_080)

    # Observability (issue 14; README "Operating Herald").
    # One JSON object a line, or text for a person; unset: json, except under `herald dev`.
    log_format: Literal["json", "text"] | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # Where every Herald process on this host keeps its counters and histograms (Prometheus
    # multiprocess mode), so any API process's /metrics reports all of them. Unset: <data_dir>/metrics.
    metrics_dir: Path | None = None
    # A worker or scheduler also serves its own /metrics on this port (a host with no API process).
    metrics_port: int | None = Field(default=None, ge=1, le=65_535)
    # Tracing is off unless an OTLP endpoint is set here or in OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT.
    otel_exporter_otlp_endpoint: str | None = None

    @field_validator("required_channels")
    @classmethod
    def _known_channels(cls, value: str) -> str:
        unknown = [c for c in _split(value) if c not in vocabulary.CHANNELS]
        if unknown:
            raise ValueError(f"unknown channel(s) in HERALD_REQUIRED_CHANNELS: {unknown}")
        return value

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

    @field_validator("credit_check_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ValueError(f"HERALD_CREDIT_CHECK_TIMEZONE: unknown time zone {value!r}") from None
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


def _split(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
