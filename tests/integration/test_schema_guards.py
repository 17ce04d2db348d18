"""The table constraints refuse what the requirements forbid, whoever the writer is."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald import vocabulary
from herald.db import migrate
from herald.db import schema as s
from herald.db.engine import libpq_url
from tests import seed
from tests.conftest import create_database, drop_database
from tests.plans import parent_name


async def event(conn: AsyncConnection, tenant: str, **values: Any) -> int:
    row = {
        "tenant_id": tenant,
        "kind": "announcement.posted",
        "category": "announcement",
        "priority": "normal",
        "audience": {"kind": "all_users"},
        "channels": ["in_app", "email"],
        "variables": {"title": "t", "message": "m"},
        "dedupe_key": uuid.uuid4().hex * 2,
        **values,
    }
    return int(
        (
            await conn.execute(
                insert(s.notification_event).values(**row).returning(s.notification_event.c.id)
            )
        ).scalar_one()
    )


async def recipient(conn: AsyncConnection, tenant: str, event_id: int) -> int:
    person = await seed.person(conn, tenant)
    return int(
        (
            await conn.execute(
                insert(s.notification_recipient)
                .values(
                    tenant_id=tenant,
                    event_id=event_id,
                    user_id=person.id,
                    user_public_id_snapshot=person.public_id,
                    occurred_at=seed.event_month(event_id),
                    variables={"name": "Aarati Shrestha"},
                )
                .returning(s.notification_recipient.c.id)
            )
        ).scalar_one()
    )


async def delivery(
    conn: AsyncConnection, tenant: str, event_id: int, recipient_id: int, **values: Any
) -> int:
    row = {
        "tenant_id": tenant,
        "event_id": event_id,
        "recipient_id": recipient_id,
        "channel": "email",
        "occurred_at": seed.recipient_month(recipient_id),
        **values,
    }
    return int(
        (
            await conn.execute(
                insert(s.notification_delivery)
                .values(**row)
                .returning(s.notification_delivery.c.id)
            )
        ).scalar_one()
    )


async def refused(engine: AsyncEngine, statement: Any) -> str:
    """Run `statement` in its own transaction; return the violated constraint's name."""
    with pytest.raises(IntegrityError) as caught:
        async with engine.begin() as conn:
            await conn.execute(statement)
    diag = getattr(caught.value.orig, "diag", None)
    # A partitioned table's unique keys are its months' indexes: named by the parent's.
    return parent_name(str(getattr(diag, "constraint_name", "") or caught.value))


async def test_vocabularies_name_what_the_requirements_name() -> None:
    """R-SCHEMA-5 (extended by decision 2), R-SCHEMA-6, R-SCHEMA-7, R-SCHEMA-8, R-SCHEMA-9: the lists
    hold the values the seed names, and no `created` status."""
    # Slack and Teams: issue 46's staff channels; WhatsApp, its guardians' channel.
    assert set(vocabulary.CHANNELS) == {
        "email",
        "sms",
        "push",
        "in_app",
        "telegram",
        "slack",
        "teams",
        "whatsapp",
    }
    assert {"queued", "delivered", "skipped_no_template"} <= set(vocabulary.DELIVERY_STATUSES)
    assert "created" not in vocabulary.DELIVERY_STATUSES
    assert "skipped_no_template" in vocabulary.SKIPPED_STATUSES
    assert {"compound", "all_users", "users"} <= set(vocabulary.AUDIENCE_KINDS)
    assert "replaced" in vocabulary.INVALIDATION_REASONS


