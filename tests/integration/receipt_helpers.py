"""Shared set-up of the receipt tests: settings that take Twilio's signed status callbacks, a
signed callback, and the guardian whose SMS they are about."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from cryptography.fernet import Fernet
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import schema as s
from herald.receipts.service import twilio_signature
from tests import seed
from tests.providers.servers import TWILIO_TOKEN

TWILIO = "/v1/providers/twilio/status"
# Twilio signs over the URL it posts to, so Herald must be told the public one.
CALLBACK = "https://herald.example/v1/providers/twilio/status"
PHONE = "+9779841000001"


def receipt_settings(settings: Settings, tmp_path: Any, **update: Any) -> Settings:
    """Settings that verify Twilio's callbacks with TWILIO_TOKEN, with a vault key, a data
    directory of the test's own and loopback webhooks allowed; `update` adds the rest."""
    return settings.model_copy(
        update={
            "twilio_auth_token": TWILIO_TOKEN,
            "twilio_status_callback_url": CALLBACK,
            "vault_key": Fernet.generate_key().decode(),
            "data_dir": tmp_path,
            "webhook_allow_loopback": True,
            **update,
        }
    )


def signed(params: list[tuple[str, str]], token: str = TWILIO_TOKEN) -> dict[str, Any]:
    """The keyword arguments of a client.post of `params` as Twilio posts them, signed with
    `token`."""
    return {
        "content": urlencode(params),
        "headers": {
            "content-type": "application/x-www-form-urlencoded",
            "x-twilio-signature": twilio_signature(token, CALLBACK, params),
        },
    }


async def guardian_with_sms(engine: AsyncEngine, tenant: str, phone: str = PHONE) -> None:
    """A guardian (g0, of pupil s0 in class-7a) with `phone` who opted in to SMS announcements
    (SMS is off by default outside security)."""
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        pupil = await seed.person(conn, tenant, "s0")
        parent = await seed.person(conn, tenant, "g0")
        await conn.execute(update(s.person).where(s.person.c.id == parent.id).values(phone=phone))
        await seed.member(conn, tenant, group_id, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, parent.id)
        await conn.execute(
            s.notification_preference.insert().values(
                tenant_id=tenant,
                person_id=parent.id,
                category="announcement",
                channel="sms",
                enabled=True,
            )
        )
