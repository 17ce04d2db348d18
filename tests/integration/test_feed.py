"""The admin operations feed (fan-out on read): publish through the library and HTTP, read through
the operator routes, against real PostgreSQL.

Each test builds its own tenant's roles (with a permissions array) and staff, publishes feed rows
with herald.feed.publish, signs operator tokens as a host would, and reads the feed through the
ASGI app.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import Engine, delete, event, func, insert, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

import herald.feed
from herald.auth.service import Operator, create_api_key, sign_token
from herald.config import Settings
from herald.db import schema as s
from herald.errors import (
    ActionUrlForbidden,
    FeedNotificationInvalid,
    FeedPublishOutsideTransaction,
)
from herald.feed import service
from tests import seed

FEED = "/v1/admin/feed"
READ = "NotificationHistory_READ"
FAILURES = "NotificationFailure_READ"
TEMPLATES = "NotificationTemplate_READ"


@dataclass
class Staff:
    """One tenant's roles and operators, and the feed rows published for them."""

    engine: AsyncEngine
    settings: Settings
    tenant: str

    async def role(
        self, code: str, permissions: Sequence[str] = (), *, superadmin: bool = False
    ) -> int:
        async with self.engine.begin() as conn:
            role_id = await seed.role(conn, self.tenant, code, "staff")
            await conn.execute(
                update(s.role)
                .where(s.role.c.id == role_id)
                .values(permissions=list(permissions), is_superadmin=superadmin)
            )
        return role_id

    async def person(self, external_id: str, roles: Sequence[int] = ()) -> int:
        async with self.engine.begin() as conn:
            return (await seed.person(conn, self.tenant, external_id, roles=list(roles))).id

    async def set_permissions(self, role_id: int, permissions: Sequence[str]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                update(s.role).where(s.role.c.id == role_id).values(permissions=list(permissions))
            )

    def auth(self, external_id: str, role: str | None = None) -> dict[str, str]:
        token = sign_token(self.settings, tenant_id=self.tenant, subject=external_id, role=role)
        return {"Authorization": f"Bearer {token}"}

    async def key(self, *scopes: str) -> dict[str, str]:
        async with self.engine.begin() as conn:
            key = await create_api_key(conn, tenant_id=self.tenant, scopes=list(scopes))
        return {"Authorization": f"Bearer {key}"}

    async def publish(
        self, permission_code: str, title: str = "Template edited", **more: Any
    ) -> str:
        async with self.engine.begin() as conn:
            public_id = await herald.feed.publish(
                conn,
                tenant_id=self.tenant,
                kind="template.updated",
                title=title,
                permission_code=permission_code,
                **more,
            )
        return str(public_id)

    async def publish_many(self, permission_code: str, count: int) -> list[str]:
        """`count` rows in one transaction: they share now(), so only the id orders them."""
        async with self.engine.begin() as conn:
            ids = [
                await herald.feed.publish(
                    conn,
                    tenant_id=self.tenant,
                    kind="delivery.dead",
                    title=f"Dead letter {n}",
                    permission_code=permission_code,
                )
                for n in range(count)
            ]
        return [str(i) for i in ids]

    async def receipts(self) -> set[tuple[str, int]]:
        """Every (feed public id, user id) receipt of this tenant."""
        n, nr = s.feed_notification, s.feed_notification_read
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(n.c.public_id, nr.c.user_id)
                .select_from(nr.join(n, n.c.id == nr.c.notification_id))
                .where(n.c.tenant_id == self.tenant)
            )
            return {(str(row.public_id), row.user_id) for row in rows}


@pytest.fixture
def staff(engine: AsyncEngine, settings: Settings, tenant: str) -> Staff:
    return Staff(engine, settings, tenant)


