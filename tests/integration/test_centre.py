"""The consumer notification centre over HTTP, on rows seeded directly into PostgreSQL.

Each test builds its own tenant's directory and inbox with SQLAlchemy Core, signs end-user tokens
as a host would, and reads the centre through the ASGI app.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import delete, func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from herald.auth.service import Actor, sign_token
from herald.centre import queries
from herald.config import Settings
from herald.db import schema as s
from herald.db import tenancy
from tests import seed as seed_rows
from tests.plans import by_parent

BASE = "/v1/me/notifications"


@dataclass(frozen=True)
class Item:
    """A seeded notification: the recipient row, as the centre addresses it."""

    recipient_id: int
    public_id: uuid.UUID
    event_id: int
    occurred_at: datetime

    @property
    def id(self) -> str:
        return str(self.public_id)


@dataclass
class Seed:
    engine: AsyncEngine
    tenant: str

    async def role(self, code: str, scope_kind: str) -> int:
        async with self.engine.begin() as conn:
            return int(
                (
                    await conn.execute(
                        insert(s.role)
                        .values(tenant_id=self.tenant, code=code, name=code, scope_kind=scope_kind)
                        .returning(s.role.c.id)
                    )
                ).scalar_one()
            )

    async def person(self, external_id: str, roles: Sequence[int] = ()) -> int:
        async with self.engine.begin() as conn:
            person_id = int(
                (
                    await conn.execute(
                        insert(s.person)
                        .values(tenant_id=self.tenant, external_id=external_id)
                        .returning(s.person.c.id)
                    )
                ).scalar_one()
            )
            for role_id in roles:
                await conn.execute(
                    insert(s.person_role).values(
                        tenant_id=self.tenant, person_id=person_id, role_id=role_id
                    )
                )
        return person_id

    async def notify(
        self,
        person_id: int,
        *,
        audience_role_id: int | None = None,
        in_app: str | None = "delivered",
        others: Sequence[tuple[str, str]] = (),
        title: str | None = "Sports day moved",
        body: str | None = "It is now on Friday.",
        occurred_at: datetime | None = None,
        kind: str = "announcement.posted",
        category: str = "announcement",
        priority: str = "normal",
        action_url: str | None = None,
    ) -> Item:
        """One event with one recipient; `in_app` is the in-app delivery's status (None: none),
        `others` the (channel, status) of further deliveries."""
        async with self.engine.begin() as conn:
            item = await self._notify(
                conn,
                person_id,
                audience_role_id=audience_role_id,
                occurred_at=occurred_at,
                kind=kind,
                category=category,
                priority=priority,
                action_url=action_url,
            )
            if in_app is not None:
                await delivery(conn, self.tenant, item, "in_app", in_app, title=title, body=body)
            for channel, status in others:
                await delivery(conn, self.tenant, item, channel, status, title=title, body=body)
        return item

    async def notify_many(self, person_id: int, count: int) -> list[Item]:
        """`count` delivered in-app notifications in one transaction: they share now()."""
        async with self.engine.begin() as conn:
            items = []
            for n in range(count):
                item = await self._notify(conn, person_id)
                await delivery(conn, self.tenant, item, "in_app", "delivered", title=f"same {n}")
                items.append(item)
        return items

    async def _notify(
        self,
        conn: AsyncConnection,
        person_id: int,
        *,
        audience_role_id: int | None = None,
        occurred_at: datetime | None = None,
        kind: str = "announcement.posted",
        category: str = "announcement",
        priority: str = "normal",
        action_url: str | None = None,
    ) -> Item:
        event_values: dict[str, Any] = {
            "tenant_id": self.tenant,
            "kind": kind,
            "category": category,
            "priority": priority,
            "audience": {"kind": "users", "userIds": ["x"]},
            "channels": ["in_app", "email"],
            "action_url": action_url,
            "dedupe_key": uuid.uuid4().hex * 2,
        }
        if occurred_at is not None:
            event_values["occurred_at"] = occurred_at
        event = (
            await conn.execute(
                insert(s.notification_event)
                .values(**event_values)
                .returning(s.notification_event.c.id, s.notification_event.c.occurred_at)
            )
        ).one()
        person_public_id = (
            await conn.execute(select(s.person.c.public_id).where(s.person.c.id == person_id))
        ).scalar_one()
        recipient = (
            await conn.execute(
                insert(s.notification_recipient)
                .values(
                    tenant_id=self.tenant,
                    event_id=event.id,
                    user_id=person_id,
                    user_public_id_snapshot=person_public_id,
                    audience_role_id=audience_role_id,
                    occurred_at=event.occurred_at,
                )
                .returning(s.notification_recipient.c.id, s.notification_recipient.c.public_id)
            )
        ).one()
        return Item(recipient.id, recipient.public_id, event.id, event.occurred_at)

    async def replay(self, item: Item, *, title: str, body: str) -> None:
        """A second, newer delivered in-app row that replays the first."""
        async with self.engine.begin() as conn:
            d = s.notification_delivery
            original = (
                await conn.execute(
                    select(d.c.id).where(
                        d.c.recipient_id == item.recipient_id, d.c.channel == "in_app"
                    )
                )
            ).scalar_one()
            await delivery(
                conn,
                self.tenant,
                item,
                "in_app",
                "delivered",
                title=title,
                body=body,
                replay_of=original,
            )


async def delivery(
    conn: AsyncConnection,
    tenant: str,
    item: Item,
    channel: str,
    status: str,
    *,
    title: str | None = None,
    body: str | None = None,
    replay_of: int | None = None,
) -> None:
    """A delivery row that satisfies the table's CHECK constraints for its status."""
    now = datetime.now(UTC)
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "recipient_id": item.recipient_id,
        "event_id": item.event_id,
        "channel": channel,
        "status": status,
        "replay_of_delivery_id": replay_of,
        "rendered_title": title,
        "rendered_body": body,
        "occurred_at": seed_rows.recipient_month(item.recipient_id),
    }
    if status.startswith("skipped_"):
        values["skipped_at"] = now
    if status in ("sent", "delivered") and channel != "in_app":
        values["sent_at"] = now
    if status == "delivered":
        values["delivered_at"] = now
    if status == "processing":
        values |= {"claimed_at": now, "lease_expires_at": now + timedelta(seconds=60)}
    if status == "failed":
        values["failed_at"] = now
    if status == "dead":
        values["dead_at"] = now
    await conn.execute(insert(s.notification_delivery).values(**values))