async def test_event_row_guards(engine: AsyncEngine, tenant: str) -> None:
    """R-SCHEMA-47, R-SCHEMA-12, R-SCHEMA-13, R-SCHEMA-11, R-FANOUT-9: the audience kind, the category
    and the variables are checked on the row; completion and its count move together; claim and
    completion are separate columns."""
    e = s.notification_event
    async with engine.begin() as conn:
        event_id = await event(conn, tenant)
    assert "audience_kind" in await refused(
        engine, update(e).where(e.c.id == event_id).values(audience={"kind": "everyone"})
    )
    assert "category" in await refused(
        engine, update(e).where(e.c.id == event_id).values(category="marketing")
    )
    assert "variables_no_secret" in await refused(
        engine, update(e).where(e.c.id == event_id).values(variables={"otp": "1"})
    )
    assert "completion_pair" in await refused(
        engine,
        update(e)
        .where(e.c.id == event_id)
        .values(
            fanout_claimed_at=s.NOW, fanout_claim_token=uuid.uuid4(), fanout_completed_at=s.NOW
        ),
    )
    assert {
        "fanout_claimed_at",
        "fanout_completed_at",
        "kind",
        "scheduled_for",
        "cancelled_at",
    } <= set(e.c.keys())


async def test_delivery_row_guards(engine: AsyncEngine, tenant: str) -> None:
    """R-SCHEMA-22, R-SCHEMA-27, R-SCHEMA-48, R-SCHEMA-49, R-STATE-6, R-STATE-7: a lease without a claim,
    a skipped status without skipped_at, and a sent email without sent_at are refused; an in-app row
    is delivered with no sent_at."""
    d = s.notification_delivery
    async with engine.begin() as conn:
        event_id = await event(conn, tenant)
        rid = await recipient(conn, tenant, event_id)
        email = await delivery(conn, tenant, event_id, rid)
        await delivery(
            conn,
            tenant,
            event_id,
            rid,
            channel="in_app",
            status="delivered",
            rendered_title="t",
            rendered_body="b",
        )
    q = s.notification_delivery_queue
    async with engine.begin() as conn:
        await conn.execute(
            insert(q).values(
                delivery_id=email, tenant_id=tenant, channel="email", occurred_at=s.NOW
            )
        )
    assert "lease_pair" in await refused(
        engine, update(q).where(q.c.delivery_id == email).values(lease_expires_at=s.NOW)
    )
    assert "skipped_pair" in await refused(
        engine, update(d).where(d.c.id == email).values(status="skipped_preference")
    )
    assert "sent_at_when_sent" in await refused(
        engine, update(d).where(d.c.id == email).values(status="delivered")
    )
    assert {
        "public_id",
        "recipient_id",
        "channel",
        "provider_target_id",
        "replay_of_delivery_id",
        "status",
        "queued_at",
        "sent_at",
        "destination_hint",
        "rendered_title",
        "rendered_body",
        "provider_message_id",
    } <= set(d.c.keys())


async def test_delivery_uniques_and_replays(engine: AsyncEngine, tenant: str) -> None:
    """R-SCHEMA-24, R-SCHEMA-25, R-SCHEMA-26, R-SCHEMA-50, R-SCHEMA-16, R-SCHEMA-21: one row per
    (recipient, channel) or (recipient, channel, target); a replay row shares the keys of its original;
    one recipient row per (event, person)."""
    async with engine.begin() as conn:
        event_id = await event(conn, tenant)
        rid = await recipient(conn, tenant, event_id)
        original = await delivery(conn, tenant, event_id, rid)
        await delivery(conn, tenant, event_id, rid, channel="push", provider_target_id=7)
        await delivery(
            conn, tenant, event_id, rid, replay_of_delivery_id=original
        )  # a replay: accepted
        await delivery(
            conn,
            tenant,
            event_id,
            rid,
            channel="push",
            provider_target_id=7,
            replay_of_delivery_id=original,
        )
        snapshot = (
            await conn.execute(
                select(s.notification_recipient.c.user_public_id_snapshot).where(
                    s.notification_recipient.c.id == rid
                )
            )
        ).scalar_one()
    d = s.notification_delivery
    assert (
        await refused(
            engine,
            insert(d).values(
                tenant_id=tenant,
                event_id=event_id,
                recipient_id=rid,
                channel="email",
                occurred_at=seed.recipient_month(rid),
            ),
        )
        == "notification_delivery_single_target_key"
    )
    assert (
        await refused(
            engine,
            insert(d).values(
                tenant_id=tenant,
                event_id=event_id,
                recipient_id=rid,
                channel="push",
                provider_target_id=7,
                occurred_at=seed.recipient_month(rid),
            ),
        )
        == "notification_delivery_multi_target_key"
    )
    assert (
        await refused(
            engine,
            insert(s.notification_recipient).values(
                tenant_id=tenant,
                event_id=event_id,
                user_public_id_snapshot=snapshot,
                # The event's own (the key to the event admits no other): the same month.
                occurred_at=select(s.notification_event.c.occurred_at)
                .where(s.notification_event.c.id == event_id)
                .scalar_subquery(),
            ),
        )
        == "notification_recipient_event_user_key"
    )


