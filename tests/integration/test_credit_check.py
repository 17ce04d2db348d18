"""The daily SMS credit check against a local server speaking Aakash's credit API."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.aakash import AakashSmsProvider
from herald.channels.mock import MockProvider
from herald.channels.twilio import TwilioSmsProvider
from herald.config import Settings
from herald.db import schema as s
from herald.maintenance import credit
from herald.maintenance.service import run_tick
from tests import seed
from tests.providers.servers import (
    AAKASH_CREDIT_PATH,
    AAKASH_TOKEN,
    AakashReply,
    aakash_server,
)

DAY = datetime(2031, 3, 1, 6, 0, tzinfo=UTC)  # 11:45 in Kathmandu


@pytest.fixture(autouse=True)
async def fresh_day_record(engine: AsyncEngine) -> None:
    """The credit check's day record is deployment-wide: each test starts without one."""
    async with engine.begin() as conn:
        await conn.execute(delete(s.maintenance_run).where(s.maintenance_run.c.task == credit.TASK))


@pytest.fixture
def aakash() -> Iterator[Any]:
    with aakash_server() as server:
        yield server


def credit_settings(settings: Settings, tenant: str, **overrides: Any) -> Settings:
    return settings.model_copy(update={"ops_tenant": tenant, **overrides})


@pytest.fixture
async def provider(aakash: Any) -> AsyncIterator[AakashSmsProvider]:
    instance = AakashSmsProvider(
        Settings(
            aakash_auth_token=AAKASH_TOKEN,
            aakash_base_url=f"{aakash.url}/sms/v3",
            provider_read_timeout_seconds=0.5,
        )
    )
    yield instance
    await instance.aclose()


def credit_calls(aakash: Any) -> int:
    return sum(1 for request in aakash.requests if request.path == AAKASH_CREDIT_PATH)


async def feed_rows(engine: AsyncEngine, tenant: str) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            await conn.execute(
                select(s.feed_notification).where(s.feed_notification.c.tenant_id == tenant)
            )
        )


async def operational_emails(engine: AsyncEngine, tenant: str) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            await conn.execute(
                select(s.operational_email).where(s.operational_email.c.tenant_id == tenant)
            )
        )


def herald_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("herald")]


# -- the day key -------------------------------------------------------------------------------


def test_the_day_key_is_the_kathmandu_date() -> None:
    """R-CREDIT-6: the key rolls over at midnight in Asia/Kathmandu (18:15 UTC), not at UTC
    midnight (05:45 local)."""
    tz = "Asia/Kathmandu"
    assert credit.day_key(datetime(2031, 1, 1, 18, 14, tzinfo=UTC), tz) == "2031-01-01"
    assert credit.day_key(datetime(2031, 1, 1, 18, 15, tzinfo=UTC), tz) == "2031-01-02"
    # Just after UTC midnight it is still the same Kathmandu day as just before it.
    assert credit.day_key(datetime(2031, 1, 2, 0, 1, tzinfo=UTC), tz) == "2031-01-02"
    assert Settings().credit_check_timezone == tz


async def test_two_checks_in_one_kathmandu_day_make_one_call(
    engine: AsyncEngine, settings: Settings, tenant: str, provider: AakashSmsProvider, aakash: Any
) -> None:
    """R-CREDIT-1, R-CREDIT-6: the balance is read once per Kathmandu day with one HTTP call,
    however many workers race for it. 17:00 and 19:00 UTC share a UTC date but not a local one
    (22:45 on 1 March, 00:45 on 2 March): two calls. 05:00 UTC next day is a new UTC date but
    still 2 March locally: no call."""
    config = credit_settings(settings, tenant)
    evening = datetime(2031, 3, 1, 17, 0, tzinfo=UTC)  # 22:45 local, 1 March
    late = datetime(2031, 3, 1, 19, 0, tzinfo=UTC)  # 00:45 local, 2 March
    later = datetime(2031, 3, 2, 5, 0, tzinfo=UTC)  # 10:45 local, 2 March

    first = await credit.check_sms_credit(engine, config, provider, now=evening)
    racing = await asyncio.gather(
        *(credit.check_sms_credit(engine, config, provider, now=late) for _ in range(4))
    )
    again = await credit.check_sms_credit(engine, config, provider, now=later)

    assert first is not None and first.day_key == "2031-03-01"
    assert [r.day_key for r in racing if r is not None] == ["2031-03-02"]
    assert again is None
    assert credit_calls(aakash) == 2


