"""The SMS credit check: read the SMS provider's balance once a day and warn when it is low.

Aakash answers "Not enough balance." as a non-retryable failure, so an exhausted balance turns
every SMS (every OTP) dead at once. One balance call a day (R-CREDIT-1) turns that into a warning
days ahead (R-CREDIT-2): a WARN log line, a row in the operations feed (permission
NotificationFailure_READ) of the tenant HERALD_OPS_TENANT names — the SMS account belongs to the
deployment, not to one tenant — and an operational email to the support mailbox.

"Once a day" is a compare-and-set on maintenance_run keyed by the local date in
HERALD_CREDIT_CHECK_TIMEZONE (Asia/Kathmandu: a UTC key would roll over at 05:45 local,
R-CREDIT-6), so any number of workers make one call a day between them. The day is taken before
the call: a failed read is not retried until the next day, so a provider outage cannot turn the
check into a call every tick.

Quiet by design: nothing at all is logged when the SMS provider is unconfigured (R-CREDIT-3), and
nothing when it has no balance API, as a mock or Twilio (R-CREDIT-4). A failure is caught and
logged at error level and never fails the tick (R-CREDIT-5).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final
from zoneinfo import ZoneInfo

from sqlalchemy.ext.asyncio import AsyncEngine

from herald import feed
from herald.channels.base import Provider
from herald.config import Settings
from herald.errors import HeraldError
from herald.maintenance import opmail, queries

log = logging.getLogger(__name__)

TASK: Final = "sms_credit_check"
FEED_KIND: Final = "sms.credit_low"
FEED_PERMISSION: Final = "NotificationFailure_READ"

Balance = Callable[[], Awaitable[float | None]]


@dataclass(frozen=True)
class CreditReading:
    day_key: str
    balance: float
    threshold: int
    low: bool


def day_key(now: datetime, timezone: str) -> str:
    """The local calendar date of `now` in `timezone`, e.g. 2026-03-01 (R-CREDIT-6)."""
    if now.tzinfo is None:
        raise ValueError("now must carry a time zone")
    return now.astimezone(ZoneInfo(timezone)).date().isoformat()


def balance_reader(provider: Provider | None) -> Balance | None:
    """The provider's balance method, or None when there is nothing to read: no provider, an
    unconfigured one (R-CREDIT-3), a mock, or one without a credit API (R-CREDIT-4)."""
    if provider is None or provider.is_mock or not provider.is_configured():
        return None
    reader = getattr(provider, "balance", None)
    return reader if callable(reader) else None


async def check_sms_credit(
    engine: AsyncEngine,
    settings: Settings,
    provider: Provider | None,
    *,
    now: datetime | None = None,
) -> CreditReading | None:
    """Run the daily check if this call wins today's compare-and-set; never raises."""
    try:
        return await _check(engine, settings, provider, now or datetime.now(UTC))
    except Exception as exc:
        # R-CREDIT-5: the log line is the only channel this failure has.
        if isinstance(exc, HeraldError):
            log.error("SMS credit check failed: %s", exc.message)
        else:
            log.error("SMS credit check failed: %s", type(exc).__name__, exc_info=True)
        return None


async def _check(
    engine: AsyncEngine, settings: Settings, provider: Provider | None, now: datetime
) -> CreditReading | None:
    read_balance = balance_reader(provider)
    if read_balance is None or provider is None:
        return None  # quietly (R-CREDIT-3, R-CREDIT-4)
    key = day_key(now, settings.credit_check_timezone)
    async with engine.begin() as conn:
        if not await queries.claim_period(conn, TASK, key):
            return None  # another worker (or an earlier tick) has today's reading
    balance = await read_balance()  # the one HTTP call of the day, outside any transaction
    if balance is None:
        return None  # the provider has no balance to report (R-CREDIT-4)
    threshold = settings.sms_credit_threshold
    reading = CreditReading(day_key=key, balance=balance, threshold=threshold, low=False)
    if balance >= threshold:
        log.info("SMS credit: %s credits left on %s (threshold %d)", _n(balance), key, threshold)
        return reading
    log.warning(
        "SMS credit low: %s credits left on the %s account (threshold %d); top up before sends "
        "start failing",
        _n(balance),
        provider.name,
        threshold,
    )
    title = f"SMS credit low: {_n(balance)} credits left"
    async with engine.begin() as conn:
        await feed.publish(
            conn,
            tenant_id=settings.ops_tenant,
            kind=FEED_KIND,
            title=title,
            body=(
                f"The {provider.name} SMS account has {_n(balance)} credits left, below the "
                f"warning threshold of {threshold}. Top it up before messages start failing."
            ),
            permission_code=FEED_PERMISSION,
            occurred_at=now,
        )
        await opmail.enqueue_operational_email(
            conn,
            tenant_id=settings.ops_tenant,
            event_type=FEED_KIND,
            aggregate_type="sms_provider",
            aggregate_id=provider.name,
            subject=title,
            rows=[
                ("Provider", provider.name),
                ("Credits left", _n(balance)),
                ("Warning threshold", str(threshold)),
            ],
        )
    return CreditReading(day_key=key, balance=balance, threshold=threshold, low=True)


def _n(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"
