"""A person's own hour (issue 45 items 2 and 3) against real PostgreSQL.

deliverAt: an event fanned out now is due for each recipient at 09:00 on their own wall clock
(their directory zone, else HERALD_DEFAULT_TIMEZONE) — the email's queue row and the in-app row
alike, and the inbox shows nothing before then. Quiet hours: an SMS due inside them is held on
the queue until their end, in the claim's transaction, and sent once due again; a retry that
comes due inside them waits too; a one-time code ignores them; the inbox is written at once.

The clock is moved the way the reminder tests move it (tests/integration/test_scheduler.py):
by moving the rows' due times, never by sleeping — "09:00 has come for this person" is their
rows' next_attempt_at set to the database's now, and "the quiet hours have ended" is the held
row's due time moved back a whole day to the end of yesterday's window (outside it, and due).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

import pytest
from httpx import AsyncClient
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth.service import create_api_key, sign_token
from herald.channels.base import ProviderOutcome
from herald.config import Settings
from herald.db import schema as s
from herald.delivery.worker import deliver_batch
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.maintenance.service import run_tick
from herald.scheduling import clock
from herald.secrets import service as secrets
from herald.secrets.vault import Vault
from herald.sending.service import SendInput, asend
from tests import seed
from tests.integration.test_admin_history import admin_key_headers
from tests.integration.test_delivery import ScriptedProvider
from tests.integration.test_fanout import ANNOUNCE, run_to_completion

KATHMANDU, LONDON = "Asia/Kathmandu", "Europe/London"
NINE = time(9)
PREFS = "/v1/me/preferences"


async def db_now(engine: AsyncEngine) -> datetime:
    async with engine.connect() as conn:
        value: datetime = (await conn.execute(select(func.now()))).scalar_one()
        return value


async def resident(
    engine: AsyncEngine, tenant: str, external_id: str, zone: str | None, *, sms: bool = False
) -> seed.Person:
    """A person with a phone in `zone` (None: the directory names none)."""
    async with engine.begin() as conn:
        who = await seed.person(conn, tenant, external_id, full_name=external_id.title())
        await conn.execute(
            update(s.person)
            .where(s.person.c.id == who.id)
            .values(timezone=zone, phone="+9779841000001")
        )
        if sms:  # SMS announcements are off by default (R-PREF-11): this person opted in
            await conn.execute(
                s.notification_preference.insert().values(
                    tenant_id=tenant,
                    person_id=who.id,
                    category="announcement",
                    channel="sms",
                    enabled=True,
                )
            )
    return who


async def rows_of(engine: AsyncEngine, tenant: str) -> dict[tuple[str, str], dict[str, Any]]:
    """(external id, channel) → the delivery with its queue row's due time (None: none)."""
    d, r, p, q = (
        s.notification_delivery,
        s.notification_recipient,
        s.person,
        s.notification_delivery_queue,
    )
    query = (
        select(
            p.c.external_id,
            d.c.channel,
            d.c.status,
            d.c.next_attempt_at,
            d.c.attempts,
            q.c.next_attempt_at.label("queue_due"),
            q.c.claimed_at.label("queue_claimed"),
        )
        .select_from(
            d.join(r, r.c.id == d.c.recipient_id)
            .join(p, p.c.id == r.c.user_id)
            .outerjoin(q, q.c.delivery_id == d.c.id)
        )
        .where(d.c.tenant_id == tenant)
    )
    async with engine.connect() as conn:
        return {
            (row.external_id, row.channel): dict(row._mapping) for row in await conn.execute(query)
        }


async def move_due(engine: AsyncEngine, tenant: str, external_id: str, to: Any) -> None:
    """The test clock hook: `to(column)` becomes the due time of the person's rows."""
    d, r, p, q = (
        s.notification_delivery,
        s.notification_recipient,
        s.person,
        s.notification_delivery_queue,
    )
    ids = (
        select(d.c.id)
        .join(r, r.c.id == d.c.recipient_id)
        .join(p, p.c.id == r.c.user_id)
        .where(d.c.tenant_id == tenant, p.c.external_id == external_id)
    )
    async with engine.begin() as conn:
        await conn.execute(
            update(q)
            .where(q.c.delivery_id.in_(ids))
            .values(next_attempt_at=to(q.c.next_attempt_at))
        )
        await conn.execute(
            update(d).where(d.c.id.in_(ids)).values(next_attempt_at=to(d.c.next_attempt_at))
        )


