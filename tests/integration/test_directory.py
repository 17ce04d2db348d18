"""The directory surface over HTTP (and its library functions) against real PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth.service import create_api_key
from herald.db import schema as s
from herald.directory import service as directory
from herald.errors import DirectoryValueInvalid

Headers = dict[str, str]


async def api_key(engine: AsyncEngine, tenant: str, scopes: Sequence[str]) -> Headers:
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=list(scopes))
    return {"Authorization": f"Bearer {key}"}


async def define_roles(client: AsyncClient, auth: Headers, *codes: str) -> None:
    for code in codes:
        scope = "guardian" if code == "guardian" else "staff"
        answer = await client.put(f"/v1/roles/{code}", json={"scopeKind": scope}, headers=auth)
        assert answer.status_code in (200, 201), answer.text


async def person_rows(engine: AsyncEngine, tenant: str) -> list[Any]:
    async with engine.connect() as conn:
        return list(
            await conn.execute(
                select(s.person).where(s.person.c.tenant_id == tenant).order_by(s.person.c.id)
            )
        )


async def role_codes_of(engine: AsyncEngine, tenant: str, external_id: str) -> set[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(s.role.c.code)
            .select_from(
                s.person_role.join(s.person, s.person.c.id == s.person_role.c.person_id).join(
                    s.role, s.role.c.id == s.person_role.c.role_id
                )
            )
            .where(s.person.c.tenant_id == tenant, s.person.c.external_id == external_id)
        )
        return {r.code for r in rows}


def error_code(answer: Any) -> str:
    code: str = answer.json()["error"]["code"]
    return code


# ---------------------------------------------------------------------------------------------
# People


async def test_put_person_twice_is_one_row(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """The same PUT twice: one row, 201 created then 200 not created, same public id."""
    body = {
        "fullName": "Asha Gurung",
        "email": "asha@example.np",
        "phone": "+977 9800000001",
        "locale": "ne",
        "timezone": "Asia/Kathmandu",
        "country": "np",
        "status": "limited",
        "telegramChatId": 12345,
    }
    first = await client.put("/v1/people/p-1", json=body, headers=auth)
    assert first.status_code == 201, first.text
    assert first.json()["created"] is True
    assert first.json()["externalId"] == "p-1"
    second = await client.put("/v1/people/p-1", json=body, headers=auth)
    assert second.status_code == 200, second.text
    assert second.json() == {**first.json(), "created": False}

    (row,) = await person_rows(engine, tenant)
    assert str(row.public_id) == first.json()["id"]
    assert (row.full_name, row.email, row.locale, row.timezone) == (
        "Asha Gurung",
        "asha@example.np",
        "ne",
        "Asia/Kathmandu",
    )
    assert (row.country, row.status, row.telegram_chat_id) == ("NP", "limited", "12345")
    assert row.deleted_at is None


async def test_put_person_replaces_the_whole_record(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """A PUT is the person's whole record: a field left out returns to its default."""
    await client.put(
        "/v1/people/p-1",
        json={"fullName": "A", "email": "a@example.np", "locale": "ne", "status": "suspended"},
        headers=auth,
    )
    answer = await client.put("/v1/people/p-1", json={"fullName": "A"}, headers=auth)
    assert answer.status_code == 200
    (row,) = await person_rows(engine, tenant)
    assert (row.email, row.locale, row.status) == (None, "en", "active")


