"""Erasure: POST /v1/people/{externalId}/erase hard-deletes a person and leaves their
notification records with an orphaned id and nothing personal."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import func, insert, select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.db import schema as s
from herald.directory import service as directory
from herald.errors import PersonNotFound
from tests import seed
from tests.integration.test_directory import Headers, api_key
from tests.integration.test_retention import delivery, event

NAME = "Aarav Sharma"
HINT = "a●●●@example.com"


async def person_with_history(
    engine: AsyncEngine, tenant: str, external_id: str
) -> tuple[seed.Person, list[int], list[int]]:
    """A person with two notifications (recipient rows carrying their name, deliveries carrying
    a hint and a rendering), plus roles, a group, a guardianship, preferences and a push token."""
    async with engine.begin() as conn:
        role_id = await seed.role(conn, tenant, f"guardian-{external_id}", "guardian")
        who = await seed.person(
            conn, tenant, external_id, full_name=NAME, email=f"{external_id}@example.com"
        )
        await conn.execute(
            insert(s.person_role).values(tenant_id=tenant, person_id=who.id, role_id=role_id)
        )
        group_id = await seed.group(conn, tenant, f"class-{external_id}")
        await seed.member(conn, tenant, group_id, who.id, "student")
        pupil = await seed.person(conn, tenant)
        await seed.guardian(conn, tenant, pupil.id, who.id)
        await seed.push_token(conn, tenant, who.id, f"token-{external_id}")
        await conn.execute(
            insert(s.notification_preference_set).values(
                tenant_id=tenant, person_id=who.id, version=1
            )
        )
        await conn.execute(
            insert(s.notification_channel_preference).values(
                tenant_id=tenant, person_id=who.id, channel="sms", enabled=False
            )
        )
        recipient_ids: list[int] = []
        delivery_ids: list[int] = []
        for _ in range(2):
            event_id = await event(conn, tenant, age_days=1)
            rid = int(
                (
                    await conn.execute(
                        insert(s.notification_recipient)
                        .values(
                            tenant_id=tenant,
                            event_id=event_id,
                            user_id=who.id,
                            user_public_id_snapshot=who.public_id,
                            variables={"name": NAME},
                            occurred_at=seed.event_month(event_id),
                        )
                        .returning(s.notification_recipient.c.id)
                    )
                ).scalar_one()
            )
            recipient_ids.append(rid)
            for channel, status in (("in_app", "delivered"), ("email", "sent"), ("sms", "queued")):
                made = await delivery(conn, tenant, event_id, rid, channel=channel, status=status)
                await conn.execute(
                    s.notification_delivery.update()
                    .where(s.notification_delivery.c.id == made.id)
                    .values(
                        user_id=who.id,  # as the fan-out writes it
                        destination_hint=HINT,
                        rendered_title=f"Report card for {NAME}",
                        rendered_body=f"Dear parent, {NAME}'s report card is ready.",
                    )
                )
                delivery_ids.append(made.id)
    return who, recipient_ids, delivery_ids


async def rows(engine: AsyncEngine, table: Any, column: Any, values: list[int]) -> list[Any]:
    async with engine.connect() as conn:
        return list(await conn.execute(select(table).where(column.in_(values)).order_by(column)))


async def count_for(engine: AsyncEngine, table: Any, column: Any, value: object) -> int:
    async with engine.connect() as conn:
        return int(
            (
                await conn.execute(select(func.count()).select_from(table).where(column == value))
            ).scalar_one()
        )


async def test_erasure_keeps_the_record_and_nothing_personal(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-ERASE-1, R-ERASE-2, R-ERASE-3: the person is gone; their recipient rows stay with user_id
    NULL and the uuid snapshot intact; every delivery beneath them has no destination hint, no
    rendering and no person id left, the recipient rows no variables; the kind and the timestamps remain."""
    who, recipient_ids, delivery_ids = await person_with_history(engine, tenant, "g-1")
    other, _, other_deliveries = await person_with_history(engine, tenant, "g-2")

    answer = await client.post("/v1/people/g-1/erase", headers=auth)

    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "id": str(who.public_id),
        "recipientsKept": 2,
        "deliveriesScrubbed": 6,
        "eventsScrubbed": 0,
    }
    assert await count_for(engine, s.person, s.person.c.id, who.id) == 0
    kept = await rows(
        engine, s.notification_recipient, s.notification_recipient.c.id, recipient_ids
    )
    assert [(r.user_id, r.user_public_id_snapshot, r.variables) for r in kept] == [
        (None, who.public_id, {}),
        (None, who.public_id, {}),
    ]
    assert all(r.occurred_at is not None and r.created_at is not None for r in kept)
    scrubbed = await rows(
        engine, s.notification_delivery, s.notification_delivery.c.id, delivery_ids
    )
    assert len(scrubbed) == 6
    for row in scrubbed:
        assert (row.destination_hint, row.rendered_title, row.rendered_body) == (None, None, None)
        assert row.user_id is None  # the person's copy on the delivery goes with the recipient's
        assert NAME not in repr(dict(row._mapping))
    for table in (s.notification_event,):
        async with engine.connect() as conn:
            kinds = set(
                (
                    await conn.execute(
                        select(table.c.kind).where(
                            table.c.id.in_(
                                select(s.notification_recipient.c.event_id).where(
                                    s.notification_recipient.c.id.in_(recipient_ids)
                                )
                            )
                        )
                    )
                ).scalars()
            )
        assert kinds == {"announcement.posted"}
    # What hung off the person went with them.
    for table, column in (
        (s.person_role, s.person_role.c.person_id),
        (s.group_membership, s.group_membership.c.person_id),
        (s.guardianship, s.guardianship.c.guardian_id),
        (s.notification_push_token, s.notification_push_token.c.person_id),
        (s.notification_preference_set, s.notification_preference_set.c.person_id),
        (s.notification_channel_preference, s.notification_channel_preference.c.person_id),
    ):
        assert await count_for(engine, table, column, who.id) == 0, table.name
    # Somebody else's history is untouched.
    untouched = await rows(
        engine, s.notification_delivery, s.notification_delivery.c.id, other_deliveries
    )
    assert {(r.destination_hint, r.rendered_title is not None) for r in untouched} == {(HINT, True)}
    assert {r.user_id for r in untouched} == {other.id}
    assert await count_for(engine, s.person, s.person.c.id, other.id) == 1


