"""send()/asend() and POST /v1/events: validation order, dedupe, transactions."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import Engine, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

import herald
from herald.auth.service import create_api_key
from herald.db import schema as s
from herald.errors import (
    ActionUrlForbidden,
    AudienceInvalid,
    AudienceTooLarge,
    ChannelUnknown,
    HeraldError,
    SecretAudienceInvalid,
    SecretInVariables,
    SendOutsideTransaction,
    TemplateNotFound,
    VariablesInvalid,
)
from herald.kinds import Registry
from herald.sending.service import SendInput, asend, build_dedupe_key, send

ANNOUNCE = {"title": "Sports day moved", "message": "It is now on Friday."}
CLASS_7A = {"kind": "group", "groupIds": ["class-7a"]}


def announcement(tenant: str, **overrides: Any) -> SendInput:
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "kind": "announcement.posted",
        "audience": CLASS_7A,
        "variables": ANNOUNCE,
    }
    values.update(overrides)
    return SendInput(**values)


async def count_events(engine: AsyncEngine, tenant: str) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    select(func.count())
                    .select_from(s.notification_event)
                    .where(s.notification_event.c.tenant_id == tenant)
                )
            ).scalar_one()
        )


async def test_rollback_leaves_nothing(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SEND-3, R-SEND-2, R-SCHEMA-10, R-PLAT-1: the event commits or rolls back with the host's
    transaction, and send() writes only that one row."""
    async with engine.connect() as conn:
        tx = await conn.begin()
        result = await asend(conn, announcement(tenant), registry=registry)
        assert result is not None and result.created
        await tx.rollback()
    assert await count_events(engine, tenant) == 0

    async with engine.begin() as conn:
        await asend(conn, announcement(tenant), registry=registry)
    assert await count_events(engine, tenant) == 1
    # R-SEND-2: send() wrote the event and nothing else — no recipient, no delivery.
    async with engine.connect() as conn:
        for table in (s.notification_recipient, s.notification_delivery):
            assert (
                await conn.execute(
                    select(func.count()).select_from(table).where(table.c.tenant_id == tenant)
                )
            ).scalar_one() == 0


def test_sync_send_rolls_back_with_host(
    sync_engine: Engine, registry: Registry, tenant: str
) -> None:
    """R-SEND-1, R-SEND-3: the sync twin writes through the host's own Connection."""
    with sync_engine.connect() as conn:
        tx = conn.begin()
        result = send(conn, announcement(tenant), registry=registry)
        assert result is not None and result.created
        assert (
            conn.execute(
                select(func.count())
                .select_from(s.notification_event)
                .where(s.notification_event.c.tenant_id == tenant)
            ).scalar_one()
            == 1
        )
        tx.rollback()
    with sync_engine.begin() as conn:
        assert herald.send(conn, announcement(tenant), registry=registry) is not None
        again = herald.send(conn, announcement(tenant), registry=registry)
        assert again is not None and not again.created
    with sync_engine.connect() as conn:
        assert (
            conn.execute(
                select(func.count())
                .select_from(s.notification_event)
                .where(s.notification_event.c.tenant_id == tenant)
            ).scalar_one()
            == 1
        )


