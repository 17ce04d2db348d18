"""`/v1/admin/kinds`: the registry's kinds as operators see them, and a tenant's escalation
delays (issue 45, docs/escalation.md): set, audited, versioned, reverted; bad input is a 422
with a code and nothing stored."""

from __future__ import annotations

from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.config import Settings
from herald.db import schema as s
from tests.integration.test_admin_history import operator_headers
from tests.integration.test_escalation import _people, _send, _steps

KINDS = "/v1/admin/kinds"
URGENT = f"{KINDS}/announcement.urgent/escalation"
READ, UPDATE, DELETE = (
    "NotificationTemplate_READ",
    "NotificationTemplate_UPDATE",
    "NotificationTemplate_DELETE",
)


def _plan(*steps: tuple[str, Any]) -> dict[str, Any]:
    return {"steps": [{"channel": c, "afterSeconds": d} for c, d in steps]}


async def _stored(engine: AsyncEngine, tenant: str) -> tuple[int, int, int]:
    o, v, a = (
        s.notification_escalation_override,
        s.notification_escalation_override_version,
        s.audit_record,
    )
    async with engine.connect() as conn:
        counts = []
        for table in (o, v):
            counts.append(
                (
                    await conn.execute(
                        select(func.count()).select_from(table).where(table.c.tenant_id == tenant)
                    )
                ).scalar_one()
            )
        audits = (
            await conn.execute(
                select(func.count())
                .select_from(a)
                .where(
                    a.c.tenant_id == tenant, a.c.entity_type == "notification_escalation_override"
                )
            )
        ).scalar_one()
    return counts[0], counts[1], audits


async def test_the_kinds_list_shows_channels_dedupe_digest_and_plan(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    headers = await operator_headers(engine, settings, tenant, [READ])
    answer = await client.get(KINDS, headers=headers, params={"limit": 100})
    assert answer.status_code == 200, answer.text
    kinds = {k["kind"]: k for k in answer.json()["items"]}
    urgent = kinds["announcement.urgent"]
    assert urgent["channels"] == ["in_app", "email", "sms"]
    assert urgent["dedupe"] == "repeatable"
    assert urgent["escalation"] == {
        "steps": [
            {"step": 1, "channel": "email", "afterSeconds": 1800, "defaultAfterSeconds": 1800},
            {"step": 2, "channel": "sms", "afterSeconds": 7200, "defaultAfterSeconds": 7200},
        ],
        "overridden": False,
        "version": None,
        "updatedAt": None,
        "updatedBy": None,
    }
    assert kinds["assignment.published"]["digest"] == {"windowSeconds": 3600, "channels": ["email"]}
    assert kinds["announcement.posted"]["escalation"] is None
    # Without the permission the list is empty, as /v1/admin/templates/kinds answers.
    nobody = await operator_headers(engine, settings, tenant, [])
    assert (await client.get(KINDS, headers=nobody)).json()["items"] == []


async def test_a_tenant_overrides_the_delays_audited_versioned_and_reverts(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    headers = await operator_headers(engine, settings, tenant, [READ, UPDATE, DELETE])
    answer = await client.put(URGENT, headers=headers, json=_plan(("email", 600), ("sms", 3600)))
    assert answer.status_code == 200, answer.text
    escalation = answer.json()["escalation"]
    assert [x["afterSeconds"] for x in escalation["steps"]] == [600, 3600]
    assert escalation["overridden"] and escalation["version"] == 1
    assert escalation["updatedBy"].startswith("person:")
    again = await client.put(URGENT, headers=headers, json=_plan(("email", 900), ("sms", 3600)))
    assert again.json()["escalation"]["version"] == 2
    assert await _stored(engine, tenant) == (1, 2, 2)

    # The next fan-out uses the tenant's delays.
    (person,) = await _people(engine, tenant)
    await _send(engine, tenant, [person])
    steps = await _steps(engine, tenant)
    first = (steps[0]["due_at"] - steps[0]["created_at"]).total_seconds()
    assert first == pytest.approx(900, abs=5)
    assert (steps[1]["due_at"] - steps[0]["due_at"]).total_seconds() == 3600

    listed = await client.get(KINDS, headers=headers, params={"limit": 100})
    [urgent] = [k for k in listed.json()["items"] if k["kind"] == "announcement.urgent"]
    assert urgent["escalation"]["overridden"] and urgent["escalation"]["version"] == 2

    reverted = await client.delete(URGENT, headers=headers)
    assert reverted.status_code == 200, reverted.text
    back = reverted.json()["escalation"]
    assert [x["afterSeconds"] for x in back["steps"]] == [1800, 7200]
    assert not back["overridden"] and back["version"] == 3
    assert await _stored(engine, tenant) == (1, 3, 3)
    gone = await client.delete(URGENT, headers=headers)
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "NOTIFICATION_ESCALATION_OVERRIDE_NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "code"),
    [
        (_plan(("email", 0), ("sms", 60)), "ESCALATION_DELAY_OUT_OF_RANGE"),
        (_plan(("email", 60), ("sms", 30 * 86_400 + 1)), "ESCALATION_DELAY_OUT_OF_RANGE"),
        (_plan(("email", 60), ("sms", -60)), "ESCALATION_STEP_BEFORE_PREDECESSOR"),
        (_plan(("email", 60), ("fax", 60)), "ESCALATION_UNKNOWN_CHANNEL"),
        (_plan(("email", 60), ("push", 60)), "ESCALATION_UNKNOWN_CHANNEL"),
        (_plan(("email", 60), ("email", 60)), "ESCALATION_CYCLE"),
        (_plan(("sms", 60), ("email", 60)), "ESCALATION_CHANNELS_FIXED"),
        (_plan(("email", 60)), "ESCALATION_CHANNELS_FIXED"),
        (_plan(("email", "60"), ("sms", 60)), "REQUEST_MALFORMED"),
        ({"steps": []}, "REQUEST_MALFORMED"),
    ],
)
async def test_bad_plans_are_422_with_a_code_and_nothing_stored(
    client: AsyncClient,
    engine: AsyncEngine,
    settings: Settings,
    tenant: str,
    body: dict[str, Any],
    code: str,
) -> None:
    headers = await operator_headers(engine, settings, tenant, [READ, UPDATE, DELETE])
    answer = await client.put(URGENT, headers=headers, json=body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == code
    assert await _stored(engine, tenant) == (0, 0, 0)


async def test_unknown_kinds_plans_and_permissions(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    headers = await operator_headers(engine, settings, tenant, [READ, UPDATE, DELETE])
    good = _plan(("email", 60), ("sms", 60))
    unknown = await client.put(f"{KINDS}/no.such/escalation", headers=headers, json=good)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (
        404,
        "NOTIFICATION_KIND_NOT_FOUND",
    )
    plain = await client.put(f"{KINDS}/announcement.posted/escalation", headers=headers, json=good)
    assert (plain.status_code, plain.json()["error"]["code"]) == (422, "ESCALATION_NOT_DECLARED")
    reader = await operator_headers(engine, settings, tenant, [READ])
    for answer in (
        await client.put(URGENT, headers=reader, json=good),
        await client.delete(URGENT, headers=reader),
    ):
        assert answer.status_code == 404  # never 403
    assert await _stored(engine, tenant) == (0, 0, 0)