async def test_erasure_is_audited_without_personal_data(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-ERASE-3, R-ADMIN-6: the erasure leaves an audit record naming the orphaned uuid and the
    counts, never the name or the address."""
    who, _, _ = await person_with_history(engine, tenant, "g-1")
    assert (await client.post("/v1/people/g-1/erase", headers=auth)).status_code == 200
    async with engine.connect() as conn:
        records = list(
            await conn.execute(
                select(s.audit_record).where(
                    s.audit_record.c.tenant_id == tenant, s.audit_record.c.action == "erase"
                )
            )
        )
    assert [(r.entity_type, r.entity_id, r.actor_kind) for r in records] == [
        ("person", str(who.public_id), "api_key")
    ]
    assert records[0].changes == {
        "recipientsKept": 2,
        "deliveriesScrubbed": 6,
        "eventsScrubbed": 0,
    }
    assert NAME not in repr(records[0]._mapping) and "g-1@example.com" not in repr(
        records[0]._mapping
    )


async def test_erasure_is_one_transaction(engine: AsyncEngine, tenant: str) -> None:
    """R-ERASE-2: the scrub runs in the erasure's own transaction: rolled back, nothing is
    scrubbed and the person is still there."""
    who, recipient_ids, delivery_ids = await person_with_history(engine, tenant, "g-1")

    class Abort(Exception):
        pass

    with pytest.raises(Abort):
        async with engine.begin() as conn:
            erased = await directory.erase_person(conn, tenant, "g-1")
            assert erased.deliveries_scrubbed == 6
            raise Abort

    assert await count_for(engine, s.person, s.person.c.id, who.id) == 1
    intact = await rows(engine, s.notification_delivery, s.notification_delivery.c.id, delivery_ids)
    assert {r.destination_hint for r in intact} == {HINT}
    kept = await rows(
        engine, s.notification_recipient, s.notification_recipient.c.id, recipient_ids
    )
    assert {r.user_id for r in kept} == {who.id}


async def test_a_soft_deleted_person_can_be_erased(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-ERASE-1: erasure also takes a person the host had already soft-deleted."""
    who, recipient_ids, _ = await person_with_history(engine, tenant, "g-1")
    assert (await client.delete("/v1/people/g-1", headers=auth)).status_code == 204
    assert (await client.post("/v1/people/g-1/erase", headers=auth)).status_code == 200
    assert await count_for(engine, s.person, s.person.c.id, who.id) == 0
    kept = await rows(
        engine, s.notification_recipient, s.notification_recipient.c.id, recipient_ids
    )
    assert {r.user_id for r in kept} == {None}


async def test_unknown_or_foreign_person_is_404(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-ERASE-1: an unknown external id, or another tenant's person, is 404 PERSON_NOT_FOUND and
    nothing is erased."""
    other_tenant = f"t-{uuid.uuid4().hex[:12]}"
    foreign, _, _ = await person_with_history(engine, other_tenant, "g-1")

    for path in ("/v1/people/nobody/erase", "/v1/people/g-1/erase"):
        answer = await client.post(path, headers=auth)
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] == "PERSON_NOT_FOUND"
    assert await count_for(engine, s.person, s.person.c.id, foreign.id) == 1
    with pytest.raises(PersonNotFound):
        async with engine.begin() as conn:
            await directory.erase_person(conn, tenant, "nobody")


async def test_erasure_needs_the_directory_scope(
    client: AsyncClient, engine: AsyncEngine, tenant: str
) -> None:
    """R-SEC-2: a key without directory:write cannot erase anybody."""
    who, _, _ = await person_with_history(engine, tenant, "g-1")
    events_key = await api_key(engine, tenant, ["events:write"])
    answer = await client.post("/v1/people/g-1/erase", headers=events_key)
    assert answer.status_code == 403
    unauthenticated = await client.post("/v1/people/g-1/erase")
    assert unauthenticated.status_code == 401
    assert await count_for(engine, s.person, s.person.c.id, who.id) == 1


async def test_erasure_scrubs_variables_of_events_addressed_to_them_alone(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-ERASE-3: the variables of an event whose audience was this person alone (`users` of
    just them, repeated or inside a compound) are emptied; events others received too — a users
    list with someone else, a group, their guardians — keep their variables, which are the record
    of what those others were told; another tenant's events naming the same external id are
    untouched. The answer and the audit say how many events were scrubbed."""
    async with engine.begin() as conn:
        await seed.person(conn, tenant, "ana", full_name=NAME)
        await seed.person(conn, tenant, "bo")
        await seed.person(conn, f"{tenant}-b", "ana", full_name=NAME)

    mine = [
        {"kind": "users", "userIds": ["ana"]},
        {"kind": "users", "userIds": ["ana", "ana"]},
        {"kind": "compound", "any": [{"kind": "users", "userIds": ["ana"]}]},
    ]
    shared = [
        {"kind": "users", "userIds": ["ana", "bo"]},
        {"kind": "group", "groupIds": ["ana"]},
        {"kind": "guardians_of_users", "userIds": ["ana"]},
        {"kind": "compound", "any": [{"kind": "users", "userIds": ["ana"]}, {"kind": "all_users"}]},
    ]
    variables = {"title": f"Report for {NAME}", "message": f"{NAME} passed."}
    ids: dict[str, list[int]] = {"mine": [], "shared": [], "foreign": []}
    async with engine.begin() as conn:
        for group, audiences, owner in (
            ("mine", mine, tenant),
            ("shared", shared, tenant),
            ("foreign", mine[:1], f"{tenant}-b"),
        ):
            for audience in audiences:
                event_id = await event(conn, owner, age_days=1)
                await conn.execute(
                    s.notification_event.update()
                    .where(s.notification_event.c.id == event_id)
                    .values(audience=audience, variables=variables)
                )
                ids[group].append(event_id)

    answer = await client.post("/v1/people/ana/erase", headers=auth)

    assert answer.status_code == 200, answer.text
    assert answer.json()["eventsScrubbed"] == len(mine)
    for group, expected in (("mine", {}), ("shared", variables), ("foreign", variables)):
        found = await rows(engine, s.notification_event, s.notification_event.c.id, ids[group])
        assert [r.variables for r in found] == [expected] * len(ids[group]), group


async def test_an_erasure_chosen_to_break_a_deadlock_is_run_again(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """A worker recording an outcome holds a delivery row of the person and then wants a row the
    erasure holds: PostgreSQL breaks the cycle by rolling one of them back. When it is the
    erasure, the erasure runs again once the other has finished, and answers 200 — not the 503
    DATABASE_UNAVAILABLE a deadlock used to become.

    Staged with a second connection in the worker's place: it locks one of the person's
    deliveries, the erasure (having locked the person) waits for that row, then the connection
    asks for the person's row. Its deadlock_timeout is long, so the erasure's backend, at the
    server's default of one second, is the one that finds the cycle and is rolled back."""
    who, _, delivery_ids = await person_with_history(engine, tenant, "g-1")
    async with engine.connect() as other:
        await other.execute(text("SET deadlock_timeout = '20s'"))
        await other.execute(
            s.notification_delivery.update()
            .where(s.notification_delivery.c.id == delivery_ids[0])
            .values(last_error=None)
        )
        erasure = asyncio.create_task(client.post("/v1/people/g-1/erase", headers=auth))
        await asyncio.sleep(0.5)  # the erasure holds the person and waits for the delivery
        assert not erasure.done()
        await other.execute(select(s.person.c.id).where(s.person.c.id == who.id).with_for_update())
        await other.commit()
        answer = await erasure
    assert answer.status_code == 200, answer.text
    assert await count_for(engine, s.person, s.person.c.id, who.id) == 0