@pytest.fixture
def seed(engine: AsyncEngine, tenant: str) -> Seed:
    return Seed(engine, tenant)


@pytest.fixture
def auth(settings: Settings, tenant: str) -> Any:
    def headers(subject: str, role: str | None = None) -> dict[str, str]:
        token = sign_token(settings, tenant_id=tenant, subject=subject, role=role)
        return {"Authorization": f"Bearer {token}"}

    return headers


async def listed(client: AsyncClient, headers: dict[str, str], **params: Any) -> list[str]:
    """Every id the caller can page through, in order, following the cursor to the end."""
    ids: list[str] = []
    cursor: str | None = None
    while True:
        query = dict(params)
        if cursor is not None:
            query["cursor"] = cursor
        response = await client.get(BASE, headers=headers, params=query)
        assert response.status_code == 200, response.text
        page = response.json()
        ids += [item["id"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            return ids


async def unread(client: AsyncClient, headers: dict[str, str]) -> int:
    response = await client.get(f"{BASE}/unread-count", headers=headers)
    assert response.status_code == 200, response.text
    count: int = response.json()["count"]
    return count


async def read_at(engine: AsyncEngine, item: Item) -> datetime | None:
    async with engine.connect() as conn:
        value: datetime | None = (
            await conn.execute(
                select(s.notification_recipient.c.read_at).where(
                    s.notification_recipient.c.id == item.recipient_id
                )
            )
        ).scalar_one()
    return value


def error_code(response: Any) -> str:
    code: str = response.json()["error"]["code"]
    return code


# ---------------------------------------------------------------------------------------------
# Listing


async def test_item_carries_event_facts_and_in_app_words(
    client: AsyncClient, seed: Seed, auth: Any
) -> None:
    """R-CENTRE-1, R-CENTRE-11, R-CENTRE-19: one item per recipient row, id = its public id, the
    words from the in-app delivery and kind, category, priority and action URL from the event."""
    ana = await seed.person("ana")
    item = await seed.notify(
        ana,
        kind="transport.delay",
        category="transport",
        priority="high",
        action_url="/buses/4",
        title="Bus 4 is late",
        body="About 20 minutes.",
        others=[("email", "sent")],
    )
    response = await client.get(BASE, headers=auth("ana"))
    assert response.status_code == 200
    page = response.json()
    assert page["nextCursor"] is None
    [listed_item] = page["items"]
    assert listed_item == {
        "id": item.id,
        "kind": "transport.delay",
        "category": "transport",
        "priority": "high",
        "title": "Bus 4 is late",
        "body": "About 20 minutes.",
        "actionUrl": "/buses/4",
        "occurredAt": listed_item["occurredAt"],
        "readAt": None,
    }
    assert datetime.fromisoformat(listed_item["occurredAt"]) == item.occurred_at


async def test_title_and_body_are_nullable(client: AsyncClient, seed: Seed, auth: Any) -> None:
    """R-CENTRE-12: a delivered row without stored words is listed with null title and body, and
    the published schema declares both nullable."""
    ana = await seed.person("ana")
    item = await seed.notify(ana, title=None, body=None)
    [listed_item] = (await client.get(BASE, headers=auth("ana"))).json()["items"]
    assert (listed_item["id"], listed_item["title"], listed_item["body"]) == (item.id, None, None)

    spec = (await client.get("/openapi.json")).json()
    fields = spec["components"]["schemas"]["NotificationItem"]["properties"]
    for name in ("title", "body"):
        assert {"type": "null"} in fields[name]["anyOf"], fields[name]


async def test_replayed_in_app_shows_the_newer_delivery(
    client: AsyncClient, seed: Seed, auth: Any
) -> None:
    """R-CENTRE-11: with two delivered in-app rows (original and replay), the one with the highest
    delivery id supplies title and body, and the recipient is listed once."""
    ana = await seed.person("ana")
    item = await seed.notify(ana, title="old title", body="old body")
    await seed.replay(item, title="new title", body="new body")
    items = (await client.get(BASE, headers=auth("ana"))).json()["items"]
    assert [(i["id"], i["title"], i["body"]) for i in items] == [(item.id, "new title", "new body")]


async def test_only_delivered_in_app_rows_are_listed(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine
) -> None:
    """R-CENTRE-10, R-CENTRE-17 (Herald's decision 6): a recipient is listed only with a delivered
    in-app row; email-only, suppressed, failed-render, cancelled and still-queued ones are neither
    listed, counted nor markable."""
    ana = await seed.person("ana")
    shown = await seed.notify(ana, others=[("email", "sent")])
    hidden = [
        await seed.notify(ana, in_app=None, others=[("email", "delivered")]),
        await seed.notify(ana, in_app=None, others=[("sms", "sent"), ("push", "sent")]),
        await seed.notify(ana, in_app="skipped_preference", others=[("email", "sent")]),
        await seed.notify(ana, in_app="skipped_no_template", title=None, body=None),
        await seed.notify(ana, in_app="cancelled"),
        await seed.notify(ana, in_app="queued"),
        await seed.notify(ana, in_app="skipped_recipient_gone"),
    ]
    headers = auth("ana")
    assert await listed(client, headers) == [shown.id]
    assert await unread(client, headers) == 1
    for item in hidden:
        response = await client.post(f"{BASE}/{item.id}/read", headers=headers)
        assert response.status_code == 404
        assert error_code(response) == "NOTIFICATION_NOT_FOUND"
    assert (await client.post(f"{BASE}/read-all", headers=headers)).json() == {"updated": 1}
    for item in hidden:
        assert await read_at(engine, item) is None


async def test_ordering_and_paging_under_equal_timestamps(
    client: AsyncClient, seed: Seed, auth: Any
) -> None:
    """R-CENTRE-13: newest first, ties on occurred_at broken by recipient id descending; paging by
    cursor through rows that share one timestamp loses and repeats nothing."""
    ana = await seed.person("ana")
    base = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    older = await seed.notify(ana, occurred_at=base - timedelta(hours=1))
    # Seven events fanned out in one transaction: one now() for all of them.
    batch = await seed.notify_many(ana, 7)
    assert len({item.occurred_at for item in batch}) == 1
    # A newer row inserted last but timestamped between the two groups.
    middle = await seed.notify(ana, occurred_at=base)
    newest = await seed.notify(ana, occurred_at=batch[0].occurred_at + timedelta(days=1))

    everything = [newest, *batch, middle, older]
    expected = [
        item.id
        for item in sorted(everything, key=lambda i: (i.occurred_at, i.recipient_id), reverse=True)
    ]
    assert expected[0] == newest.id and expected[-2:] == [middle.id, older.id]

    headers = auth("ana")
    for limit in (1, 2, 3, 4, 7, 10, 100):
        ids = await listed(client, headers, limit=limit)
        assert ids == expected, f"limit={limit}"
    first = (await client.get(BASE, headers=headers, params={"limit": 3})).json()
    assert len(first["items"]) == 3 and first["nextCursor"]
    default = (await client.get(BASE, headers=headers)).json()
    assert len(default["items"]) == len(everything) and default["nextCursor"] is None


async def test_default_limit_is_twenty(client: AsyncClient, seed: Seed, auth: Any) -> None:
    """R-CENTRE-13: without a limit a page holds 20 items and names the next page."""
    ana = await seed.person("ana")
    await seed.notify_many(ana, 21)
    page = (await client.get(BASE, headers=auth("ana"))).json()
    assert len(page["items"]) == 20
    assert page["nextCursor"] is not None
    rest = (
        await client.get(BASE, headers=auth("ana"), params={"cursor": page["nextCursor"]})
    ).json()
    assert len(rest["items"]) == 1 and rest["nextCursor"] is None


async def test_unread_only(client: AsyncClient, seed: Seed, auth: Any) -> None:
    """R-CENTRE-20: with unreadOnly only unread items are returned, across pages too."""
    ana = await seed.person("ana")
    items = await seed.notify_many(ana, 6)
    headers = auth("ana")
    for item in items[::2]:
        assert (await client.post(f"{BASE}/{item.id}/read", headers=headers)).status_code == 200
    unread_ids = {item.id for item in items[1::2]}
    assert set(await listed(client, headers, unreadOnly="true", limit=2)) == unread_ids
    assert len(await listed(client, headers, unreadOnly="true", limit=1)) == 3
    assert len(await listed(client, headers, unreadOnly="false")) == 6
    assert len(await listed(client, headers)) == 6


# ---------------------------------------------------------------------------------------------
# Access predicates


async def test_another_persons_notification_is_invisible(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine
) -> None:
    """R-CENTRE-6, R-CENTRE-16, R-CENTRE-19, R-CENTRE-21: another person's item is not listed, not
    counted, and marking it read answers 404 (never 403) and leaves it unread."""
    ana = await seed.person("ana")
    ben = await seed.person("ben")
    mine = await seed.notify(ana)
    theirs = await seed.notify(ben)
    headers = auth("ana")
    assert await listed(client, headers) == [mine.id]
    assert await unread(client, headers) == 1

    response = await client.post(f"{BASE}/{theirs.id}/read", headers=headers)
    assert response.status_code == 404
    assert error_code(response) == "NOTIFICATION_NOT_FOUND"
    assert await read_at(engine, theirs) is None
    assert await listed(client, auth("ben"), unreadOnly="true") == [theirs.id]


async def test_same_external_id_in_another_tenant_sees_nothing(
    client: AsyncClient, seed: Seed, settings: Settings
) -> None:
    """R-CENTRE-6: ownership is per tenant; a token for the same external id in another tenant
    reaches none of this tenant's rows."""
    ana = await seed.person("ana")
    item = await seed.notify(ana)
    other = Seed(seed.engine, f"{seed.tenant}-other")
    await other.person("ana")
    token = sign_token(settings, tenant_id=other.tenant, subject="ana")
    headers = {"Authorization": f"Bearer {token}"}
    assert await listed(client, headers) == []
    assert (await client.post(f"{BASE}/{item.id}/read", headers=headers)).status_code == 404


@dataclass
class TeacherParent:
    teacher_role: int
    guardian_role: int
    person: int
    staff_row: Item
    guardian_row: Item
    unscoped_row: Item


async def teacher_parent(seed: Seed) -> TeacherParent:
    """A teacher who is also a parent, with one staff-scoped, one guardian-scoped and one
    unscoped notification."""
    teacher = await seed.role("teacher", "staff")
    guardian = await seed.role("guardian", "guardian")
    tara = await seed.person("tara", roles=[teacher, guardian])
    base = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
    staff_row = await seed.notify(
        tara, audience_role_id=teacher, title="Disciplinary hearing", occurred_at=base
    )
    guardian_row = await seed.notify(
        tara, audience_role_id=guardian, title="Fee due", occurred_at=base - timedelta(minutes=1)
    )
    unscoped_row = await seed.notify(tara, title="Holiday", occurred_at=base - timedelta(minutes=2))
    return TeacherParent(teacher, guardian, tara, staff_row, guardian_row, unscoped_row)


async def test_teacher_parent_as_guardian_sees_no_staff_rows(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine
) -> None:
    """R-CENTRE-2, R-CENTRE-7, R-CENTRE-16: viewing as Guardian, a teacher-parent sees guardian and
    unscoped rows but no staff rows, and cannot mark a staff row read (404); viewing as teacher
    the guardian rows disappear instead."""
    tp = await teacher_parent(seed)
    as_guardian = auth("tara", role="guardian")
    assert await listed(client, as_guardian) == [tp.guardian_row.id, tp.unscoped_row.id]
    assert await unread(client, as_guardian) == 2
    response = await client.post(f"{BASE}/{tp.staff_row.id}/read", headers=as_guardian)
    assert response.status_code == 404
    assert error_code(response) == "NOTIFICATION_NOT_FOUND"
    assert await read_at(engine, tp.staff_row) is None

    as_teacher = auth("tara", role="teacher")
    assert await listed(client, as_teacher) == [tp.staff_row.id, tp.unscoped_row.id]
    assert await unread(client, as_teacher) == 2


async def test_dismissed_teacher_loses_staff_rows_but_keeps_guardian_rows(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine
) -> None:
    """R-CENTRE-3, R-CENTRE-9, R-CENTRE-18: once the teacher role is taken away, staff rows vanish
    at once — even under a token still naming the teacher role — while guardian and unscoped rows
    stay visible under the guardian role."""
    tp = await teacher_parent(seed)
    # A colleague keeps the role: liveness is the caller's own grant, not the role's existence.
    await seed.person("colleague", roles=[tp.teacher_role])
    stale_teacher_token = auth("tara", role="teacher")
    assert tp.staff_row.id in await listed(client, stale_teacher_token)

    async with engine.begin() as conn:
        await conn.execute(
            delete(s.person_role).where(
                s.person_role.c.person_id == tp.person,
                s.person_role.c.role_id == tp.teacher_role,
            )
        )

    assert await listed(client, stale_teacher_token) == [tp.unscoped_row.id]
    assert await unread(client, stale_teacher_token) == 1
    response = await client.post(f"{BASE}/{tp.staff_row.id}/read", headers=stale_teacher_token)
    assert response.status_code == 404
    assert (await client.post(f"{BASE}/read-all", headers=stale_teacher_token)).json() == {
        "updated": 1
    }
    assert await read_at(engine, tp.staff_row) is None

    as_guardian = auth("tara", role="guardian")
    assert await listed(client, as_guardian) == [tp.guardian_row.id, tp.unscoped_row.id]


async def test_non_staff_scoped_rows_need_no_live_grant(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine
) -> None:
    """R-CENTRE-9: liveness applies to staff scope only; a guardian-scoped row stays visible under
    the guardian role whatever the grants say."""
    tp = await teacher_parent(seed)
    async with engine.begin() as conn:
        await conn.execute(delete(s.person_role).where(s.person_role.c.person_id == tp.person))
    assert await listed(client, auth("tara", role="guardian")) == [
        tp.guardian_row.id,
        tp.unscoped_row.id,
    ]


async def test_no_active_role_sees_only_unscoped_rows(
    client: AsyncClient, seed: Seed, auth: Any
) -> None:
    """R-CENTRE-8: a session without an active role (or naming a role that does not exist) sees
    only rows whose audience_role_id is NULL."""
    tp = await teacher_parent(seed)
    for headers in (auth("tara"), auth("tara", role="no-such-role")):
        assert await listed(client, headers) == [tp.unscoped_row.id]
        assert await unread(client, headers) == 1
        response = await client.post(f"{BASE}/{tp.guardian_row.id}/read", headers=headers)
        assert response.status_code == 404


# ---------------------------------------------------------------------------------------------
# Read state


async def test_unread_count(client: AsyncClient, seed: Seed, auth: Any) -> None:
    """R-CENTRE-18, R-CENTRE-19: the count uses the list's predicates and only unread rows."""
    tp = await teacher_parent(seed)
    await seed.notify(tp.person, in_app="skipped_preference")
    ben = await seed.person("ben")
    await seed.notify(ben)
    as_guardian = auth("tara", role="guardian")
    assert await unread(client, as_guardian) == 2
    await client.post(f"{BASE}/{tp.guardian_row.id}/read", headers=as_guardian)
    assert await unread(client, as_guardian) == 1
    assert await unread(client, auth("tara", role="teacher")) == 2


async def test_unread_count_stops_at_the_cap(client: AsyncClient, seed: Seed, auth: Any) -> None:
    """Issue 19: counting stops at UNREAD_COUNT_CAP, so its cost does not grow with a person's
    history; below the cap the count is exact and `capped` false, at the cap `capped` says "at
    least this many" (a badge's "99+")."""
    cap = queries.UNREAD_COUNT_CAP
    ana = await seed.person("ana")
    items = await seed.notify_many(ana, cap + 2)
    headers = auth("ana")

    async def counted() -> dict[str, Any]:
        response = await client.get(f"{BASE}/unread-count", headers=headers)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    assert await counted() == {"count": cap, "capped": True}
    for item in items[:2]:
        assert (await client.post(f"{BASE}/{item.id}/read", headers=headers)).status_code == 200
    assert await counted() == {"count": cap, "capped": True}
    assert (await client.post(f"{BASE}/{items[2].id}/read", headers=headers)).status_code == 200
    assert await counted() == {"count": cap - 1, "capped": False}
    assert (await client.post(f"{BASE}/read-all", headers=headers)).json() == {"updated": cap - 1}
    assert await counted() == {"count": 0, "capped": False}


async def test_mark_read_twice_keeps_the_first_timestamp(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine
) -> None:
    """R-CENTRE-15, R-CENTRE-22: read_at = coalesce(read_at, now()); marking again (or read-all)
    answers the first timestamp and never moves it."""
    ana = await seed.person("ana")
    item = await seed.notify(ana)
    headers = auth("ana")
    first = await client.post(f"{BASE}/{item.id}/read", headers=headers)
    assert first.status_code == 200
    body = first.json()
    assert body["id"] == item.id
    stamp = datetime.fromisoformat(body["readAt"])
    assert await read_at(engine, item) == stamp

    second = await client.post(f"{BASE}/{item.id}/read", headers=headers)
    assert second.status_code == 200
    assert datetime.fromisoformat(second.json()["readAt"]) == stamp
    assert (await client.post(f"{BASE}/read-all", headers=headers)).json() == {"updated": 0}
    assert await read_at(engine, item) == stamp
    [listed_item] = (await client.get(BASE, headers=headers)).json()["items"]
    assert datetime.fromisoformat(listed_item["readAt"]) == stamp


async def test_read_all_marks_only_visible_rows(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine
) -> None:
    """R-CENTRE-23, R-CENTRE-2, R-CENTRE-21: read-all under the guardian role marks the guardian
    and unscoped rows; the staff-scoped row, another person's row and a suppressed row stay
    unread. (Herald has no expiry yet, so R-CENTRE-24's expired items do not arise.)"""
    tp = await teacher_parent(seed)
    suppressed = await seed.notify(tp.person, in_app="skipped_preference")
    ben = await seed.person("ben")
    bens = await seed.notify(ben)
    as_guardian = auth("tara", role="guardian")

    response = await client.post(f"{BASE}/read-all", headers=as_guardian)
    assert response.status_code == 200
    assert response.json() == {"updated": 2}
    assert await read_at(engine, tp.guardian_row) is not None
    assert await read_at(engine, tp.unscoped_row) is not None
    for untouched in (tp.staff_row, suppressed, bens):
        assert await read_at(engine, untouched) is None
    assert await unread(client, as_guardian) == 0
    assert await listed(client, auth("tara", role="teacher"), unreadOnly="true") == [
        tp.staff_row.id
    ]
    assert (await client.post(f"{BASE}/read-all", headers=as_guardian)).json() == {"updated": 0}


@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", str(uuid.uuid4())])
async def test_mark_read_unknown_or_malformed_id_is_404(
    client: AsyncClient, seed: Seed, auth: Any, bad_id: str
) -> None:
    """R-CENTRE-16: an id that is malformed or names nothing answers 404, never 400 or 403."""
    await seed.person("ana")
    response = await client.post(f"{BASE}/{bad_id}/read", headers=auth("ana"))
    assert response.status_code == 404
    assert error_code(response) == "NOTIFICATION_NOT_FOUND"


# ---------------------------------------------------------------------------------------------
# Query validation


@pytest.mark.parametrize("value", ["false", "true", "0", ""])
async def test_pagination_cannot_be_disabled(
    client: AsyncClient, seed: Seed, auth: Any, value: str
) -> None:
    """R-CENTRE-14: the list refuses pagination=false (and any pagination parameter)."""
    await seed.person("ana")
    response = await client.get(BASE, headers=auth("ana"), params={"pagination": value})
    assert response.status_code == 400
    assert error_code(response) == "PAGINATION_REQUIRED"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!",
        "not-a-cursor",
        _b64(b"not json"),
        _b64(json.dumps({"t": "2026-01-01T00:00:00+00:00", "i": 1}).encode()),
        _b64(json.dumps(["2026-01-01T00:00:00", 1]).encode()),
        _b64(json.dumps(["2026-01-01T00:00:00+00:00", "1"]).encode()),
        _b64(json.dumps(["2026-01-01T00:00:00+00:00", 0]).encode()),
        _b64(json.dumps(["yesterday", 1]).encode()),
        _b64(json.dumps(["2026-01-01T00:00:00+00:00", 1, 2]).encode()),
        _b64("é".encode("latin-1")),
    ],
)
async def test_bad_cursor_is_400(client: AsyncClient, seed: Seed, auth: Any, cursor: str) -> None:
    """R-CENTRE-13: a cursor the list did not issue is refused with CURSOR_INVALID; one that is
    not even base64url text breaks the published pattern (422 REQUEST_MALFORMED)."""
    await seed.person("ana")
    response = await client.get(BASE, headers=auth("ana"), params={"cursor": cursor})
    expected = (
        (400, "CURSOR_INVALID")
        if re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
        else (422, "REQUEST_MALFORMED")
    )
    assert (response.status_code, error_code(response)) == expected