async def test_send_refuses_autocommit(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SEND-3 (R-PLAT "executor must be a transaction"): an autocommit connection is refused."""
    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        with pytest.raises(SendOutsideTransaction):
            await asend(auto, announcement(tenant), registry=registry)
    assert await count_events(engine, tenant) == 0


async def test_best_effort_keeps_host_write(
    engine: AsyncEngine, registry: Registry, tenant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """R-SEND-13, decision 8: a failing best-effort send is rolled back to its savepoint and logged;
    the host's business write still commits."""
    marker = f"pw-changed-{tenant}"
    async with engine.begin() as conn:
        await conn.execute(
            s.person.insert().values(tenant_id=tenant, external_id=marker, full_name="Host write")
        )
        with caplog.at_level(logging.ERROR, logger="herald.sending.service"):
            result = await asend(
                conn,
                SendInput(
                    tenant_id=tenant,
                    kind="auth.password_reset",
                    audience={"kind": "users", "userIds": [marker]},
                    variables={"token": "123456"},  # a secret: refused
                ),
                registry=registry,
                best_effort=True,
            )
        assert result is None
    async with engine.connect() as conn:
        people = (
            (
                await conn.execute(
                    select(s.person.c.external_id).where(s.person.c.tenant_id == tenant)
                )
            )
            .scalars()
            .all()
        )
    assert people == [marker]
    assert await count_events(engine, tenant) == 0
    assert (
        "auth.password_reset" in caplog.text and "NOTIFICATION_SECRET_IN_VARIABLES" in caplog.text
    )
    assert "123456" not in caplog.text


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        # Each case fails two or more steps; the earliest step's error wins (R-SEND-5).
        (
            {"kind": "no.such.kind", "channels": ["fax"], "action_url": "javascript:alert(1)"},
            TemplateNotFound,
        ),
        (
            {
                "channels": ["fax"],
                "audience": {"kind": "users", "userIds": [str(i) for i in range(501)]},
            },
            ChannelUnknown,
        ),
        (
            {
                "audience": {"kind": "users", "userIds": [str(i) for i in range(501)]},
                "action_url": "//evil.example",
            },
            AudienceTooLarge,
        ),
        (
            {"action_url": "http://example.com/x", "variables": {"title": "only"}},
            ActionUrlForbidden,
        ),
        ({"variables": {"title": "only"}}, VariablesInvalid),
    ],
)
async def test_validation_order(
    engine: AsyncEngine,
    registry: Registry,
    tenant: str,
    overrides: dict[str, Any],
    error: type[HeraldError],
) -> None:
    """R-SEND-4, R-SEND-5, R-SEND-6, R-SEND-7, R-SEND-8, R-SEND-11, R-SEND-12: validation runs in the
    fixed order, all before any write."""
    async with engine.begin() as conn:
        with pytest.raises(error):
            await asend(conn, announcement(tenant, **overrides), registry=registry)
    assert await count_events(engine, tenant) == 0


async def test_explicit_list_cap(engine: AsyncEngine, registry: Registry, tenant: str) -> None:
    """R-SEND-8: 500 explicit recipients are accepted, 501 rejected."""
    async with engine.begin() as conn:
        ok = await asend(
            conn,
            announcement(
                tenant, audience={"kind": "users", "userIds": [f"u{i}" for i in range(500)]}
            ),
            registry=registry,
        )
        assert ok is not None
        with pytest.raises(AudienceTooLarge):
            await asend(
                conn,
                announcement(
                    tenant, audience={"kind": "users", "userIds": [f"u{i}" for i in range(501)]}
                ),
                registry=registry,
            )