@contextmanager
def statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every statement the engine sends while the block runs."""
    sent: list[str] = []

    def record(*args: Any) -> None:
        sent.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


def feed_selects(sent: list[str]) -> list[str]:
    return [sql for sql in sent if "FROM feed_notification" in sql]


async def ids(client: AsyncClient, headers: dict[str, str], **params: Any) -> list[str]:
    response = await client.get(FEED, headers=headers, params=params)
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


async def unread(client: AsyncClient, headers: dict[str, str]) -> int:
    response = await client.get(f"{FEED}/unread-count", headers=headers)
    assert response.status_code == 200, response.text
    count: int = response.json()["count"]
    return count


# -- publishing -------------------------------------------------------------------------------


async def test_library_publish_writes_one_row_carrying_the_permission(
    engine: AsyncEngine, staff: Staff
) -> None:
    """R-FEED-1, R-FEED-5, R-SCHEMA-43: one publish is one row, however many people may see it,
    carrying the permission code of the screen it belongs to."""
    history = await staff.role("history", [READ])
    for n in range(5):
        await staff.person(f"admin-{n}", [history])
    when = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)

    public_id = await staff.publish(
        READ,
        title="Event cancelled",
        body="By the office",
        link="/admin/events/1",
        occurred_at=when,
    )

    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                select(s.feed_notification).where(s.feed_notification.c.tenant_id == staff.tenant)
            )
        ).all()
    assert len(rows) == 1
    row = rows[0]._mapping
    assert str(row["public_id"]) == public_id
    assert row["permission_code"] == READ
    assert (row["kind"], row["title"], row["body"], row["link"]) == (
        "template.updated",
        "Event cancelled",
        "By the office",
        "/admin/events/1",
    )
    assert row["occurred_at"] == when


def test_sync_twin_publishes_the_same_row(sync_engine: Engine, tenant: str) -> None:
    """R-FEED-1: a sync host publishes through publish_sync, the same statement as publish()."""
    with sync_engine.begin() as conn:
        public_id = herald.feed.publish_sync(
            conn, tenant_id=tenant, kind="delivery.dead", title="Dead", permission_code=FAILURES
        )
    with sync_engine.connect() as conn:
        row = conn.execute(
            select(s.feed_notification.c.permission_code, s.feed_notification.c.tenant_id).where(
                s.feed_notification.c.public_id == public_id
            )
        ).one()
    assert (row.permission_code, row.tenant_id) == (FAILURES, tenant)


async def test_publish_commits_and_rolls_back_with_the_host_transaction(
    engine: AsyncEngine, staff: Staff
) -> None:
    """R-FEED-1: the row is written in the caller's transaction: a rolled-back business write
    leaves no feed row, and an autocommit connection is refused."""

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        async with engine.begin() as conn:
            await herald.feed.publish(
                conn, tenant_id=staff.tenant, kind="k", title="Never", permission_code=READ
            )
            raise Boom

    async with engine.connect() as conn:
        auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
        with pytest.raises(FeedPublishOutsideTransaction):
            await herald.feed.publish(
                auto, tenant_id=staff.tenant, kind="k", title="Never", permission_code=READ
            )
        count = (
            await conn.execute(
                select(func.count())
                .select_from(s.feed_notification)
                .where(s.feed_notification.c.tenant_id == staff.tenant)
            )
        ).scalar_one()
    assert count == 0


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"link": "javascript:alert(1)"}, ActionUrlForbidden),
        ({"link": "http://plain.example/x"}, ActionUrlForbidden),
        ({"link": "//evil.example"}, ActionUrlForbidden),
        ({"permission_code": ""}, FeedNotificationInvalid),
        ({"permission_code": "x" * 201}, FeedNotificationInvalid),
        ({"permission_code": "Notification History_READ"}, FeedNotificationInvalid),
        ({"permission_code": "READ\u200b"}, FeedNotificationInvalid),
        ({"title": "   "}, FeedNotificationInvalid),
        ({"title": "t" * 501}, FeedNotificationInvalid),
        ({"kind": ""}, FeedNotificationInvalid),
        ({"body": "b" * 10_001}, FeedNotificationInvalid),
        ({"occurred_at": datetime(2026, 1, 1)}, FeedNotificationInvalid),
    ],
)
async def test_publish_refuses_bad_input_before_writing(
    engine: AsyncEngine, tenant: str, change: dict[str, Any], error: type[Exception]
) -> None:
    """R-FEED-5: a row without a usable permission code, or with an unsafe link, is never
    written: the link must pass the action-URL rule, the permission code is non-empty and
    bounded."""
    values: dict[str, Any] = {
        "tenant_id": tenant,
        "kind": "template.updated",
        "title": "Edited",
        "permission_code": READ,
        "link": "https://admin.example/templates/1",
    }
    values.update(change)
    async with engine.begin() as conn:
        with pytest.raises(error):
            await herald.feed.publish(conn, **values)
        count = (
            await conn.execute(
                select(func.count())
                .select_from(s.feed_notification)
                .where(s.feed_notification.c.tenant_id == tenant)
            )
        ).scalar_one()
    assert count == 0


async def test_http_publish_needs_the_feed_write_scope(
    client: AsyncClient, engine: AsyncEngine, staff: Staff
) -> None:
    """R-FEED-1, R-FEED-5: POST /v1/feed with feed:write answers 201 {id} and writes one row in
    the key's tenant; another scope is refused; an unsafe link is a 400 with its code and writes
    nothing."""
    writer = await staff.key("feed:write")
    body = {
        "kind": "delivery.dead",
        "title": "A delivery died",
        "link": "/admin/dead-letters",
        "permissionCode": FAILURES,
    }
    response = await client.post("/v1/feed", headers=writer, json=body)
    assert response.status_code == 201, response.text
    assert set(response.json()) == {"id"}
    public_id = uuid.UUID(response.json()["id"])

    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(s.feed_notification).where(s.feed_notification.c.public_id == public_id)
            )
        ).one()
    assert (row.tenant_id, row.permission_code, row.body) == (staff.tenant, FAILURES, None)

    events_key = await staff.key("events:write")
    assert (await client.post("/v1/feed", headers=events_key, json=body)).status_code == 403

    bad = await client.post("/v1/feed", headers=writer, json={**body, "link": "javascript:x"})
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "NOTIFICATION_ACTION_URL_SCHEME_FORBIDDEN"
    blank = await client.post("/v1/feed", headers=writer, json={**body, "permissionCode": ""})
    assert blank.status_code == 400
    assert blank.json()["error"]["code"] == "FEED_NOTIFICATION_INVALID"
    missing = {k: v for k, v in body.items() if k != "permissionCode"}
    assert (await client.post("/v1/feed", headers=writer, json=missing)).status_code == 422

    async with engine.connect() as conn:
        count = (
            await conn.execute(
                select(func.count())
                .select_from(s.feed_notification)
                .where(s.feed_notification.c.tenant_id == staff.tenant)
            )
        ).scalar_one()
    assert count == 1


# -- visibility ------------------------------------------------------------------------------


async def test_a_caller_sees_exactly_the_rows_their_active_role_permits(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-6, R-FEED-5: each row shows to roles holding its permission code and to no one
    else; the list's items carry the documented fields."""
    history = await staff.role("history", [READ, TEMPLATES])
    failures = await staff.role("failures", [FAILURES])
    await staff.person("hana", [history])
    await staff.person("femi", [failures])
    read_row = await staff.publish(READ, link="https://admin.example/events/9")
    template_row = await staff.publish(TEMPLATES)
    failure_row = await staff.publish(FAILURES)

    response = await client.get(FEED, headers=staff.auth("hana", "history"))
    assert response.status_code == 200
    page = response.json()
    assert [item["id"] for item in page["items"]] == [template_row, read_row]
    assert page["nextCursor"] is None
    item = page["items"][1]
    assert set(item) == {
        "id",
        "kind",
        "title",
        "body",
        "link",
        "permissionCode",
        "occurredAt",
        "readAt",
    }
    assert (item["permissionCode"], item["link"], item["readAt"]) == (
        READ,
        "https://admin.example/events/9",
        None,
    )
    assert await ids(client, staff.auth("femi", "failures")) == [failure_row]