def deliver(
    engine: AsyncEngine, provider: Any, vault: Vault, settings: Settings, tenant: str
) -> Callable[[], Any]:
    async def run() -> int:
        return await deliver_batch(
            engine,
            provider.channel,
            provider,
            registry=SAMPLE_REGISTRY,
            vault=vault,
            settings=settings,
            tenant_id=tenant,
        )

    return run


async def inbox(client: AsyncClient, settings: Settings, tenant: str, who: str) -> list[Any]:
    token = sign_token(settings, tenant_id=tenant, subject=who)
    answer = await client.get("/v1/me/notifications", headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 200, answer.text
    items: list[Any] = answer.json()["items"]
    return items


async def events_key(engine: AsyncEngine, tenant: str) -> dict[str, str]:
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["events:write"])
    return {"Authorization": f"Bearer {key}"}


def announcement(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "announcement.posted",
        "audience": {"kind": "users", "userIds": ["ktm", "ldn"]},
        "channels": ["in_app", "email"],
        "variables": ANNOUNCE,
    }
    body.update(changes)
    return body


async def event_count(engine: AsyncEngine, tenant: str) -> int:
    e = s.notification_event
    async with engine.connect() as conn:
        found = select(func.count()).select_from(e).where(e.c.tenant_id == tenant)
        return int((await conn.execute(found)).scalar_one())


# --------------------------------------------------------------------------------------------
# deliverAt


