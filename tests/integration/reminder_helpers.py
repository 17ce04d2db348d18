"""Shared set-up of the reminder tests: a client with the flag on, operators, a valid body."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from httpx import ASGITransport, AsyncClient
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald import vocabulary
from herald.api.app import create_app
from herald.auth.service import create_api_key, sign_token
from herald.config import Settings
from herald.db import schema as s
from herald.kinds import Registry
from tests import seed

BASE = "/v1/admin/reminders"
REMINDER_PERMISSIONS = [p for p in vocabulary.PERMISSIONS if p.startswith("NotificationReminder_")]


def body(**changes: Any) -> dict[str, Any]:
    valid: dict[str, Any] = {
        "name": "Homework time",
        "kind": "reminder.notice",
        "variables": {"title": "Homework", "message": "Check the diary."},
        "audience": {"kind": "all_users"},
        "timezone": "Asia/Kathmandu",
        "localTime": "07:30",
        "weekdays": [1, 2, 3, 4, 5],
        "enabled": True,
    }
    valid.update(changes)
    return valid


@pytest.fixture
def reminder_settings(settings: Settings) -> Settings:
    return settings.model_copy(update={"feature_reminders": True})


@pytest.fixture
async def reminders_client(
    reminder_settings: Settings, engine: AsyncEngine, registry: Registry
) -> AsyncIterator[AsyncClient]:
    app = create_app(reminder_settings, engine, registry)
    async with AsyncClient(transport=ASGITransport(app=app), base_url="http://herald.test") as http:
        yield http


@dataclass(frozen=True)
class Operators:
    admin_key: dict[str, str]
    editor: dict[str, str]  # every NotificationReminder_* permission
    reader: dict[str, str]  # NotificationReminder_READ only
    clerk: dict[str, str]  # no reminder permission


def bearer(credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}"}


async def operators(engine: AsyncEngine, settings: Settings, tenant: str) -> Operators:
    async with engine.begin() as conn:
        ids = {}
        for code, permissions in (
            ("reminder-editor", REMINDER_PERMISSIONS),
            ("reminder-reader", ["NotificationReminder_READ"]),
            ("clerk", ["NotificationTemplate_READ"]),
        ):
            ids[code] = await seed.role(conn, tenant, code, "staff")
            await conn.execute(
                update(s.role).where(s.role.c.id == ids[code]).values(permissions=permissions)
            )
        await seed.person(conn, tenant, "editor", roles=[ids["reminder-editor"]])
        await seed.person(conn, tenant, "reader", roles=[ids["reminder-reader"]])
        await seed.person(conn, tenant, "clerk", roles=[ids["clerk"]])
        key = await create_api_key(conn, tenant_id=tenant, scopes=["admin"])

    def token(subject: str, role: str) -> dict[str, str]:
        return bearer(sign_token(settings, tenant_id=tenant, subject=subject, role=role))

    return Operators(
        admin_key=bearer(key),
        editor=token("editor", "reminder-editor"),
        reader=token("reader", "reminder-reader"),
        clerk=token("clerk", "clerk"),
    )


async def schedule_rows(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    r = s.reminder_schedule
    async with engine.connect() as conn:
        rows = await conn.execute(select(r).where(r.c.tenant_id == tenant).order_by(r.c.id))
        return [dict(row._mapping) for row in rows]