async def test_visibility_follows_the_active_role_not_the_union_of_roles(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-7: a person holding two roles sees, under each, only that role's rows."""
    history = await staff.role("history", [READ])
    failures = await staff.role("failures", [FAILURES])
    await staff.person("both", [history, failures])
    read_row = await staff.publish(READ)
    failure_row = await staff.publish(FAILURES)

    assert await ids(client, staff.auth("both", "history")) == [read_row]
    assert await ids(client, staff.auth("both", "failures")) == [failure_row]
    assert await unread(client, staff.auth("both", "history")) == 1


async def test_superadmin_sees_everything_with_no_permission_list_in_the_sql(
    client: AsyncClient, engine: AsyncEngine, staff: Staff
) -> None:
    """R-FEED-8: a superadmin active role sees every row of its tenant, whatever the code, and
    the feed queries carry no IN / ANY list of permissions."""
    root = await staff.role("root", superadmin=True)
    await staff.person("root-user", [root])
    rows = [await staff.publish(code) for code in (READ, FAILURES, "Host_Custom_READ")]
    other = Staff(engine, staff.settings, f"t-{uuid.uuid4().hex[:12]}")
    await other.publish(READ)
    headers = staff.auth("root-user", "root")

    with statements(engine) as sent:
        assert await ids(client, headers) == rows[::-1]
        assert await unread(client, headers) == 3
        assert (await client.post(f"{FEED}/read-all", headers=headers)).json() == {"updated": 3}

    queries = feed_selects(sent)
    assert len(queries) == 3
    for sql in queries:
        assert " IN " not in sql.upper()
        assert "ANY" not in sql.upper()
        assert "permission_code =" not in sql


async def test_no_active_role_sees_nothing_and_the_filter_is_sql_false(
    client: AsyncClient, engine: AsyncEngine, staff: Staff
) -> None:
    """R-FEED-9: no active role (none named, one not held, or one granting nothing) sees an empty
    feed, and the query's filter is the literal `false`, never an empty IN list."""
    history = await staff.role("history", [READ])
    await staff.role("empty", [])
    await staff.person("ana", [history])
    await staff.person("ben", [])
    row = await staff.publish(READ)

    for headers in (
        staff.auth("ana"),  # no role in the token
        staff.auth("ben", "history"),  # a role ben does not hold
        staff.auth("ana", "no-such-role"),
        staff.auth("ana", "empty"),  # ana does not hold it either, and it grants nothing
    ):
        with statements(engine) as sent:
            assert await ids(client, headers) == []
            assert await unread(client, headers) == 0
            response = await client.post(f"{FEED}/{row}/read", headers=headers)
            assert response.status_code == 404
            assert (await client.post(f"{FEED}/read-all", headers=headers)).json() == {"updated": 0}
        queries = feed_selects(sent)
        assert len(queries) == 4
        for sql in queries:
            assert "WHERE false" in sql
            assert " IN " not in sql.upper()
    assert await staff.receipts() == set()
    # The same person under the role that grants it does see the row: the filter is the role.
    assert await ids(client, staff.auth("ana", "history")) == [row]


async def test_a_role_granting_nothing_sees_nothing(client: AsyncClient, staff: Staff) -> None:
    """R-FEED-9: a held role whose permissions array is empty is the empty set, not "no
    filter"."""
    empty = await staff.role("empty", [])
    await staff.person("eve", [empty])
    await staff.publish(READ)
    assert await ids(client, staff.auth("eve", "empty")) == []


async def test_permission_changes_take_effect_on_the_next_request(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-2: visibility is decided at read time: a permission granted after publish reveals
    earlier rows, and a revoked one hides them at once."""
    history = await staff.role("history", [READ])
    await staff.person("hana", [history])
    headers = staff.auth("hana", "history")
    read_row = await staff.publish(READ)
    failure_row = await staff.publish(FAILURES)
    assert await ids(client, headers) == [read_row]

    await staff.set_permissions(history, [READ, FAILURES])
    assert await ids(client, headers) == [failure_row, read_row]
    assert await unread(client, headers) == 2

    await staff.set_permissions(history, [FAILURES])
    assert await ids(client, headers) == [failure_row]
    assert (await client.post(f"{FEED}/{read_row}/read", headers=headers)).status_code == 404


async def test_in_memory_visibility_agrees_with_the_query(
    client: AsyncClient, engine: AsyncEngine, staff: Staff
) -> None:
    """R-REALTIME-8, R-FEED-6: service.may_see, which a live stream uses to filter events as they
    pass, admits exactly the rows the feed query returns, for every kind of caller."""
    history = await staff.role("history", [READ, TEMPLATES])
    root = await staff.role("root", superadmin=True)
    await staff.person("hana", [history])
    await staff.person("root-user", [root])
    await staff.person("nobody", [])
    published = {await staff.publish(code): code for code in (READ, TEMPLATES, FAILURES)}
    operators = {
        ("hana", "history"): Operator(
            staff.tenant, "person", "hana", None, frozenset({READ, TEMPLATES}), False
        ),
        ("root-user", "root"): Operator(staff.tenant, "person", "r", None, frozenset(), True),
        ("nobody", None): Operator(staff.tenant, "person", "n", None, frozenset(), False),
    }
    for (subject, role), operator in operators.items():
        listed = set(await ids(client, staff.auth(subject, role)))
        expected = {pid for pid, code in published.items() if service.may_see(operator, code)}
        assert listed == expected


# -- read state ------------------------------------------------------------------------------


async def test_read_state_is_per_caller(client: AsyncClient, staff: Staff) -> None:
    """R-FEED-3, R-FEED-10: one operator reading a row marks it read for them alone; another's
    list, unreadOnly filter and count still show it unread."""
    history = await staff.role("history", [READ])
    ana_id = await staff.person("ana", [history])
    await staff.person("ben", [history])
    ana, ben = staff.auth("ana", "history"), staff.auth("ben", "history")
    first = await staff.publish(READ, title="first")
    second = await staff.publish(READ, title="second")

    response = await client.post(f"{FEED}/{first}/read", headers=ana)
    assert response.status_code == 200
    receipt = response.json()
    assert receipt["id"] == first and receipt["readAt"] is not None

    ana_items = {
        i["id"]: i["readAt"] for i in (await client.get(FEED, headers=ana)).json()["items"]
    }
    ben_items = {
        i["id"]: i["readAt"] for i in (await client.get(FEED, headers=ben)).json()["items"]
    }
    assert ana_items[first] == receipt["readAt"] and ana_items[second] is None
    assert ben_items == {first: None, second: None}
    assert await unread(client, ana) == 1
    assert await unread(client, ben) == 2
    assert await ids(client, ana, unreadOnly="true") == [second]
    assert await ids(client, ben, unreadOnly="true") == [second, first]
    assert await staff.receipts() == {(first, ana_id)}


async def test_mark_read_is_idempotent_and_keeps_the_first_receipt(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-3: marking a read row again writes nothing new and answers the first read time."""
    history = await staff.role("history", [READ])
    await staff.person("ana", [history])
    headers = staff.auth("ana", "history")
    row = await staff.publish(READ)

    first = (await client.post(f"{FEED}/{row}/read", headers=headers)).json()
    again = (await client.post(f"{FEED}/{row}/read", headers=headers)).json()
    assert again == first
    assert len(await staff.receipts()) == 1


async def test_unread_count_covers_everything_visible_not_one_page(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-11: the count is every visible unread row, beyond the page, excluding rows the
    caller cannot see and rows they have read."""
    history = await staff.role("history", [READ])
    await staff.person("ana", [history])
    headers = staff.auth("ana", "history")
    visible = await staff.publish_many(READ, 25)
    await staff.publish_many(FAILURES, 3)

    assert len(await ids(client, headers, limit=5)) == 5
    assert await unread(client, headers) == 25
    await client.post(f"{FEED}/{visible[0]}/read", headers=headers)
    assert await unread(client, headers) == 24


async def test_mark_read_answers_404_for_invisible_and_absent_rows_alike(
    client: AsyncClient, engine: AsyncEngine, staff: Staff
) -> None:
    """R-FEED-13, R-SEC-7: a row outside the caller's permissions, another tenant's row, an
    unknown uuid and a malformed id all answer the same 404, never 403, and write no receipt."""
    history = await staff.role("history", [READ])
    await staff.person("ana", [history])
    headers = staff.auth("ana", "history")
    invisible = await staff.publish(FAILURES)
    other = Staff(engine, staff.settings, f"t-{uuid.uuid4().hex[:12]}")
    foreign = await other.publish(READ)

    bodies = []
    for target in (invisible, foreign, str(uuid.uuid4()), "not-a-uuid"):
        response = await client.post(f"{FEED}/{target}/read", headers=headers)
        assert response.status_code == 404
        bodies.append(response.json())
    assert all(body == bodies[0] for body in bodies)
    assert bodies[0]["error"]["code"] == "FEED_NOTIFICATION_NOT_FOUND"
    assert await staff.receipts() == set()
    assert await other.receipts() == set()


async def test_read_all_marks_only_what_the_caller_can_see(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-12: read-all writes receipts for visible rows only, so a row the caller gains the
    permission for later still arrives unread."""
    history = await staff.role("history", [READ])
    ana_id = await staff.person("ana", [history])
    headers = staff.auth("ana", "history")
    visible = await staff.publish_many(READ, 3)
    hidden = await staff.publish(FAILURES)
    await client.post(f"{FEED}/{visible[0]}/read", headers=headers)

    response = await client.post(f"{FEED}/read-all", headers=headers)
    assert response.status_code == 200
    assert response.json() == {"updated": 2}
    assert await staff.receipts() == {(v, ana_id) for v in visible}
    assert (await client.post(f"{FEED}/read-all", headers=headers)).json() == {"updated": 0}

    await staff.set_permissions(history, [READ, FAILURES])
    assert await ids(client, headers, unreadOnly="true") == [hidden]
    assert await unread(client, headers) == 1


async def test_an_api_key_operator_lists_without_read_state(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-3, R-FEED-8: an admin API key is a superadmin with no person: it lists every row
    with readAt null, and the routes that read or write receipts answer 403
    FEED_READER_REQUIRED instead of inventing a reader."""
    history = await staff.role("history", [READ])
    await staff.person("ana", [history])
    rows = [await staff.publish(READ), await staff.publish(FAILURES)]
    await client.post(f"{FEED}/{rows[0]}/read", headers=staff.auth("ana", "history"))
    key = await staff.key("admin")

    page = (await client.get(FEED, headers=key)).json()
    assert [i["id"] for i in page["items"]] == rows[::-1]
    assert [i["readAt"] for i in page["items"]] == [None, None]
    for response in (
        await client.get(f"{FEED}/unread-count", headers=key),
        await client.get(FEED, headers=key, params={"unreadOnly": "true"}),
        await client.post(f"{FEED}/{rows[1]}/read", headers=key),
        await client.post(f"{FEED}/read-all", headers=key),
    ):
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "FEED_READER_REQUIRED"
    assert len(await staff.receipts()) == 1


async def test_operator_routes_need_credentials(client: AsyncClient, staff: Staff) -> None:
    """R-SEC-2: the permission-exempt feed routes still authenticate the caller."""
    row = await staff.publish(READ)
    for method, path in (
        ("GET", FEED),
        ("GET", f"{FEED}/unread-count"),
        ("POST", f"{FEED}/{row}/read"),
        ("POST", f"{FEED}/read-all"),
    ):
        assert (await client.request(method, path)).status_code == 401
    writer = await staff.key("feed:write")
    assert (await client.get(FEED, headers=writer)).status_code == 403


# -- paging ----------------------------------------------------------------------------------


async def test_keyset_pages_walk_rows_sharing_a_timestamp(
    client: AsyncClient, staff: Staff
) -> None:
    """R-FEED-6: the list pages by (occurred_at DESC, id DESC): rows published in one
    transaction share occurred_at and still appear once each, in order, across pages."""
    history = await staff.role("history", [READ])
    await staff.person("ana", [history])
    headers = staff.auth("ana", "history")
    older = await staff.publish(READ, occurred_at=datetime.now(UTC) - timedelta(days=1))
    same = await staff.publish_many(READ, 5)

    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get(FEED, headers=headers, params=params)).json()
        seen += [item["id"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [*same[::-1], older]


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"pagination": "false"}, "PAGINATION_REQUIRED"),
        ({"limit": "101"}, "REQUEST_MALFORMED"),
        ({"limit": "0"}, "REQUEST_MALFORMED"),
        ({"limit": "ten"}, "REQUEST_MALFORMED"),
        ({"cursor": "garbage"}, "CURSOR_INVALID"),
        ({"unreadOnly": "maybe"}, "REQUEST_MALFORMED"),
    ],
)
async def test_list_parameters_are_refused_with_a_code(
    client: AsyncClient, staff: Staff, params: dict[str, str], code: str
) -> None:
    """R-FEED-6: the feed is always paged and bounded: pagination=false, an out-of-range limit
    and a cursor the list did not issue are refused with their codes (422 where the value breaks
    the published schema, 400 where only the list can tell)."""
    history = await staff.role("history", [READ])
    await staff.person("ana", [history])
    response = await client.get(FEED, headers=staff.auth("ana", "history"), params=params)
    assert response.status_code == (422 if code == "REQUEST_MALFORMED" else 400)
    assert response.json()["error"]["code"] == code


# -- schema ----------------------------------------------------------------------------------


async def test_deleting_a_feed_row_or_a_person_cascades_their_receipts(
    client: AsyncClient, engine: AsyncEngine, staff: Staff
) -> None:
    """R-SCHEMA-60, R-SCHEMA-45, R-SCHEMA-44: receipts go with their notification, and with
    their reader, by ON DELETE CASCADE alone."""
    history = await staff.role("history", [READ])
    ana_id = await staff.person("ana", [history])
    ben_id = await staff.person("ben", [history])
    first, second = await staff.publish(READ), await staff.publish(READ)
    for name in ("ana", "ben"):
        await client.post(f"{FEED}/read-all", headers=staff.auth(name, "history"))
    assert len(await staff.receipts()) == 4

    async with engine.begin() as conn:
        await conn.execute(
            delete(s.feed_notification).where(s.feed_notification.c.public_id == uuid.UUID(first))
        )
    assert await staff.receipts() == {(second, ana_id), (second, ben_id)}

    async with engine.begin() as conn:
        await conn.execute(delete(s.person).where(s.person.c.id == ben_id))
    assert await staff.receipts() == {(second, ana_id)}


async def test_the_feed_tables_touch_no_write_time_table(engine: AsyncEngine) -> None:
    """R-SCHEMA-2, R-SCHEMA-1: no foreign key joins the feed cluster to notification_event,
    notification_recipient or notification_delivery (or anything but person), in either
    direction; the read table's keys are (notification_id, user_id)."""
    async with engine.connect() as conn:
        rows = (
            await conn.execute(
                text(
                    "SELECT conrelid::regclass::text AS child, confrelid::regclass::text AS parent,"
                    " confdeltype FROM pg_constraint WHERE contype = 'f' AND"
                    " (conrelid::regclass::text LIKE 'feed_%' OR"
                    "  confrelid::regclass::text LIKE 'feed_%')"
                )
            )
        ).all()
        primary_key = (
            await conn.execute(
                text(
                    "SELECT array_agg(a.attname::text ORDER BY k.ord) FROM pg_constraint c,"
                    " unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)"
                    " JOIN pg_attribute a ON a.attnum = k.attnum"
                    " WHERE c.contype = 'p' AND c.conrelid = 'feed_notification_read'::regclass"
                    " AND a.attrelid = c.conrelid"
                )
            )
        ).scalar_one()
    links = {(row.child, row.parent, row.confdeltype) for row in rows}
    assert links == {
        ("feed_notification_read", "feed_notification", "c"),
        ("feed_notification_read", "person", "c"),
    }
    assert primary_key == ["notification_id", "user_id"]


async def test_feed_queries_join_no_write_time_table(
    client: AsyncClient, engine: AsyncEngine, staff: Staff
) -> None:
    """R-SCHEMA-2: no feed query reads the write-time cluster."""
    history = await staff.role("history", [READ])
    await staff.person("ana", [history])
    headers = staff.auth("ana", "history")
    row = await staff.publish(READ)
    with statements(engine) as sent:
        await client.get(FEED, headers=headers)
        await client.get(f"{FEED}/unread-count", headers=headers)
        await client.post(f"{FEED}/{row}/read", headers=headers)
        await client.post(f"{FEED}/read-all", headers=headers)
    queries = [sql for sql in sent if "feed_notification" in sql]
    assert len(queries) == 4
    for sql in queries:
        assert "notification_event" not in sql
        assert "notification_recipient" not in sql
        assert "notification_delivery" not in sql


async def test_one_read_receipt_per_reader_and_row(engine: AsyncEngine, staff: Staff) -> None:
    """R-SCHEMA-44: the receipt's primary key is (notification_id, user_id): a second receipt for
    the same pair is refused by the database, and read_at defaults to now()."""
    person_id = await staff.person("ana")
    row = await staff.publish(READ)
    n, nr = s.feed_notification, s.feed_notification_read
    async with engine.begin() as conn:
        notification_id = (
            await conn.execute(select(n.c.id).where(n.c.public_id == uuid.UUID(row)))
        ).scalar_one()
        read_at = (
            await conn.execute(
                insert(nr)
                .values(notification_id=notification_id, user_id=person_id)
                .returning(nr.c.read_at)
            )
        ).scalar_one()
    assert read_at is not None

    with pytest.raises(IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(
                insert(nr).values(notification_id=notification_id, user_id=person_id)
            )