async def test_deliver_at_nine_reaches_kathmandu_and_london_at_their_own_nine(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """deliverAt {"localTime": "09:00"}: each person's email and inbox row are due at the next
    09:00 on their own clock (Kathmandu +05:45, London GMT) at or after the fan-out, the queue
    row with them; nobody's inbox shows it before then. When 09:00 comes for Kathmandu, the
    Kathmandu inbox shows it and the email is sent, while London's still wait."""
    await resident(engine, tenant, "ktm", KATHMANDU)
    await resident(engine, tenant, "ldn", LONDON)
    answer = await client.post(
        "/v1/events",
        headers=await events_key(engine, tenant),
        json=announcement(deliverAt={"localTime": "09:00"}),
    )
    assert answer.status_code == 201, answer.text
    before = await db_now(engine)
    await run_to_completion(engine, tenant)

    rows = await rows_of(engine, tenant)
    for who, zone in (("ktm", KATHMANDU), ("ldn", LONDON)):
        tz = clock.zone(zone)
        # The fan-out's moment, read by the minute: the next 09:00 from then.
        expected = clock.next_local_moment(before.replace(second=0, microsecond=0), NINE, tz)
        for channel in ("email", "in_app"):
            row = rows[(who, channel)]
            assert row["status"] == "queued", (who, channel)
            assert row["next_attempt_at"] == row["queue_due"] == expected, (who, channel)
            assert row["next_attempt_at"].astimezone(tz).time() == NINE
        assert await inbox(client, settings, tenant, who) == []
    trace = await client.get(
        f"/v1/admin/events/{answer.json()['id']}/recipients/ldn",
        headers=await admin_key_headers(engine, tenant),
    )
    email = next(d for d in trace.json()["deliveries"] if d["channel"] == "email")
    if rows[("ldn", "email")]["next_attempt_at"] > await db_now(engine):
        assert email["reasonCode"] == "waiting"
        assert email["reason"].startswith("waiting until ")

    # 09:00 comes in Kathmandu.
    await move_due(engine, tenant, "ktm", lambda _: func.now())
    told: list[Any] = []

    async def publish(notices: Any) -> None:
        told.extend(notices)

    report = await run_tick(engine, settings, backfill_channels=[], publish=publish)
    assert report.inbox_released == 1
    # The live stream hears of it as it would of a fan-out's row (no title, no body).
    assert [(n.tenant_id, n.kind) for n in told] == [(tenant, "announcement.posted")]
    provider = ScriptedProvider("email")
    assert await deliver(engine, provider, vault, settings, tenant)() == 1
    rows = await rows_of(engine, tenant)
    assert rows[("ktm", "in_app")]["status"] == "delivered"
    assert rows[("ktm", "in_app")]["queue_due"] is None
    assert rows[("ktm", "email")]["status"] == "sent"
    assert [m.to for m in provider.messages] == ["ktm@example.com"]
    assert len(await inbox(client, settings, tenant, "ktm")) == 1
    assert rows[("ldn", "in_app")]["status"] == rows[("ldn", "email")]["status"] == "queued"
    assert await inbox(client, settings, tenant, "ldn") == []


async def test_deliver_at_with_a_date_is_that_day_on_every_clock(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """With a date: 09:00 on that local day, exactly — 03:15 UTC for Kathmandu, 09:00 UTC for
    London in winter (08:00 in summer); a person whose directory has no zone, or one the IANA
    database does not know, is read on the default zone (here Kathmandu)."""
    await resident(engine, tenant, "ktm", KATHMANDU)
    await resident(engine, tenant, "ldn", LONDON)
    await resident(engine, tenant, "nowhere", None)
    await resident(engine, tenant, "mars", "Mars/Olympus")
    day = (await db_now(engine)).date() + timedelta(days=3)
    answer = await client.post(
        "/v1/events",
        headers=await events_key(engine, tenant),
        json=announcement(
            audience={"kind": "users", "userIds": ["ktm", "ldn", "nowhere", "mars"]},
            channels=["email"],
            deliverAt={"localTime": "09:00", "date": day.isoformat()},
        ),
    )
    assert answer.status_code == 201, answer.text
    await run_to_completion(engine, tenant)
    rows = await rows_of(engine, tenant)
    ktm = datetime.combine(day, time(3, 15), tzinfo=UTC)
    ldn = clock.local_moment(day, NINE, clock.zone(LONDON))
    assert ldn in (
        datetime.combine(day, time(9), tzinfo=UTC),
        datetime.combine(day, time(8), tzinfo=UTC),
    )
    assert {who: row["queue_due"] for (who, _), row in rows.items()} == {
        "ktm": ktm,
        "ldn": ldn,
        "nowhere": ktm,
        "mars": ktm,
    }


@pytest.mark.parametrize(
    "deliver_at",
    [
        {"localTime": "9:00"},
        {"localTime": "24:00"},
        {"localTime": "09:60"},
        {"localTime": "nine"},
        {"localTime": "09:00", "date": "2026-02-30"},
        {"localTime": "09:00", "date": "08/12/2026"},
        {"localTime": "09:00", "date": "2020-01-01"},  # in the past on every clock
        {"localTime": "09:00", "date": "2099-01-01"},  # more than a year ahead
        "with scheduledFor",
    ],
)
async def test_bad_deliver_at_is_a_400_and_nothing_is_stored(
    client: AsyncClient, engine: AsyncEngine, tenant: str, deliver_at: Any
) -> None:
    body = announcement(deliverAt=deliver_at)
    if deliver_at == "with scheduledFor":
        body = announcement(
            deliverAt={"localTime": "09:00"},
            scheduledFor=(datetime.now(UTC) + timedelta(hours=1)).isoformat(),
        )
    answer = await client.post("/v1/events", headers=await events_key(engine, tenant), json=body)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "NOTIFICATION_DELIVER_AT_INVALID"
    assert await event_count(engine, tenant) == 0


@pytest.mark.parametrize(
    "deliver_at", [{"date": "2026-12-08"}, {"localTime": 900}, {"localTime": "09:00", "zone": "x"}]
)
async def test_a_malformed_deliver_at_is_a_422(
    client: AsyncClient, engine: AsyncEngine, tenant: str, deliver_at: Any
) -> None:
    answer = await client.post(
        "/v1/events",
        headers=await events_key(engine, tenant),
        json=announcement(deliverAt=deliver_at),
    )
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "REQUEST_MALFORMED"
    assert await event_count(engine, tenant) == 0


# --------------------------------------------------------------------------------------------
# Quiet hours


def window_around(now: datetime, zone: str) -> tuple[str, str]:
    """Quiet hours that hold `now` on `zone`'s clock: from an hour before to two hours after."""
    local = now.astimezone(clock.zone(zone))
    return (local - timedelta(hours=1)).strftime("%H:%M"), (local + timedelta(hours=2)).strftime(
        "%H:%M"
    )


async def save_quiet(
    client: AsyncClient, settings: Settings, tenant: str, who: str, quiet: Any, version: int = 0
) -> Any:
    token = sign_token(settings, tenant_id=tenant, subject=who)
    return await client.put(
        PREFS,
        headers={"Authorization": f"Bearer {token}"},
        # The body is the whole set: it keeps the SMS opt-in `resident` stored.
        json={
            "version": version,
            "quietHours": quiet,
            "overrides": [{"category": "announcement", "channel": "sms", "enabled": True}],
        },
    )


async def stored_quiet(engine: AsyncEngine, person_id: int) -> Any:
    st = s.notification_preference_set
    async with engine.connect() as conn:
        return (
            await conn.execute(
                select(
                    st.c.version, st.c.quiet_hours_start, st.c.quiet_hours_end,
                    st.c.quiet_hours_timezone,
                ).where(st.c.person_id == person_id)
            )
        ).first()  # fmt: skip


async def test_quiet_hours_round_trip_through_the_preference_api(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    who = await resident(engine, tenant, "ktm", KATHMANDU)
    token = sign_token(settings, tenant_id=tenant, subject="ktm")
    headers = {"Authorization": f"Bearer {token}"}
    assert (await client.get(PREFS, headers=headers)).json()["quietHours"] is None
    saved = await save_quiet(client, settings, tenant, "ktm", {"start": "21:00", "end": "07:00"})
    assert saved.status_code == 200, saved.text
    assert (await client.get(PREFS, headers=headers)).json()["quietHours"] == {
        "start": "21:00",
        "end": "07:00",
        "timezone": None,
    }
    again = await save_quiet(
        client, settings, tenant, "ktm", {"start": "22:30", "end": "06:15", "timezone": LONDON}, 1
    )
    assert again.status_code == 200, again.text
    assert tuple(await stored_quiet(engine, who.id)) == (2, time(22, 30), time(6, 15), LONDON)
    # Left out of a body (a client that predates quiet hours), they are kept...
    kept = await client.put(PREFS, headers=headers, json={"version": 2})
    assert kept.status_code == 200, kept.text
    assert tuple(await stored_quiet(engine, who.id)) == (3, time(22, 30), time(6, 15), LONDON)
    # ...and null clears them.
    cleared = await save_quiet(client, settings, tenant, "ktm", None, 3)
    assert cleared.status_code == 200
    assert tuple(await stored_quiet(engine, who.id)) == (4, None, None, None)


@pytest.mark.parametrize(
    ("quiet", "code"),
    [
        ({"start": "21:00", "end": "07:00", "timezone": "Mars/Olympus"}, "QUIET_HOURS"),
        ({"start": "21:00", "end": "07:00", "timezone": "localtime"}, "QUIET_HOURS"),
        ({"start": "9pm", "end": "07:00"}, "QUIET_HOURS"),
        ({"start": "21:00", "end": "24:00"}, "QUIET_HOURS"),
        ({"start": "21:00", "end": "7:00"}, "QUIET_HOURS"),
        ({"start": "07:00", "end": "07:00"}, "QUIET_HOURS"),
        ({"start": "21:00"}, "MALFORMED"),
        ({"start": "21:00", "end": "07:00", "days": [1]}, "MALFORMED"),
        ({"start": 21, "end": 7}, "MALFORMED"),
    ],
)
async def test_bad_quiet_hours_are_a_422_and_nothing_is_stored(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, quiet: Any, code: str
) -> None:
    who = await resident(engine, tenant, "ktm", KATHMANDU)
    answer = await save_quiet(client, settings, tenant, "ktm", quiet)
    assert answer.status_code == 422, answer.text
    expected = "NOTIFICATION_QUIET_HOURS_INVALID" if code == "QUIET_HOURS" else "REQUEST_MALFORMED"
    assert answer.json()["error"]["code"] == expected
    assert await stored_quiet(engine, who.id) is None


async def sms_announcement(engine: AsyncEngine, tenant: str) -> None:
    async with engine.begin() as conn:
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="announcement.posted",
                audience={"kind": "users", "userIds": ["ktm"]},
                channels=["in_app", "sms"],
                variables=ANNOUNCE,
            ),
            registry=SAMPLE_REGISTRY,
        )
    await run_to_completion(engine, tenant)


async def test_quiet_hours_hold_an_sms_and_release_it_at_their_end(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """An SMS due inside quiet hours is not sent: its claim puts it back on the queue, unclaimed
    and due at the hours' end (queued, no attempt counted; the trace says "waiting until"); the
    inbox row is written at once. Due again at the end of a window, it is sent."""
    await resident(engine, tenant, "ktm", KATHMANDU, sms=True)
    start, end = window_around(await db_now(engine), KATHMANDU)
    assert (
        await save_quiet(client, settings, tenant, "ktm", {"start": start, "end": end})
    ).status_code == 200
    await sms_announcement(engine, tenant)
    due = (await rows_of(engine, tenant))[("ktm", "sms")]["next_attempt_at"]

    provider = ScriptedProvider("sms")
    assert await deliver(engine, provider, vault, settings, tenant)() == 0
    assert provider.messages == []
    row = (await rows_of(engine, tenant))[("ktm", "sms")]
    until = clock.quiet_until(
        due, clock.zone(KATHMANDU), clock.parse_local_time(start), clock.parse_local_time(end)
    )
    assert until is not None and until > due
    assert until.astimezone(clock.zone(KATHMANDU)).strftime("%H:%M") == end
    assert (row["status"], row["attempts"], row["queue_claimed"]) == ("queued", 0, None)
    assert row["next_attempt_at"] == row["queue_due"] == until
    assert (await rows_of(engine, tenant))[("ktm", "in_app")]["status"] == "delivered"
    assert len(await inbox(client, settings, tenant, "ktm")) == 1
    async with engine.connect() as conn:
        event_id = (
            await conn.execute(
                select(s.notification_event.c.public_id).where(
                    s.notification_event.c.tenant_id == tenant
                )
            )
        ).scalar_one()
    trace = await client.get(
        f"/v1/admin/events/{event_id}/recipients/ktm",
        headers=await admin_key_headers(engine, tenant),
    )
    sms = next(d for d in trace.json()["deliveries"] if d["channel"] == "sms")
    assert sms["reasonCode"] == "waiting"
    assert sms["reason"].startswith(f"waiting until {until.astimezone(UTC).isoformat()}")

    # The hours end: the row is due at the end of a window (a day earlier, so due now).
    await move_due(engine, tenant, "ktm", lambda column: column - timedelta(days=1))
    assert await deliver(engine, provider, vault, settings, tenant)() == 1
    assert len(provider.messages) == 1
    assert (await rows_of(engine, tenant))[("ktm", "sms")]["status"] == "sent"


async def test_a_retry_coming_due_inside_quiet_hours_waits_too(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """The first try fails (retryable); by the time its backoff is over the person's quiet hours
    have begun: the reaper re-queues it and its claim holds it until their end."""
    await resident(engine, tenant, "ktm", KATHMANDU, sms=True)
    await sms_announcement(engine, tenant)
    provider = ScriptedProvider(
        "sms", ProviderOutcome.failure("SMS_TRANSPORT", retryable=True), ProviderOutcome.sent("m")
    )
    assert await deliver(engine, provider, vault, settings, tenant)() == 1
    assert (await rows_of(engine, tenant))[("ktm", "sms")]["status"] == "failed"

    start, end = window_around(await db_now(engine), KATHMANDU)
    assert (
        await save_quiet(client, settings, tenant, "ktm", {"start": start, "end": end})
    ).status_code == 200
    await move_due(engine, tenant, "ktm", lambda _: func.now())
    await run_tick(engine, settings, backfill_channels=[])
    assert await deliver(engine, provider, vault, settings, tenant)() == 0
    row = (await rows_of(engine, tenant))[("ktm", "sms")]
    assert (row["status"], row["attempts"]) == ("queued", 1)
    assert row["queue_due"].astimezone(clock.zone(KATHMANDU)).strftime("%H:%M") == end
    assert len(provider.messages) == 1


async def test_a_one_time_code_ignores_quiet_hours(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """auth.otp is unsuppressible (security): sent at once inside quiet hours."""
    await resident(engine, tenant, "ktm", KATHMANDU)
    start, end = window_around(await db_now(engine), KATHMANDU)
    assert (
        await save_quiet(client, settings, tenant, "ktm", {"start": start, "end": end})
    ).status_code == 200
    ref = await secrets.stash(
        vault, tenant_id=tenant, type="otp", values={"code": "482913"}, ttl_seconds=600
    )
    async with engine.begin() as conn:
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind="auth.otp",
                audience={"kind": "users", "userIds": ["ktm"]},
                channels=["sms"],
                variables={"secretRef": ref},
            ),
            registry=SAMPLE_REGISTRY,
        )
    await run_to_completion(engine, tenant)
    provider = ScriptedProvider("sms")
    assert await deliver(engine, provider, vault, settings, tenant)() == 1
    assert [m.body for m in provider.messages] == ["Your code is 482913"]
    assert (await rows_of(engine, tenant))[("ktm", "sms")]["status"] == "sent"


def test_window_helper_never_gives_an_empty_window() -> None:
    start, end = window_around(datetime(2026, 12, 8, 18, 0, tzinfo=UTC), KATHMANDU)
    assert (start, end) == ("22:45", "01:45")
    assert date(2026, 12, 8)  # the window wraps past midnight here


async def test_erasing_a_person_clears_their_quiet_hours(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str
) -> None:
    """Quiet hours live on the preference set, which goes with the person (its foreign key's
    cascade, herald.directory.queries.erasure)."""
    from herald.db import tenancy
    from herald.directory import service as directory

    who = await resident(engine, tenant, "ktm", KATHMANDU)
    saved = await save_quiet(client, settings, tenant, "ktm", {"start": "21:00", "end": "07:00"})
    assert saved.status_code == 200
    assert await stored_quiet(engine, who.id) is not None
    async with engine.begin() as conn:
        await tenancy.enter_tenant(conn, tenant)
        await directory.erase_person(conn, tenant, "ktm")
    assert await stored_quiet(engine, who.id) is None


async def test_a_deliver_at_moment_inside_quiet_hours_waits_for_their_end(
    client: AsyncClient, engine: AsyncEngine, settings: Settings, tenant: str, vault: Vault
) -> None:
    """deliverAt 09:00 for someone quiet from 08:00 to 10:00: at 09:00 the email is held until
    10:00 on that day, then sent."""
    await resident(engine, tenant, "ktm", KATHMANDU)
    saved = await save_quiet(client, settings, tenant, "ktm", {"start": "08:00", "end": "10:00"})
    assert saved.status_code == 200, saved.text
    day = (await db_now(engine)).date() + timedelta(days=3)
    answer = await client.post(
        "/v1/events",
        headers=await events_key(engine, tenant),
        json=announcement(
            audience={"kind": "users", "userIds": ["ktm"]},
            channels=["email"],
            deliverAt={"localTime": "09:00", "date": day.isoformat()},
        ),
    )
    assert answer.status_code == 201, answer.text
    await run_to_completion(engine, tenant)
    # 09:00 comes (four days earlier, so it is due now and on a day of its own).
    await move_due(engine, tenant, "ktm", lambda column: column - timedelta(days=4))
    provider = ScriptedProvider("email")
    assert await deliver(engine, provider, vault, settings, tenant)() == 0
    row = (await rows_of(engine, tenant))[("ktm", "email")]
    tz = clock.zone(KATHMANDU)
    assert row["queue_due"] == clock.local_moment(day - timedelta(days=4), time(10), tz)
    assert row["status"] == "queued" and provider.messages == []
    # 10:00 on that day has passed too: the next claim sends it.
    assert await deliver(engine, provider, vault, settings, tenant)() == 1
    assert (await rows_of(engine, tenant))[("ktm", "email")]["status"] == "sent"