@pytest.mark.parametrize(
    "params",
    [{"limit": "0"}, {"limit": "101"}, {"limit": "-5"}, {"limit": "ten"}, {"unreadOnly": "maybe"}],
)
async def test_bad_list_parameters_are_refused(
    client: AsyncClient, seed: Seed, auth: Any, params: dict[str, str]
) -> None:
    """R-CENTRE-13: limit is 1..100 and unreadOnly a boolean, as the OpenAPI publishes them;
    anything else breaks the schema (422 REQUEST_MALFORMED)."""
    await seed.person("ana")
    response = await client.get(BASE, headers=auth("ana"), params=params)
    assert response.status_code == 422
    assert error_code(response) == "REQUEST_MALFORMED"


async def test_limit_of_one_hundred_is_accepted(client: AsyncClient, seed: Seed, auth: Any) -> None:
    """R-CENTRE-13: the largest page is 100 items."""
    await seed.person("ana")
    response = await client.get(BASE, headers=auth("ana"), params={"limit": "100"})
    assert response.status_code == 200


# ---------------------------------------------------------------------------------------------
# Authentication


ROUTES = [
    ("GET", BASE),
    ("GET", f"{BASE}/unread-count"),
    ("POST", f"{BASE}/read-all"),
    ("POST", f"{BASE}/{uuid.uuid4()}/read"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_every_route_requires_a_valid_token(
    client: AsyncClient, seed: Seed, settings: Settings, method: str, path: str
) -> None:
    """R-CENTRE-5, R-CENTRE-19, R-CENTRE-25: no token, a malformed one, one signed with another
    key, an expired one, and an API-key-style credential all answer 401."""
    await seed.person("ana")
    expired = sign_token(settings, tenant_id=seed.tenant, subject="ana", ttl=timedelta(seconds=-30))
    forged = sign_token(
        settings.model_copy(update={"jwt_secret": "another-secret-that-is-long-enough-too"}),
        tenant_id=seed.tenant,
        subject="ana",
    )
    for headers in (
        {},
        {"Authorization": "Bearer not.a.jwt"},
        {"Authorization": f"Bearer {forged}"},
        {"Authorization": f"Bearer {expired}"},
        {"Authorization": f"Basic {expired}"},
    ):
        response = await client.request(method, path, headers=headers)
        assert response.status_code == 401, (headers, response.text)
        assert error_code(response) == "UNAUTHENTICATED"


@pytest.mark.parametrize(("method", "path"), ROUTES)
async def test_token_for_a_deleted_person_is_401(
    client: AsyncClient, seed: Seed, auth: Any, engine: AsyncEngine, method: str, path: str
) -> None:
    """R-CENTRE-5: a still-valid token for a person the directory deleted holds no session."""
    ana = await seed.person("ana")
    await seed.notify(ana)
    headers = auth("ana")
    assert (await client.get(BASE, headers=headers)).status_code == 200
    async with engine.begin() as conn:
        await conn.execute(
            update(s.person).where(s.person.c.id == ana).values(deleted_at=func.now())
        )
    response = await client.request(method, path, headers=headers)
    assert response.status_code == 401
    assert error_code(response) == "UNAUTHENTICATED"


async def test_no_permission_is_needed(client: AsyncClient, seed: Seed, auth: Any) -> None:
    """R-CENTRE-5, R-CENTRE-25: a guardian whose role grants no permission at all uses every
    centre route."""
    guardian = await seed.role("guardian", "guardian")
    gita = await seed.person("gita", roles=[guardian])
    item = await seed.notify(gita, audience_role_id=guardian)
    headers = auth("gita", role="guardian")
    assert await listed(client, headers) == [item.id]
    assert await unread(client, headers) == 1
    assert (await client.post(f"{BASE}/{item.id}/read", headers=headers)).status_code == 200
    assert (await client.post(f"{BASE}/read-all", headers=headers)).status_code == 200


# ---------------------------------------------------------------------------------------------
# Plan


def plan_nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [node]
    for child in node.get("Plans", []):
        nodes += plan_nodes(child)
    return nodes


async def test_list_walks_the_centre_index(seed: Seed, engine: AsyncEngine) -> None:
    """R-CENTRE-13: a page of a person with thousands of rows is read from
    notification_recipient_centre_idx in order (the inbox is never sorted), on the first page and
    on a keyset page, with and without an active staff role."""
    teacher = await seed.role("teacher", "staff")
    ana = await seed.person("ana", roles=[teacher])
    async with engine.begin() as conn:
        await conn.execute(
            text(
                """
                WITH ev AS (
                    INSERT INTO notification_event
                        (tenant_id, kind, category, priority, audience, channels, dedupe_key,
                         occurred_at)
                    SELECT :tenant, 'announcement.posted', 'announcement', 'normal',
                           '{"kind": "all_users"}', ARRAY['in_app'],
                           md5(:tenant || g::text) || md5(g::text),
                           now() - g * interval '1 minute'
                    FROM generate_series(1, 3000) AS g
                    RETURNING id, occurred_at
                ), rc AS (
                    INSERT INTO notification_recipient
                        (tenant_id, event_id, user_id, user_public_id_snapshot, audience_role_id,
                         occurred_at)
                    SELECT :tenant, ev.id, :person, gen_random_uuid(),
                           CASE WHEN ev.id % 3 = 0 THEN CAST(:role AS bigint) END, ev.occurred_at
                    FROM ev
                    RETURNING id, event_id, occurred_at
                )
                INSERT INTO notification_delivery
                    (tenant_id, recipient_id, event_id, channel, status, delivered_at,
                     rendered_title, rendered_body, occurred_at)
                SELECT :tenant, rc.id, rc.event_id, 'in_app', 'delivered', now(), 't', 'b',
                       rc.occurred_at
                FROM rc
                """
            ),
            {"tenant": seed.tenant, "person": ana, "role": teacher},
        )
        for table in ("notification_event", "notification_recipient", "notification_delivery"):
            await conn.execute(text(f"ANALYZE {table}"))

    def actor(role_id: int | None) -> Actor:
        return Actor(
            tenant_id=seed.tenant,
            external_id="ana",
            person_id=ana,
            role_code="teacher" if role_id else None,
            role_id=role_id,
            role_scope_kind="staff" if role_id else None,
            holds_role=role_id is not None,
        )

    async with engine.connect() as conn:
        # Planned as a request plans it (auth enters these settings with the tenant).
        for setting, value in tenancy.INBOX_PLANNER_SETTINGS:
            await conn.execute(text(f"SET LOCAL {setting} = {value}"))
        # The partition (month) holding most of ana's rows: the one whose walk this test is about.
        busiest = (
            await conn.execute(
                text(
                    "SELECT tableoid::regclass::text FROM notification_recipient "
                    "WHERE user_id = :p GROUP BY 1 ORDER BY count(*) DESC LIMIT 1"
                ),
                {"p": ana},
            )
        ).scalar_one()
        for viewer, visible in ((actor(None), 2000), (actor(teacher), 3000)):
            rows = await queries.list_page(conn, viewer, limit=3000, after=None, unread_only=False)
            assert len(rows) == visible
            middle = rows[visible // 2]
            for after in (None, (middle.occurred_at, middle.recipient_id)):
                stmt = queries.list_page_statement(viewer, limit=21, after=after, unread_only=False)
                compiled = stmt.compile(
                    dialect=conn.dialect, compile_kwargs={"render_postcompile": True}
                )
                [explained] = (
                    await conn.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {compiled}", compiled.params)
                ).scalar_one()
                nodes = plan_nodes(by_parent(explained["Plan"]))
                # The month holding the rows is walked by the centre index (the other months are
                # merged in beside it, whatever each holds).
                scans = [n for n in nodes if n.get("Partition") == busiest]
                assert [n.get("Index Name") for n in scans] == [
                    "notification_recipient_centre_idx"
                ], explained
                inbox_sorts = [
                    n
                    for n in nodes
                    if n["Node Type"] in ("Sort", "Incremental Sort")
                    and any("occurred_at" in key for key in n["Sort Key"])
                ]
                assert inbox_sorts == [], explained
                page = await queries.list_page(
                    conn, viewer, limit=21, after=after, unread_only=False
                )
                assert len(page) == 21


async def test_deleted_staff_role_keeps_its_rows_hidden(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """R-CENTRE-3, R-CENTRE-9, R-SCHEMA-20: deleting a staff role sets the rows' audience_role_id NULL
    (never blocks the delete), but the scope kind copied at fan-out keeps those rows hidden
    instead of exposing them under every role."""
    from herald.fanout.worker import fan_out_next_event
    from herald.kinds.sample import SAMPLE_REGISTRY
    from herald.sending.service import SendInput, asend
    from tests import seed

    async with engine.begin() as conn:
        teacher_role = await seed.role(conn, tenant, "teacher", "staff")
        await seed.role(conn, tenant, "guardian", "guardian")
        await seed.person(conn, tenant, "t1", roles=[teacher_role])
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="system.maintenance",
                audience={"kind": "role", "roles": ["teacher"]},
                channels=["in_app"],
                variables={"window": "Saturday"},
            ),
            registry=SAMPLE_REGISTRY,
        )
    while await fan_out_next_event(engine, SAMPLE_REGISTRY, batch_size=50, tenant_id=tenant):
        pass
    token = sign_token(settings, tenant_id=tenant, subject="t1", role="teacher")
    listed = await client.get("/v1/me/notifications", headers={"Authorization": f"Bearer {token}"})
    assert len(listed.json()["items"]) == 1
    async with engine.begin() as conn:
        await conn.execute(s.role.delete().where(s.role.c.id == teacher_role))
    for role in (None, "guardian"):
        token = sign_token(settings, tenant_id=tenant, subject="t1", role=role)
        listed = await client.get(
            "/v1/me/notifications", headers={"Authorization": f"Bearer {token}"}
        )
        assert listed.json()["items"] == [], role