async def test_dead_letter_holds_a_reference_only(engine: AsyncEngine, tenant: str) -> None:
    """R-SCHEMA-46, R-SCHEMA-51, R-SCHEMA-52: dead_letter has the columns the seed names and its
    payload_ref is an object of strings — a reference, never a payload, and no foreign key."""
    dl = s.dead_letter
    assert {
        "public_id",
        "queue_name",
        "job_name",
        "job_id",
        "payload_ref",
        "actor_id",
        "attempts",
        "last_error",
        "replayed_at",
        "replayed_by",
        "replay_job_id",
        "failed_at",
    } <= set(dl.c.keys())
    assert not dl.foreign_keys
    base = {
        "tenant_id": tenant,
        "queue_name": "notification.email",
        "job_name": "channel_send",
        "job_id": "x",
        "attempts": 5,
    }
    async with engine.begin() as conn:
        await conn.execute(
            insert(dl).values(
                **base,
                payload_ref={"notificationDeliveryPublicId": str(uuid.uuid4()), "channel": "email"},
            )
        )
    assert "payload_ref_strings" in await refused(
        engine, insert(dl).values(**base, payload_ref={"body": {"html": "<p>"}})
    )
    assert "payload_ref_strings" in await refused(
        engine, insert(dl).values(**base, payload_ref=["not", "an", "object"])
    )


async def test_stored_shapes(engine: AsyncEngine, tenant: str) -> None:
    """R-SCHEMA-54, R-SCHEMA-55, R-SCHEMA-56, R-SCHEMA-57, R-SCHEMA-14: the event stores the audience as
    a specification, the shared variables as an object and its kind; the recipient stores the
    per-recipient overlay."""
    from herald.kinds.sample import SAMPLE_REGISTRY
    from herald.sending.service import SendInput, asend

    spec = {
        "kind": "compound",
        "any": [
            {"kind": "group", "groupIds": ["class-7a"]},
            {"kind": "guardians_of_group", "groupIds": ["class-7a"]},
            {"kind": "all_users"},
        ],
    }
    async with engine.begin() as conn:
        result = await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience=spec,
                variables={"title": "Sports day moved", "message": "It is now on Friday."},
            ),
            registry=SAMPLE_REGISTRY,
        )
        assert result is not None
        row = (
            await conn.execute(
                select(s.notification_event).where(s.notification_event.c.public_id == result.id)
            )
        ).one()
    assert row.audience["kind"] == "compound" and len(row.audience["any"]) == 3
    assert row.variables == {"title": "Sports day moved", "message": "It is now on Friday."}
    assert row.kind == "announcement.posted"


@pytest.fixture
def fresh_database(server_url: str) -> Iterator[str]:
    name = f"herald_empty_{uuid.uuid4().hex[:8]}"
    url = create_database(server_url, name)
    migrate.upgrade(url)
    yield url
    drop_database(server_url, name)


def test_nothing_is_seeded(fresh_database: str) -> None:
    """R-SCHEMA-59, R-SCHEMA-40, R-RENDER-7, R-PREF-13: a migrated database holds no rows at all —
    no template copied from the registry, no preference row for anybody."""
    with psycopg.connect(libpq_url(fresh_database)) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'alembic_version'"
            )
        ]
        counts = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}  # type: ignore[index]
    assert tables and all(n == 0 for n in counts.values()), counts