async def test_a_low_balance_warns_in_the_log_the_feed_and_the_support_mailbox(
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    provider: AakashSmsProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-CREDIT-2: below the threshold (1914 < 5000) a WARN line, one feed row for
    NotificationFailure_READ in the ops tenant and an operational email (R-OPMAIL-1)."""
    caplog.set_level(logging.INFO, logger="herald")
    reading = await credit.check_sms_credit(
        engine, credit_settings(settings, tenant, sms_credit_threshold=5000), provider, now=DAY
    )

    assert reading is not None and reading.low and reading.balance == 1914
    warnings = [r for r in herald_records(caplog) if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "1914" in warnings[0].getMessage()
    feed = await feed_rows(engine, tenant)
    assert [(f.kind, f.permission_code) for f in feed] == [
        ("sms.credit_low", "NotificationFailure_READ")
    ]
    assert "1914" in feed[0].title
    mails = await operational_emails(engine, tenant)
    assert [(m.event_type, m.aggregate_type, m.aggregate_id, m.status) for m in mails] == [
        ("sms.credit_low", "sms_provider", "aakash", "queued")
    ]
    assert "Credits left: 1914" in mails[0].body_text


async def test_a_healthy_balance_is_not_a_warning(
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    provider: AakashSmsProvider,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-CREDIT-2: at or above the threshold there is no warning, no feed row, no email."""
    caplog.set_level(logging.INFO, logger="herald")
    reading = await credit.check_sms_credit(
        engine, credit_settings(settings, tenant, sms_credit_threshold=500), provider, now=DAY
    )
    assert reading is not None and not reading.low
    assert [r for r in herald_records(caplog) if r.levelno >= logging.WARNING] == []
    assert await feed_rows(engine, tenant) == []
    assert await operational_emails(engine, tenant) == []


async def test_an_unconfigured_provider_is_silent(
    engine: AsyncEngine, settings: Settings, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R-CREDIT-3: no token, no call, no day taken and not one log line."""
    caplog.set_level(logging.DEBUG)
    unconfigured = AakashSmsProvider(Settings(aakash_auth_token=None))
    try:
        assert (
            await credit.check_sms_credit(
                engine, credit_settings(settings, tenant), unconfigured, now=DAY
            )
            is None
        )
        assert (
            await credit.check_sms_credit(engine, credit_settings(settings, tenant), None, now=DAY)
            is None
        )
    finally:
        await unconfigured.aclose()
    assert caplog.records == []
    async with engine.connect() as conn:
        taken = await conn.execute(
            select(func.count())
            .select_from(s.maintenance_run)
            .where(s.maintenance_run.c.task == credit.TASK)
        )
        assert taken.scalar_one() == 0


async def test_a_provider_without_a_credit_api_is_quiet(
    engine: AsyncEngine, settings: Settings, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R-CREDIT-4: the mock (no balance) and Twilio (balance None) end the check quietly."""
    caplog.set_level(logging.DEBUG, logger="herald")
    config = credit_settings(settings, tenant)
    mock = MockProvider("sms", Settings())
    twilio = TwilioSmsProvider(
        Settings(twilio_account_sid="AC1", twilio_auth_token="t", twilio_from="+15005550006")
    )
    try:
        assert twilio.is_configured()
        assert await credit.check_sms_credit(engine, config, mock, now=DAY) is None
        assert await credit.check_sms_credit(engine, config, twilio, now=DAY) is None
    finally:
        await twilio.aclose()
    assert herald_records(caplog) == []
    assert await feed_rows(engine, tenant) == []


async def test_a_failed_read_is_logged_at_error_and_the_tick_goes_on(
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    provider: AakashSmsProvider,
    aakash: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-CREDIT-5, R-OPS-5: a balance read failing (HTTP 500) is caught and logged at error
    level; the same tick still runs its other sweeps (here: push-token pruning) and reports no
    failed sweep."""
    aakash.reply_with(AakashReply(status=500, body=b"<html>oops</html>"))
    caplog.set_level(logging.INFO, logger="herald")
    async with engine.begin() as conn:
        person = await seed.person(conn, tenant)
        token_id = int(
            (
                await conn.execute(
                    insert(s.notification_push_token)
                    .values(
                        tenant_id=tenant,
                        person_id=person.id,
                        token="stale",
                        platform="ios",
                        is_active=False,
                        invalidated_at=func.now() - timedelta(days=90),
                        invalidation_reason="invalid",
                    )
                    .returning(s.notification_push_token.c.id)
                )
            ).scalar_one()
        )

    tick = await run_tick(
        engine,
        credit_settings(settings, tenant),
        backfill_channels=[],
        providers={"sms": provider},
    )

    assert tick.failures == []
    assert tick.credit is None
    assert credit_calls(aakash) == 1
    errors = [r for r in herald_records(caplog) if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "credit" in errors[0].getMessage()
    async with engine.connect() as conn:
        left = await conn.execute(
            select(s.notification_push_token.c.id).where(s.notification_push_token.c.id == token_id)
        )
        assert left.first() is None


async def test_a_raising_provider_cannot_fail_the_tick(
    engine: AsyncEngine, settings: Settings, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R-CREDIT-5: even an unexpected exception from the balance call is caught and logged at
    error level with its type; the tick completes."""

    class Exploding:
        channel = "sms"
        name = "exploding"
        is_mock = False

        def is_configured(self) -> bool:
            return True

        async def balance(self) -> float:
            raise RuntimeError("kaboom")

        async def send(self, message: object) -> object:
            raise AssertionError("not called")

        async def aclose(self) -> None:
            return None

    caplog.set_level(logging.INFO, logger="herald")
    tick = await run_tick(
        engine,
        credit_settings(settings, tenant),
        backfill_channels=[],
        providers={"sms": Exploding()},  # type: ignore[dict-item]
    )
    assert tick.failures == []
    errors = [r for r in herald_records(caplog) if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "RuntimeError" in errors[0].getMessage()
