"""Aakash's word that a number cannot take SMS marks it undeliverable (issue 44).

Aakash has no delivery reports Herald reads and no numeric error codes; its send answer lists a
number it will not deliver to in `data.invalid` (status `aborted`). The real Aakash provider,
against the local Aakash server (tests/providers/servers.py): that answer kills the delivery and
marks the number, the next SMS is skipped without calling Aakash, and a directory update that
changes the number clears it. A refusal about something else (the balance) marks nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.aakash import AakashSmsProvider
from herald.config import Settings
from herald.directory import service as directory
from herald.directory.schemas import PersonInput
from herald.secrets.vault import Vault
from tests.integration.receipt_helpers import guardian_with_sms
from tests.integration.test_receipts_early import one_sms, sms_marks
from tests.providers.servers import (
    AAKASH_NOT_ENOUGH_BALANCE,
    AAKASH_TOKEN,
    AakashReply,
    aakash_invalid_number,
    aakash_server,
)


@pytest.fixture
def aakash() -> Any:
    with aakash_server() as server:
        yield server


@pytest.fixture
def settings(settings: Settings, aakash: Any, tmp_path: Any) -> Settings:
    return settings.model_copy(
        update={
            "aakash_auth_token": AAKASH_TOKEN,
            "aakash_base_url": aakash.url + "/sms/v3",
            "vault_key": Fernet.generate_key().decode(),
            "data_dir": tmp_path,
        }
    )


@pytest.fixture
async def provider(settings: Settings) -> AsyncIterator[AakashSmsProvider]:
    instance = AakashSmsProvider(settings)
    yield instance
    await instance.aclose()


def sends(aakash: Any) -> list[str]:
    return [r.field("to") for r in aakash.requests if r.path.endswith("/send")]


async def test_an_aakash_invalid_number_is_marked_until_it_changes(
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    aakash: Any,
    provider: AakashSmsProvider,
) -> None:
    """Issue 44: data.invalid → dead with SMS_INVALID_NUMBER (aakash:invalid_number) and the
    number marked (only its hash); the next SMS is skipped_no_destination with
    ADDRESS_UNDELIVERABLE and Aakash is not called; after the directory stores another number the
    SMS is sent to it."""
    await guardian_with_sms(engine, tenant)
    aakash.reply_with(AakashReply(body=aakash_invalid_number))
    refused = await one_sms(engine, tenant, provider, vault, settings)
    assert refused["status"] == "dead"
    assert refused["last_error"] == "SMS_INVALID_NUMBER (aakash:invalid_number)"
    assert await sms_marks(engine, tenant) == ["SMS_INVALID_NUMBER (aakash:invalid_number)"]
    assert sends(aakash) == ["9841000001"]

    skipped = await one_sms(engine, tenant, provider, vault, settings)
    assert skipped["status"] == "skipped_no_destination"
    assert skipped["last_error"] == "ADDRESS_UNDELIVERABLE"
    assert sends(aakash) == ["9841000001"]

    async with engine.begin() as conn:
        await directory.upsert_person(
            conn, tenant, "g0", PersonInput(full_name="g0", phone="+9779841000002")
        )
    sent = await one_sms(engine, tenant, provider, vault, settings)
    assert sent["status"] == "sent"
    assert sends(aakash) == ["9841000001", "9841000002"]


async def test_an_aakash_refusal_about_the_account_marks_nothing(
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    vault: Vault,
    aakash: Any,
    provider: AakashSmsProvider,
) -> None:
    """Issue 44: "not enough balance" is about the account, not the number: dead, no mark, and
    the next SMS to the number is sent."""
    await guardian_with_sms(engine, tenant)
    aakash.reply_with(AakashReply(body=AAKASH_NOT_ENOUGH_BALANCE))
    refused = await one_sms(engine, tenant, provider, vault, settings)
    assert refused["status"] == "dead" and refused["last_error"].startswith(
        "SMS_INSUFFICIENT_BALANCE"
    )
    assert await sms_marks(engine, tenant) == []
    assert (await one_sms(engine, tenant, provider, vault, settings))["status"] == "sent"