async def test_delete_person_is_soft_and_put_revives(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-AUD-6: deletion sets deleted_at (the row stays for history); a re-PUT revives it."""
    created = (await client.put("/v1/people/p-1", json={"fullName": "A"}, headers=auth)).json()

    assert (await client.delete("/v1/people/p-1", headers=auth)).status_code == 204
    (row,) = await person_rows(engine, tenant)
    assert row.deleted_at is not None
    first_deleted_at = row.deleted_at

    # Idempotent: deleting again answers 204 and keeps the first deletion time.
    assert (await client.delete("/v1/people/p-1", headers=auth)).status_code == 204
    (row,) = await person_rows(engine, tenant)
    assert row.deleted_at == first_deleted_at

    revived = await client.put("/v1/people/p-1", json={"fullName": "A"}, headers=auth)
    assert revived.status_code == 200
    assert revived.json() == {"id": created["id"], "externalId": "p-1", "created": False}
    (row,) = await person_rows(engine, tenant)
    assert row.deleted_at is None


async def test_delete_unknown_person_is_404(client: AsyncClient, auth: Headers) -> None:
    answer = await client.delete("/v1/people/nobody", headers=auth)
    assert answer.status_code == 404
    assert error_code(answer) == "PERSON_NOT_FOUND"


async def test_roles_are_replaced(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """`roles` is the person's whole role set: a PUT adds the new and removes the missing."""
    await define_roles(client, auth, "teacher", "guardian", "admin")
    put = await client.put("/v1/people/p-1", json={"roles": ["teacher", "guardian"]}, headers=auth)
    assert put.status_code == 201
    assert await role_codes_of(engine, tenant, "p-1") == {"teacher", "guardian"}

    put = await client.put(
        "/v1/people/p-1", json={"roles": ["guardian", "admin", "admin"]}, headers=auth
    )
    assert put.status_code == 200
    assert await role_codes_of(engine, tenant, "p-1") == {"guardian", "admin"}

    await client.put("/v1/people/p-1", json={}, headers=auth)
    assert await role_codes_of(engine, tenant, "p-1") == set()


async def test_unknown_role_is_409_and_writes_nothing(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """An unknown role code refuses the whole PUT: no new person, no change to an existing one."""
    await define_roles(client, auth, "teacher")
    answer = await client.put(
        "/v1/people/p-new", json={"fullName": "N", "roles": ["teacher", "wizard"]}, headers=auth
    )
    assert answer.status_code == 409
    assert error_code(answer) == "DIRECTORY_ROLE_UNKNOWN"
    assert "wizard" in answer.json()["error"]["message"]
    assert await person_rows(engine, tenant) == []

    await client.put("/v1/people/p-1", json={"fullName": "Old", "roles": ["teacher"]}, headers=auth)
    answer = await client.put(
        "/v1/people/p-1", json={"fullName": "New", "roles": ["wizard"]}, headers=auth
    )
    assert answer.status_code == 409
    (row,) = await person_rows(engine, tenant)
    assert row.full_name == "Old"
    assert await role_codes_of(engine, tenant, "p-1") == {"teacher"}


async def test_new_telegram_chat_resets_can_write(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """A block recorded against one chat holds while the chat stays; a new chat clears it."""
    await client.put("/v1/people/p-1", json={"telegramChatId": "100"}, headers=auth)
    async with engine.begin() as conn:
        await conn.execute(
            update(s.person).where(s.person.c.tenant_id == tenant).values(telegram_can_write=False)
        )
    await client.put("/v1/people/p-1", json={"telegramChatId": "100"}, headers=auth)
    assert (await person_rows(engine, tenant))[0].telegram_can_write is False
    await client.put("/v1/people/p-1", json={"telegramChatId": "200"}, headers=auth)
    assert (await person_rows(engine, tenant))[0].telegram_can_write is True


@pytest.mark.parametrize(
    "body",
    [
        {"fullName": "A", "nickname": "x"},
        {"status": "deleted"},
        {"country": "NPL"},
        {"timezone": "Mars/Olympus"},
        {"email": "not-an-address"},
        {"locale": "english please"},
        {"roles": ["has space"]},
        {"fullName": "nul\u0000byte"},
    ],
)
async def test_malformed_person_is_422(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers, body: dict[str, Any]
) -> None:
    """R-SEC-13: unknown or malformed fields are refused by the strict schema; nothing written."""
    answer = await client.put("/v1/people/p-1", json=body, headers=auth)
    assert answer.status_code == 422, answer.text
    assert error_code(answer) == "REQUEST_MALFORMED"
    assert await person_rows(engine, tenant) == []


async def test_refused_value_from_the_database_is_400_not_500(
    engine: AsyncEngine, tenant: str
) -> None:
    """A value that slips past the schema (model_copy does not validate) meets the CHECK, and
    the driver error becomes DIRECTORY_VALUE_INVALID."""
    sneaky = directory.PersonInput(full_name="A").model_copy(update={"status": "deleted"})
    async with engine.connect() as conn:
        with pytest.raises(DirectoryValueInvalid) as caught:
            await directory.upsert_person(conn, tenant, "p-1", sneaky)
        await conn.rollback()
    assert caught.value.status == 400
    assert "person_status_check" in caught.value.message


# ---------------------------------------------------------------------------------------------
# Batch


def batch_person(i: int, **extra: Any) -> dict[str, Any]:
    return {"externalId": f"b-{i:04d}", "fullName": f"Person {i}", **extra}


async def test_batch_creates_and_updates(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    await define_roles(client, auth, "teacher", "guardian")
    await client.put("/v1/people/b-0001", json={"fullName": "Before"}, headers=auth)
    await client.delete("/v1/people/b-0001", headers=auth)
    answer = await client.post(
        "/v1/people:batch",
        json={
            "people": [
                batch_person(1, roles=["teacher"]),
                batch_person(2, roles=["guardian", "teacher"]),
                batch_person(3),
            ]
        },
        headers=auth,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"created": 2, "updated": 1}
    rows = {r.external_id: r for r in await person_rows(engine, tenant)}
    assert set(rows) == {"b-0001", "b-0002", "b-0003"}
    assert rows["b-0001"].full_name == "Person 1"
    assert rows["b-0001"].deleted_at is None
    assert await role_codes_of(engine, tenant, "b-0001") == {"teacher"}
    assert await role_codes_of(engine, tenant, "b-0002") == {"guardian", "teacher"}
    assert await role_codes_of(engine, tenant, "b-0003") == set()


async def test_batch_of_1000_is_accepted_and_1001_refused(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """The cap is 1,000 people: one more is 400 DIRECTORY_BATCH_TOO_LARGE, nothing written."""
    await define_roles(client, auth, "teacher")
    too_many = [batch_person(i) for i in range(1001)]
    answer = await client.post("/v1/people:batch", json={"people": too_many}, headers=auth)
    assert answer.status_code == 400
    assert error_code(answer) == "DIRECTORY_BATCH_TOO_LARGE"
    assert await person_rows(engine, tenant) == []

    answer = await client.post(
        "/v1/people:batch",
        json={"people": [batch_person(i, roles=["teacher"]) for i in range(1000)]},
        headers=auth,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"created": 1000, "updated": 0}
    async with engine.connect() as conn:
        grants = await conn.scalar(
            select(func.count())
            .select_from(s.person_role)
            .where(s.person_role.c.tenant_id == tenant)
        )
    assert grants == 1000


@pytest.mark.parametrize(
    ("bad_row", "status", "code"),
    [
        ({"roles": ["wizard"]}, 409, "DIRECTORY_ROLE_UNKNOWN"),
        ({"status": "gone"}, 422, "REQUEST_MALFORMED"),
        ({"externalId": "b-0000"}, 400, "DIRECTORY_BATCH_DUPLICATE"),
    ],
)
async def test_batch_with_one_bad_row_writes_nothing(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    auth: Headers,
    bad_row: dict[str, Any],
    status: int,
    code: str,
) -> None:
    """All or nothing: the last of fifty rows is bad, and none of the fifty is written."""
    await define_roles(client, auth, "teacher")
    people = [batch_person(i, roles=["teacher"]) for i in range(49)]
    people.append(batch_person(49, **bad_row))
    answer = await client.post("/v1/people:batch", json={"people": people}, headers=auth)
    assert answer.status_code == status, answer.text
    assert error_code(answer) == code
    assert await person_rows(engine, tenant) == []


# ---------------------------------------------------------------------------------------------
# Roles and groups


async def test_put_role_upserts(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    first = await client.put(
        "/v1/roles/principal",
        json={"name": "Principal", "scopeKind": "staff", "permissions": ["feed.read"]},
        headers=auth,
    )
    assert first.status_code == 201, first.text
    assert first.json()["code"] == "principal"
    second = await client.put(
        "/v1/roles/principal",
        json={"name": "Head", "scopeKind": "staff", "permissions": ["a", "b"], "superadmin": True},
        headers=auth,
    )
    assert second.status_code == 200
    assert second.json() == {**first.json(), "created": False}
    async with engine.connect() as conn:
        (row,) = await conn.execute(select(s.role).where(s.role.c.tenant_id == tenant))
    assert (row.name, row.permissions, row.is_superadmin) == ("Head", ["a", "b"], True)

    bad = await client.put("/v1/roles/principal", json={"scopeKind": "janitor"}, headers=auth)
    assert bad.status_code == 422


async def test_group_upsert_delete_and_revive(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-AUD-7 support: a deleted group keeps its row with deleted_at; a re-PUT revives it."""
    first = await client.put("/v1/groups/class-7a", json={"name": "Class 7A"}, headers=auth)
    assert first.status_code == 201
    assert (await client.delete("/v1/groups/class-7a", headers=auth)).status_code == 204
    assert (await client.delete("/v1/groups/class-7a", headers=auth)).status_code == 204
    async with engine.connect() as conn:
        (row,) = await conn.execute(
            select(s.person_group).where(s.person_group.c.tenant_id == tenant)
        )
    assert row.deleted_at is not None
    revived = await client.put(
        "/v1/groups/class-7a", json={"name": "Class 7 A", "kind": "section"}, headers=auth
    )
    assert revived.status_code == 200
    assert revived.json() == {"id": first.json()["id"], "externalId": "class-7a", "created": False}
    async with engine.connect() as conn:
        (row,) = await conn.execute(
            select(s.person_group).where(s.person_group.c.tenant_id == tenant)
        )
    assert (row.name, row.kind, row.deleted_at) == ("Class 7 A", "section", None)

    missing = await client.delete("/v1/groups/class-9z", headers=auth)
    assert missing.status_code == 404
    assert error_code(missing) == "GROUP_NOT_FOUND"


# ---------------------------------------------------------------------------------------------
# Memberships and guardianships


async def membership_row(engine: AsyncEngine, tenant: str) -> Any:
    async with engine.connect() as conn:
        rows = list(
            await conn.execute(
                select(s.group_membership).where(s.group_membership.c.tenant_id == tenant)
            )
        )
    assert len(rows) == 1
    return rows[0]


async def test_membership_soft_delete_and_revive(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-AUD-7 support: removal sets deleted_at on the membership; a re-PUT revives the row."""
    await client.put("/v1/groups/class-7a", json={"name": "7A"}, headers=auth)
    await client.put("/v1/people/s-1", json={}, headers=auth)
    url = "/v1/groups/class-7a/members/s-1"

    put = await client.put(url, json={"memberRole": "student"}, headers=auth)
    assert put.status_code == 201, put.text
    assert put.json() == {
        "groupExternalId": "class-7a",
        "personExternalId": "s-1",
        "memberRole": "student",
        "created": True,
    }
    again = await client.put(url, json={"memberRole": "teacher"}, headers=auth)
    assert again.status_code == 200
    assert (await membership_row(engine, tenant)).member_role == "teacher"

    assert (await client.delete(url, headers=auth)).status_code == 204
    assert (await membership_row(engine, tenant)).deleted_at is not None
    assert (await client.delete(url, headers=auth)).status_code == 204

    revived = await client.put(url, json={"memberRole": "student"}, headers=auth)
    assert revived.status_code == 200
    assert revived.json()["created"] is False
    row = await membership_row(engine, tenant)
    assert (row.member_role, row.deleted_at) == ("student", None)


async def test_membership_needs_live_group_and_person(client: AsyncClient, auth: Headers) -> None:
    await client.put("/v1/groups/class-7a", json={"name": "7A"}, headers=auth)
    await client.put("/v1/people/s-1", json={}, headers=auth)
    body = {"memberRole": "student"}

    answer = await client.put("/v1/groups/nope/members/s-1", json=body, headers=auth)
    assert (answer.status_code, error_code(answer)) == (404, "GROUP_NOT_FOUND")
    answer = await client.put("/v1/groups/class-7a/members/nobody", json=body, headers=auth)
    assert (answer.status_code, error_code(answer)) == (404, "PERSON_NOT_FOUND")
    answer = await client.delete("/v1/groups/class-7a/members/s-1", headers=auth)
    assert (answer.status_code, error_code(answer)) == (404, "MEMBERSHIP_NOT_FOUND")

    await client.delete("/v1/people/s-1", headers=auth)
    answer = await client.put("/v1/groups/class-7a/members/s-1", json=body, headers=auth)
    assert (answer.status_code, error_code(answer)) == (404, "PERSON_NOT_FOUND")
    await client.put("/v1/people/s-1", json={}, headers=auth)
    await client.delete("/v1/groups/class-7a", headers=auth)
    answer = await client.put("/v1/groups/class-7a/members/s-1", json=body, headers=auth)
    assert (answer.status_code, error_code(answer)) == (404, "GROUP_NOT_FOUND")

    answer = await client.put(
        "/v1/groups/class-7a/members/s-1", json={"memberRole": "janitor"}, headers=auth
    )
    assert answer.status_code == 422


async def test_guardianship_soft_delete_and_revive(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """R-AUD-7 support: a removed guardianship keeps its row with deleted_at; re-PUT revives."""
    await client.put("/v1/people/s-1", json={}, headers=auth)
    await client.put("/v1/people/g-1", json={}, headers=auth)
    url = "/v1/guardianships/s-1/g-1"

    put = await client.put(url, headers=auth)
    assert put.status_code == 201, put.text
    assert put.json() == {
        "studentExternalId": "s-1",
        "guardianExternalId": "g-1",
        "created": True,
    }
    assert (await client.put(url, headers=auth)).status_code == 200

    assert (await client.delete(url, headers=auth)).status_code == 204
    assert (await client.delete(url, headers=auth)).status_code == 204
    async with engine.connect() as conn:
        (row,) = await conn.execute(
            select(s.guardianship).where(s.guardianship.c.tenant_id == tenant)
        )
    assert row.deleted_at is not None

    revived = await client.put(url, headers=auth)
    assert revived.status_code == 200
    assert revived.json()["created"] is False
    async with engine.connect() as conn:
        (row,) = await conn.execute(
            select(s.guardianship).where(s.guardianship.c.tenant_id == tenant)
        )
    assert row.deleted_at is None


async def test_guardianship_refusals(client: AsyncClient, auth: Headers) -> None:
    await client.put("/v1/people/s-1", json={}, headers=auth)
    await client.put("/v1/people/g-1", json={}, headers=auth)

    answer = await client.put("/v1/guardianships/s-1/s-1", headers=auth)
    assert (answer.status_code, error_code(answer)) == (409, "DIRECTORY_GUARDIANSHIP_SELF")
    answer = await client.put("/v1/guardianships/s-1/nobody", headers=auth)
    assert (answer.status_code, error_code(answer)) == (404, "PERSON_NOT_FOUND")
    answer = await client.delete("/v1/guardianships/s-1/g-1", headers=auth)
    assert (answer.status_code, error_code(answer)) == (404, "GUARDIANSHIP_NOT_FOUND")


# ---------------------------------------------------------------------------------------------
# Access


DIRECTORY_CALLS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("PUT", "/v1/people/p-1", {"fullName": "A"}),
    ("DELETE", "/v1/people/p-1", None),
    ("POST", "/v1/people:batch", {"people": [{"externalId": "p-1"}]}),
    ("PUT", "/v1/roles/teacher", {"scopeKind": "staff"}),
    ("PUT", "/v1/groups/g", {"name": "G"}),
    ("DELETE", "/v1/groups/g", None),
    ("PUT", "/v1/groups/g/members/p-1", {"memberRole": "student"}),
    ("DELETE", "/v1/groups/g/members/p-1", None),
    ("PUT", "/v1/guardianships/p-1/p-2", None),
    ("DELETE", "/v1/guardianships/p-1/p-2", None),
]


@pytest.mark.parametrize(("method", "url", "body"), DIRECTORY_CALLS)
async def test_directory_needs_a_directory_key(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    method: str,
    url: str,
    body: dict[str, Any] | None,
) -> None:
    """R-SEC-2: every directory route authenticates (401 without a key) and checks the
    directory:write scope (403 for a key without it); neither writes anything."""
    anonymous = await client.request(method, url, json=body)
    assert (anonymous.status_code, error_code(anonymous)) == (401, "UNAUTHENTICATED")

    other_scope = await api_key(engine, tenant, ["events:write", "events:read"])
    refused = await client.request(method, url, json=body, headers=other_scope)
    assert (refused.status_code, error_code(refused)) == (403, "FORBIDDEN")
    assert await person_rows(engine, tenant) == []


async def test_tenants_are_isolated(
    client: AsyncClient, engine: AsyncEngine, tenant: str, auth: Headers
) -> None:
    """Another tenant's key cannot see or touch this tenant's directory: its ids are 404."""
    await define_roles(client, auth, "teacher")
    mine = await client.put("/v1/people/p-1", json={"fullName": "Mine"}, headers=auth)
    await client.put("/v1/people/p-2", json={"fullName": "Mine too"}, headers=auth)
    await client.put("/v1/groups/class-7a", json={"name": "7A"}, headers=auth)

    other_tenant = f"t-{uuid.uuid4().hex[:12]}"
    theirs = await api_key(engine, other_tenant, ["directory:write"])

    answer = await client.delete("/v1/people/p-1", headers=theirs)
    assert (answer.status_code, error_code(answer)) == (404, "PERSON_NOT_FOUND")
    answer = await client.delete("/v1/groups/class-7a", headers=theirs)
    assert (answer.status_code, error_code(answer)) == (404, "GROUP_NOT_FOUND")
    answer = await client.put(
        "/v1/groups/class-7a/members/p-1", json={"memberRole": "student"}, headers=theirs
    )
    assert (answer.status_code, error_code(answer)) == (404, "GROUP_NOT_FOUND")
    answer = await client.put("/v1/guardianships/p-1/p-2", headers=theirs)
    assert (answer.status_code, error_code(answer)) == (404, "PERSON_NOT_FOUND")
    # Role codes are per tenant too.
    answer = await client.put("/v1/people/x", json={"roles": ["teacher"]}, headers=theirs)
    assert (answer.status_code, error_code(answer)) == (409, "DIRECTORY_ROLE_UNKNOWN")

    # The same external id in the other tenant is a different person.
    same_id = await client.put("/v1/people/p-1", json={"fullName": "Theirs"}, headers=theirs)
    assert same_id.status_code == 201
    assert same_id.json()["id"] != mine.json()["id"]
    rows = {r.external_id: r for r in await person_rows(engine, tenant)}
    assert rows["p-1"].full_name == "Mine"
    assert rows["p-1"].deleted_at is None


# ---------------------------------------------------------------------------------------------
# Library


async def test_library_functions_leave_the_commit_to_the_caller(
    engine: AsyncEngine, tenant: str
) -> None:
    """The service writes in the caller's transaction: rolled back, nothing remains; committed,
    everything does."""

    async def seed(conn: Any) -> None:
        await directory.upsert_role(
            conn, tenant, "guardian", directory.RoleInput(scope_kind="guardian")
        )
        result = await directory.upsert_person(
            conn, tenant, "g-1", directory.PersonInput(full_name="G", roles=["guardian"])
        )
        assert result.created
        await directory.upsert_person(conn, tenant, "s-1", directory.PersonInput(full_name="S"))
        await directory.upsert_group(conn, tenant, "7a", directory.GroupInput(name="7A"))
        assert await directory.put_membership(conn, tenant, "7a", "s-1", "student")
        assert await directory.put_guardianship(conn, tenant, "s-1", "g-1")

    async with engine.connect() as conn:
        await seed(conn)
        await conn.rollback()
    assert await person_rows(engine, tenant) == []

    async with engine.begin() as conn:
        await seed(conn)
    assert {r.external_id for r in await person_rows(engine, tenant)} == {"g-1", "s-1"}
    assert await role_codes_of(engine, tenant, "g-1") == {"guardian"}


async def _count(engine: AsyncEngine, table: Any, tenant: str, live: bool = True) -> int:
    async with engine.connect() as conn:
        query = select(func.count()).select_from(table).where(table.c.tenant_id == tenant)
        if live:
            query = query.where(table.c.deleted_at.is_(None))
        return int((await conn.execute(query)).scalar_one())


async def test_batch_memberships_and_guardianships_are_all_or_nothing(
    engine: AsyncEngine, tenant: str
) -> None:
    """The set-based forms the importer uses: new rows counted, a re-put revives and counts
    nothing new, and one unknown person or a self-guardianship writes nothing of the batch."""
    from herald.errors import DirectoryGuardianshipSelf, PersonNotFound

    async with engine.begin() as conn:
        await directory.upsert_group(conn, tenant, "7a", directory.GroupInput(name="7A"))
        for eid in ("s1", "s2", "g1"):
            await directory.upsert_person(conn, tenant, eid, directory.PersonInput())
        assert (
            await directory.put_memberships(
                conn, tenant, [("7a", "s1", "student"), ("7a", "s2", "student")]
            )
            == 2
        )
        assert await directory.put_guardianships(conn, tenant, [("s1", "g1"), ("s2", "g1")]) == 2
        await directory.delete_membership(conn, tenant, "7a", "s2")
        await directory.delete_guardianship(conn, tenant, "s2", "g1")
        # Revived and re-put: nothing new.
        assert (
            await directory.put_memberships(
                conn, tenant, [("7a", "s1", "teacher"), ("7a", "s2", "student")]
            )
            == 0
        )
        assert await directory.put_guardianships(conn, tenant, [("s1", "g1"), ("s2", "g1")]) == 0
    assert await _count(engine, s.group_membership, tenant) == 2
    assert await _count(engine, s.guardianship, tenant) == 2

    with pytest.raises(PersonNotFound):
        async with engine.begin() as conn:
            await directory.put_memberships(
                conn, tenant, [("7a", "g1", "student"), ("7a", "nobody", "student")]
            )
    with pytest.raises(DirectoryGuardianshipSelf):
        async with engine.begin() as conn:
            await directory.put_guardianships(conn, tenant, [("g1", "s1"), ("g1", "g1")])
    assert await _count(engine, s.group_membership, tenant, live=False) == 2
    assert await _count(engine, s.guardianship, tenant, live=False) == 2