async def test_compound_caps_and_depth(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SEND-9, R-SEND-10: compound takes 1..10 members, none of them compound."""
    member = {"kind": "all_users"}
    async with engine.begin() as conn:
        for members, error in (([], AudienceTooLarge), ([member] * 11, AudienceTooLarge)):
            with pytest.raises(error):
                await asend(
                    conn,
                    announcement(tenant, audience={"kind": "compound", "any": members}),
                    registry=registry,
                )
        with pytest.raises(AudienceInvalid):
            await asend(
                conn,
                announcement(
                    tenant,
                    audience={"kind": "compound", "any": [{"kind": "compound", "any": [member]}]},
                ),
                registry=registry,
            )
        assert await asend(
            conn,
            announcement(tenant, audience={"kind": "compound", "any": [member] * 10}),
            registry=registry,
        )


async def test_secret_never_stored(engine: AsyncEngine, registry: Registry, tenant: str) -> None:
    """R-SECRET-1, R-SECRET-3, R-SECRET-16, R-SCHEMA-13: a secret is refused; only a secretRef is stored,
    and the table's CHECK is a backstop even for a writer that bypasses send()."""
    reset = {
        "tenant_id": tenant,
        "kind": "auth.password_reset",
        "audience": {"kind": "users", "userIds": ["u1"]},
    }
    async with engine.begin() as conn:
        with pytest.raises(SecretInVariables):
            await asend(conn, SendInput(**reset, variables={"token": "s3cret"}), registry=registry)
        with pytest.raises(VariablesInvalid):
            await asend(conn, SendInput(**reset), registry=registry)  # no secretRef
        ok = await asend(
            conn,
            SendInput(**reset, variables={"secretRef": "password_reset:0f2b1c9e"}),
            registry=registry,
        )
        assert ok is not None
    async with engine.connect() as conn:
        stored = (
            await conn.execute(
                select(s.notification_event.c.variables).where(
                    s.notification_event.c.tenant_id == tenant
                )
            )
        ).scalar_one()
        assert stored == {"secretRef": "password_reset:0f2b1c9e"}
        with pytest.raises(Exception, match="variables_no_secret"):
            await conn.execute(
                update(s.notification_event)
                .where(s.notification_event.c.tenant_id == tenant)
                .values(variables={"token": "leak"})
            )


async def test_collapse_dedupes_domain_facts(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-DEDUPE-2, R-DEDUPE-3, R-DEDUPE-7, R-DEDUPE-10: a repeat with the same facts is the same
    event; whitespace-only differences fold; a request id does not split a collapse kind."""
    async with engine.begin() as conn:
        first = await asend(conn, announcement(tenant), registry=registry)
        padded = await asend(
            conn,
            announcement(
                tenant,
                variables={"title": "Sports day moved ", "message": "It is now on  Friday."},
                request_id="r1",
            ),
            registry=registry,
        )
        other = await asend(
            conn, announcement(tenant, variables={**ANNOUNCE, "title": "Other"}), registry=registry
        )
    assert first and padded and other
    assert first.created and not padded.created and padded.id == first.id
    assert other.created and other.id != first.id


async def test_repeatable_folds_request_id(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-DEDUPE-1, R-DEDUPE-9, R-DEDUPE-11, R-DEDUPE-12, R-DEDUPE-13: a repeatable kind makes a new event
    per call unless the caller repeats its request id; reminder kinds collapse."""
    reminder = registry.get("attendance.reminder")
    assert reminder is not None and reminder.dedupe == "collapse"
    reset = {
        "tenant_id": tenant,
        "kind": "auth.password_reset",
        "audience": {"kind": "users", "userIds": ["u1"]},
        "variables": {"secretRef": "password_reset:abc"},
    }
    async with engine.begin() as conn:
        a = await asend(conn, SendInput(**reset), registry=registry)
        b = await asend(conn, SendInput(**reset), registry=registry)
        c = await asend(conn, SendInput(**reset, request_id="req-1"), registry=registry)
        d = await asend(conn, SendInput(**reset, request_id="req-1"), registry=registry)
    assert a and b and c and d
    assert len({a.id, b.id, c.id}) == 3 and all(r.created for r in (a, b, c))
    assert d.id == c.id and not d.created


def test_dedupe_key_shape(registry: Registry) -> None:
    """R-DEDUPE-6, R-DEDUPE-8: the key is a 64-character hash however long the material, and parts
    are separated so ("/ab", "c") and ("/a", "bc") differ."""
    kind = registry.get("auth.password_reset")
    assert kind is not None
    long_key = build_dedupe_key(
        kind, {"kind": "all_users"}, {"secretRef": "x:" + "y" * 5000}, "/" + "z" * 5000, None, "r"
    )
    assert len(long_key) == 64
    split_one = build_dedupe_key(kind, {"kind": "all_users"}, {}, "/ab", None, "c")
    split_two = build_dedupe_key(kind, {"kind": "all_users"}, {}, "/a", None, "bc")
    assert split_one != split_two


async def test_dedupe_hit_changes_nothing(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-DEDUPE-4, R-PLAT-2: the no-op conflict update leaves the claim and completion columns alone,
    so a retried business transaction never makes a second unit of fan-out work."""
    async with engine.begin() as conn:
        first = await asend(conn, announcement(tenant), registry=registry)
    assert first is not None
    claimed_at = datetime(2026, 1, 1, tzinfo=UTC)
    token = uuid.uuid4()
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_event)
            .where(s.notification_event.c.public_id == first.id)
            .values(fanout_claimed_at=claimed_at, fanout_claim_token=token, fanout_cursor=7)
        )
    async with engine.begin() as conn:
        again = await asend(conn, announcement(tenant), registry=registry)
    assert again is not None and again.id == first.id and not again.created
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(s.notification_event).where(s.notification_event.c.public_id == first.id)
            )
        ).one()
    assert (
        row.fanout_claimed_at,
        row.fanout_claim_token,
        row.fanout_cursor,
        row.fanout_completed_at,
    ) == (
        claimed_at,
        token,
        7,
        None,
    )


async def test_wakeup_is_transactional(
    engine: AsyncEngine, registry: Registry, tenant: str, database_url: str
) -> None:
    """R-PLAT-1 (decision 3): the pg_notify wake-up reaches listeners on commit and never on rollback."""
    import psycopg

    from herald.db.engine import libpq_url

    async with await psycopg.AsyncConnection.connect(
        libpq_url(database_url), autocommit=True
    ) as listener:
        await listener.execute("LISTEN herald_fanout")
        async with engine.connect() as conn:
            tx = await conn.begin()
            await asend(conn, announcement(tenant), registry=registry)
            await tx.rollback()
        rolled_back = [n async for n in listener.notifies(timeout=0.3)]
        async with engine.begin() as conn:
            await asend(conn, announcement(tenant), registry=registry)
        committed = [n async for n in listener.notifies(timeout=2.0, stop_after=1)]
    assert rolled_back == []
    assert len(committed) == 1


async def test_scheduled_event_occurs_when_due(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SCHEMA-15, R-RETENTION-8 groundwork: a scheduled event's occurred_at is its due time, so it
    sorts and ages from when it fires, not from when it was booked."""
    due = datetime.now(UTC) + timedelta(days=2)
    async with engine.begin() as conn:
        result = await asend(conn, announcement(tenant, scheduled_for=due), registry=registry)
    assert result is not None
    async with engine.connect() as conn:
        occurred = (
            await conn.execute(
                select(s.notification_event.c.occurred_at).where(
                    s.notification_event.c.public_id == result.id
                )
            )
        ).scalar_one()
    assert occurred == due


# --- HTTP ------------------------------------------------------------------------------------


async def api_key(engine: AsyncEngine, tenant: str, scopes: list[str]) -> dict[str, str]:
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=scopes)
    return {"Authorization": f"Bearer {key}"}


async def test_post_event_http(client: AsyncClient, engine: AsyncEngine, tenant: str) -> None:
    """R-SEND-1, R-DEDUPE-3: POST /v1/events answers 201 then 200 created=false for a folded repeat;
    GET reports the state; another tenant's key gets 404."""
    headers = await api_key(engine, tenant, ["events:write", "events:read"])
    body = {
        "kind": "announcement.posted",
        "audience": CLASS_7A,
        "channels": ["in_app", "email"],
        "variables": ANNOUNCE,
    }
    first = await client.post("/v1/events", json=body, headers=headers)
    assert first.status_code == 201, first.text
    assert first.json()["created"] is True
    again = await client.post("/v1/events", json=body, headers=headers)
    assert again.status_code == 200 and again.json() == {"id": first.json()["id"], "created": False}

    status = await client.get(f"/v1/events/{first.json()['id']}", headers=headers)
    assert status.status_code == 200
    assert status.json() == {
        "id": first.json()["id"],
        "kind": "announcement.posted",
        "state": "pending",
        "recipientCount": None,
        "deliveries": {},
    }
    other = await api_key(engine, f"{tenant}-other", ["*"])
    assert (await client.get(f"/v1/events/{first.json()['id']}", headers=other)).status_code == 404
    assert (await client.get("/v1/events/not-a-uuid", headers=headers)).status_code == 404


async def test_http_errors(client: AsyncClient, engine: AsyncEngine, tenant: str) -> None:
    """R-SEND-6, R-SEND-11: error bodies carry the code; no key is 401; a key without the scope is
    refused; a malformed body is 422; nothing is written by any of them."""
    body = {"kind": "announcement.posted", "audience": CLASS_7A, "variables": ANNOUNCE}
    assert (await client.post("/v1/events", json=body)).status_code == 401
    wrong = await api_key(engine, tenant, ["directory:write"])
    assert (await client.post("/v1/events", json=body, headers=wrong)).status_code == 403
    headers = await api_key(engine, tenant, ["events:write"])
    unknown = await client.post("/v1/events", json={**body, "kind": "nope"}, headers=headers)
    assert unknown.status_code == 400
    assert unknown.json()["error"]["code"] == "NOTIFICATION_TEMPLATE_NOT_FOUND"
    unsafe = await client.post(
        "/v1/events", json={**body, "actionUrl": "//evil.example"}, headers=headers
    )
    assert unsafe.status_code == 400
    assert unsafe.json()["error"]["code"] == "NOTIFICATION_ACTION_URL_SCHEME_FORBIDDEN"
    malformed = await client.post("/v1/events", json={**body, "surprise": 1}, headers=headers)
    assert malformed.status_code == 422
    assert malformed.json()["error"]["code"] == "REQUEST_MALFORMED"
    # A moment is an ISO 8601 string, as published; never a number read as seconds since 1970.
    for moment in (0, 1767225600, True):
        numeric = await client.post(
            "/v1/events", json={**body, "scheduledFor": moment}, headers=headers
        )
        assert numeric.status_code == 422, (moment, numeric.text)
        assert numeric.json()["error"]["code"] == "REQUEST_MALFORMED"
    assert await count_events(engine, tenant) == 0


async def test_idempotency_key_for_repeatable(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """R-DEDUPE-11: over HTTP the Idempotency-Key header is the request id a repeatable kind folds."""
    headers = await api_key(engine, tenant, ["events:write"])
    body = {
        "kind": "transport.delay",
        "audience": CLASS_7A,
        "variables": {"route": "Route 4", "minutes": 20},
    }
    a = await client.post("/v1/events", json=body, headers={**headers, "Idempotency-Key": "k1"})
    b = await client.post("/v1/events", json=body, headers={**headers, "Idempotency-Key": "k1"})
    c = await client.post("/v1/events", json=body, headers=headers)
    assert a.status_code == 201 and b.status_code == 200 and c.status_code == 201
    assert a.json()["id"] == b.json()["id"] != c.json()["id"]


async def test_secret_kinds_go_to_one_person_on_one_channel(
    engine: AsyncEngine, registry: Registry, tenant: str
) -> None:
    """R-SECRET-9, R-SECRET-14: a secret reference is read once, so a kind that carries one is refused
    unless it names one person and one channel — otherwise a second delivery would find the vault
    empty and the person would get one of two messages at random."""
    otp = {"tenant_id": tenant, "kind": "auth.otp", "variables": {"secretRef": "otp:abc"}}
    async with engine.begin() as conn:
        for audience, channels in (
            ({"kind": "users", "userIds": ["u1"]}, None),  # default channels: sms and email
            ({"kind": "users", "userIds": ["u1", "u2"]}, ["sms"]),
            ({"kind": "all_users"}, ["sms"]),
        ):
            with pytest.raises(SecretAudienceInvalid):
                await asend(
                    conn, SendInput(**otp, audience=audience, channels=channels), registry=registry
                )
        ok = await asend(
            conn,
            SendInput(**otp, audience={"kind": "users", "userIds": ["u1"]}, channels=["sms"]),
            registry=registry,
        )
        assert ok is not None and ok.created


async def test_nul_characters_are_refused_not_500(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """R-SEC-13: text PostgreSQL cannot store (a NUL) is the caller's mistake: 400 with a code, nothing
    written — in variables, audience ids and the Idempotency-Key alike."""
    headers = await api_key(engine, tenant, ["events:write"])
    base = {"kind": "announcement.posted", "audience": CLASS_7A, "variables": ANNOUNCE}
    cases = [
        {**base, "variables": {**ANNOUNCE, "title": "a\u0000b"}},
        {**base, "audience": {"kind": "users", "userIds": ["u\u00001"]}},
        {**base, "audience": {"kind": "group", "groupIds": ["class\u00007a"]}},
        {**base, "audience": {"kind": "role", "roles": ["guard\u0000ian"]}},
    ]
    for body in cases:
        answer = await client.post("/v1/events", json=body, headers=headers)
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["error"]["code"].startswith("NOTIFICATION_")
    assert await count_events(engine, tenant) == 0
