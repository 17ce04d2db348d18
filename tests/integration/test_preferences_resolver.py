"""Preference loading and resolution against real PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.db import schema as s
from herald.kinds import Kind
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.preferences.service import PreferenceSnapshot, load_preferences


def registered(name: str) -> Kind:
    kind = SAMPLE_REGISTRY.get(name)
    assert kind is not None
    return kind


ASSIGNMENT = registered("assignment.published")  # academic
ANNOUNCEMENT = registered("announcement.posted")  # announcement
TRANSPORT = registered("transport.delay")  # transport
PASSWORD_RESET = registered("auth.password_reset")  # security, unsuppressible


async def seed_people(engine: AsyncEngine, tenant: str, n: int) -> list[int]:
    async with engine.begin() as conn:
        rows = await conn.execute(
            insert(s.person).returning(s.person.c.id, sort_by_parameter_order=True),
            [{"tenant_id": tenant, "external_id": f"p{i}"} for i in range(n)],
        )
        return [int(r.id) for r in rows]


async def seed_rows(
    engine: AsyncEngine,
    tenant: str,
    *,
    switches: Sequence[tuple[int, str, bool]] = (),
    overrides: Sequence[tuple[int, str, str, bool]] = (),
) -> None:
    async with engine.begin() as conn:
        if switches:
            await conn.execute(
                insert(s.notification_channel_preference),
                [
                    {"tenant_id": tenant, "person_id": p, "channel": c, "enabled": e}
                    for p, c, e in switches
                ],
            )
        if overrides:
            await conn.execute(
                insert(s.notification_preference),
                [
                    {
                        "tenant_id": tenant,
                        "person_id": p,
                        "category": cat,
                        "channel": c,
                        "enabled": e,
                    }
                    for p, cat, c, e in overrides
                ],
            )


@contextmanager
def counting_statements(engine: AsyncEngine) -> Iterator[list[str]]:
    """Every statement the engine sends while the block runs."""
    statements: list[str] = []

    def record(*args: Any) -> None:
        statements.append(args[2])

    event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine.sync_engine, "before_cursor_execute", record)


async def load(engine: AsyncEngine, person_ids: list[int]) -> PreferenceSnapshot:
    async with engine.connect() as conn:
        return await load_preferences(conn, person_ids)


async def test_a_category_override_beats_a_global_mute_and_security_ignores_both(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-PREF-2, R-PREF-4, R-PREF-8: email muted globally, academic email switched back on:
    academic email is sent, announcement and transport email are not, the unsuppressible
    password reset is; a person with no rows gets the code defaults."""
    muted, untouched = await seed_people(engine, tenant, 2)
    await seed_rows(
        engine,
        tenant,
        switches=[(muted, "email", False)],
        overrides=[(muted, "academic", "email", True)],
    )

    prefs = await load(engine, [muted, untouched])

    assert prefs.allows(muted, ASSIGNMENT, "email") is True
    assert prefs.allows(muted, ANNOUNCEMENT, "email") is False
    assert prefs.allows(muted, TRANSPORT, "push") is True  # only email was muted
    assert prefs.allows(muted, PASSWORD_RESET, "email") is True
    assert prefs.allows(untouched, ANNOUNCEMENT, "email") is True
    assert prefs.allows(untouched, TRANSPORT, "email") is False  # transport email defaults off
    assert prefs.allows(untouched, ANNOUNCEMENT, "sms") is False  # R-PREF-11


async def test_a_batch_of_500_loads_in_exactly_two_queries(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-PREF-5: two statements per batch whatever its size — never one per person or channel
    — each binding the whole batch as one array parameter."""
    people = await seed_people(engine, tenant, 500)
    await seed_rows(
        engine,
        tenant,
        switches=[(p, "email", False) for p in people[::3]]
        + [(p, "push", False) for p in people[::7]],
        overrides=[(p, "academic", "email", True) for p in people[::5]]
        + [(p, "finance", "sms", True) for p in people[::11]],
    )

    for batch in (people, people[:1]):
        async with engine.connect() as conn:
            with counting_statements(engine) as statements:
                prefs = await load_preferences(conn, batch)
        assert len(statements) == 2, statements
        assert all("ANY" in sql for sql in statements)
        assert {"notification_channel_preference", "notification_preference"} == {
            sql.split("FROM ", 1)[1].split()[0] for sql in statements
        }

    prefs = await load(engine, people)
    for i, p in enumerate(people):
        email_on = i % 5 == 0 or i % 3 != 0
        assert prefs.allows(p, ASSIGNMENT, "email") is email_on
        assert prefs.allows(p, ANNOUNCEMENT, "email") is (i % 3 != 0)
        assert prefs.allows(p, ANNOUNCEMENT, "push") is (i % 7 != 0)
        assert prefs.allows(p, registered("fee.due"), "sms") is (i % 11 == 0)


async def test_an_empty_batch_needs_no_query(engine: AsyncEngine) -> None:
    """R-PREF-5: nothing to load, nothing sent; the snapshot falls back to the defaults."""
    async with engine.connect() as conn:
        with counting_statements(engine) as statements:
            prefs = await load_preferences(conn, [])
    assert statements == []
    assert prefs.allows(1, ANNOUNCEMENT, "email") is True


async def test_loading_reads_only_and_keeps_nothing(engine: AsyncEngine, tenant: str) -> None:
    """R-PREF-13, R-PREF-16: loading writes no row (it runs in a READ ONLY transaction) and
    caches nothing: the next batch sees a change saved in between."""
    (person,) = await seed_people(engine, tenant, 1)
    async with engine.connect() as conn:
        await conn.begin()
        await conn.execute(text("SET TRANSACTION READ ONLY"))
        before = await load_preferences(conn, [person])
        await conn.rollback()
    assert before.allows(person, ANNOUNCEMENT, "email") is True
    async with engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM notification_preference WHERE tenant_id = :t"),
            {"t": tenant},
        )
    assert count == 0

    await seed_rows(engine, tenant, switches=[(person, "email", False)])
    after = await load(engine, [person])
    assert after.allows(person, ANNOUNCEMENT, "email") is False
    assert before.allows(person, ANNOUNCEMENT, "email") is True  # a value, not a live view
