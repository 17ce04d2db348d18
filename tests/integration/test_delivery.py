"""The delivery state machine: claim, send, record, backoff, dead letters, reaper, backfill, replay.

Providers here are scripted doubles at the Provider protocol boundary (each adapter is tested
against a real local server of its own in tests/providers); the database is real.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.channels.base import Message, ProviderOutcome
from herald.config import Settings
from herald.db import schema as s
from herald.delivery import service as delivery
from herald.delivery.worker import deliver_batch
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.maintenance.service import run_tick
from herald.secrets.vault import Vault
from tests import seed
from tests.integration.test_fanout import run_to_completion, send_event


class ScriptedProvider:
    """Answers each send with the next scripted outcome (the last one repeats)."""

    is_mock = False
    name = "scripted"

    def __init__(self, channel: str, *outcomes: ProviderOutcome, configured: bool = True) -> None:
        self.channel = channel
        self.outcomes = list(outcomes) or [ProviderOutcome.sent("msg-1", "200")]
        self.configured = configured
        self.messages: list[Message] = []

    def is_configured(self) -> bool:
        return self.configured

    async def send(self, message: Message) -> ProviderOutcome:
        if not self.configured:
            return ProviderOutcome.unconfigured()
        self.messages.append(message)
        return self.outcomes[min(len(self.messages) - 1, len(self.outcomes) - 1)]

    async def aclose(self) -> None:
        return None


@pytest.fixture
def delivery_settings(settings: Settings, tmp_path: Any) -> Settings:
    return settings.model_copy(
        update={"max_attempts": 3, "retry_base_seconds": 30, "data_dir": tmp_path}
    )


async def queue_rows(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    """The tenant's queue rows (herald.db.queue), as the schema owner."""
    q = s.notification_delivery_queue
    query = select(q).where(q.c.tenant_id == tenant).order_by(q.c.delivery_id)
    async with engine.connect() as conn:
        return [dict(r._mapping) for r in await conn.execute(query)]


async def email_delivery(
    engine: AsyncEngine, tenant: str, *, email: str | None = "parent@example.com", **event: Any
) -> dict[str, Any]:
    """One guardian, one event over email; returns the queued email delivery row."""
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        pupil = await seed.person(conn, tenant, "s0", full_name="Pupil")
        parent = await seed.person(conn, tenant, "g0", full_name="Parent <One>", email=email)
        await seed.member(conn, tenant, group_id, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, parent.id)
    event.setdefault("channels", ["email"])
    await send_event(engine, tenant, **event)
    await run_to_completion(engine, tenant)
    rows = await delivery_rows(engine, tenant)
    assert len(rows) == 1 and rows[0]["status"] == "queued"
    # Queued at fan-out with its queue row, due and unclaimed.
    [entry] = await queue_rows(engine, tenant)
    assert entry["delivery_id"] == rows[0]["id"] and entry["claimed_at"] is None
    assert entry["occurred_at"] == rows[0]["occurred_at"] and entry["channel"] == "email"
    return rows[0]


async def queued_emails(engine: AsyncEngine, tenant: str, guardians: int) -> None:
    """`guardians` guardians of one class, one event to them over email, fanned out: that many
    queued email deliveries."""
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        for i in range(guardians):
            pupil = await seed.person(conn, tenant, f"s{i}")
            parent = await seed.person(conn, tenant, f"g{i}")
            await seed.member(conn, tenant, group_id, pupil.id)
            await seed.guardian(conn, tenant, pupil.id, parent.id)
    await send_event(engine, tenant, channels=["email"])
    await run_to_completion(engine, tenant)


async def delivery_rows(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    d = s.notification_delivery
    async with engine.connect() as conn:
        rows = await conn.execute(
            select(d).where(d.c.tenant_id == tenant, d.c.channel != "in_app").order_by(d.c.id)
        )
        return [dict(r._mapping) for r in rows]


async def dead_letters(engine: AsyncEngine, tenant: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(s.dead_letter).where(s.dead_letter.c.tenant_id == tenant))
        return [dict(r._mapping) for r in rows]


async def attempts(engine: AsyncEngine, delivery_id: int) -> list[dict[str, Any]]:
    a = s.notification_delivery_attempt
    async with engine.connect() as conn:
        rows = await conn.execute(select(a).where(a.c.delivery_id == delivery_id).order_by(a.c.id))
        return [dict(r._mapping) for r in rows]


async def make_due(engine: AsyncEngine, tenant: str) -> None:
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_delivery)
            .where(
                s.notification_delivery.c.tenant_id == tenant,
                s.notification_delivery.c.status.in_(["failed", "queued"]),
            )
            .values(next_attempt_at=func.now() - timedelta(seconds=1))
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


async def test_sent(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-2, R-CHAN-2, R-CHAN-3, R-STATE-5, R-STATE-6, R-STATE-21, R-PROVIDER-12: a sent email records sent_at,
    one attempt, the provider's message id, a masked destination, the stored rendering, and one
    attempt row with no body or address; claim and lease are cleared together."""
    row = await email_delivery(engine, tenant)
    provider = ScriptedProvider("email")
    assert await deliver(engine, provider, vault, delivery_settings, tenant)() == 1
    [message] = provider.messages
    assert message.to == "parent@example.com" and message.title == "Sports day moved"
    assert "Parent &lt;One&gt;" in (message.body_html or "")  # values escaped in the HTML part
    assert message.idempotency_key == str(row["public_id"])
    [done] = await delivery_rows(engine, tenant)
    assert done["status"] == "sent" and done["sent_at"] is not None and done["attempts"] == 1
    # The claim and its lease were the queue row's, and it went with the outcome.
    assert await queue_rows(engine, tenant) == []
    assert done["provider_message_id"] == "msg-1"
    assert done["destination_hint"] == "p●●●@example.com"
    assert done["rendered_title"] == "Sports day moved" and done["rendered_hash"] is not None
    [attempt] = await attempts(engine, done["id"])
    assert (
        attempt["outcome"],
        attempt["attempt_number"],
        attempt["provider_status"],
        attempt["provider_message_id"],
    ) == (
        "sent",
        1,
        "200",
        "msg-1",
    )


async def test_retry_backoff_then_requeue(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-9, R-STATE-10, R-STATE-11, R-STATE-12, R-STATE-19, R-OBS-5: a retryable failure waits base·2^(n-1) seconds with a coded
    last_error; sweep 2 re-queues it, clearing failed_at and last_error; the next success is clean."""
    await email_delivery(engine, tenant)
    provider = ScriptedProvider(
        "email",
        ProviderOutcome.failure(
            "EMAIL_TRANSPORT", retryable=True, detail="ConnectError", status="conn"
        ),
        ProviderOutcome.sent("msg-2"),
    )
    before = datetime.now(UTC)
    await deliver(engine, provider, vault, delivery_settings, tenant)()
    [failed] = await delivery_rows(engine, tenant)
    assert failed["status"] == "failed" and failed["attempts"] == 1 and failed["failure_count"] == 1
    assert (
        failed["last_error"] == "EMAIL_TRANSPORT (ConnectError)" and failed["failed_at"] is not None
    )
    assert timedelta(seconds=29) <= failed["next_attempt_at"] - before <= timedelta(seconds=35)
    assert failed["lease_expiry_count"] == 0

    # Not due yet: the sweep leaves it; nothing to claim.
    await run_tick(engine, delivery_settings, backfill_channels=[])
    assert (await delivery_rows(engine, tenant))[0]["status"] == "failed"
    await make_due(engine, tenant)
    report = await run_tick(engine, delivery_settings, backfill_channels=[])
    assert report.requeued >= 1
    [requeued] = await delivery_rows(engine, tenant)
    assert (
        requeued["status"] == "queued"
        and requeued["failed_at"] is None
        and requeued["last_error"] is None
    )

    await deliver(engine, provider, vault, delivery_settings, tenant)()
    [sent] = await delivery_rows(engine, tenant)
    assert sent["status"] == "sent" and sent["attempts"] == 2 and sent["failure_count"] == 1
    assert [a["outcome"] for a in await attempts(engine, sent["id"])] == ["failed", "sent"]


async def test_retries_exhausted_goes_dead(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-DLQ-1, R-DLQ-17, R-SCHEMA-52, R-PLAT-8: the attempt that reaches the maximum ends the row
    dead and writes its dead letter in the same transaction, with a reference-only payload_ref."""
    await email_delivery(engine, tenant)
    provider = ScriptedProvider("email", ProviderOutcome.failure("EMAIL_TRANSPORT", retryable=True))
    for _ in range(delivery_settings.max_attempts):
        await make_due(engine, tenant)
        await run_tick(engine, delivery_settings, backfill_channels=[])
        await deliver(engine, provider, vault, delivery_settings, tenant)()
    [dead] = await delivery_rows(engine, tenant)
    assert dead["status"] == "dead" and dead["attempts"] == 3 and dead["dead_at"] is not None
    [letter] = await dead_letters(engine, tenant)
    assert letter["payload_ref"] == {
        "notificationDeliveryPublicId": str(dead["public_id"]),
        "channel": "email",
    }
    assert letter["queue_name"] == "notification.email" and letter["job_id"] == str(
        dead["public_id"]
    )
    assert letter["attempts"] == 3 and letter["last_error"] == "EMAIL_TRANSPORT"


async def test_non_retryable_goes_dead_at_once(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-9, R-PROVIDER-7, R-PROVIDER-21: a permanent refusal is dead on the first attempt with
    no backoff scheduled."""
    await email_delivery(engine, tenant)
    queued_at = (await delivery_rows(engine, tenant))[0]["next_attempt_at"]
    provider = ScriptedProvider(
        "email", ProviderOutcome.failure("EMAIL_REJECTED:validation_error", retryable=False)
    )
    await deliver(engine, provider, vault, delivery_settings, tenant)()
    [dead] = await delivery_rows(engine, tenant)
    assert (
        dead["status"] == "dead" and dead["attempts"] == 1 and dead["next_attempt_at"] == queued_at
    )
    assert len(await dead_letters(engine, tenant)) == 1


async def test_unconfigured_skips_then_backfills(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-13, R-PROVIDER-14, R-PROVIDER-15, R-DLQ-7, R-BACKFILL-1, R-BACKFILL-2, R-BACKFILL-3, R-BACKFILL-4, R-BACKFILL-5, R-BACKFILL-6, R-PLAT-4: with no provider the
    row is skipped_unconfigured, uses no attempt and writes no dead letter; once the channel is
    configured, backfill re-queues it (compare-and-set, skipped_at cleared) and it is sent; a row
    older than the window stays."""
    await email_delivery(engine, tenant)
    absent = ScriptedProvider("email", configured=False)
    await deliver(engine, absent, vault, delivery_settings, tenant)()
    [skipped] = await delivery_rows(engine, tenant)
    assert (
        skipped["status"] == "skipped_unconfigured"
        and skipped["attempts"] == 0
        and skipped["skipped_at"] is not None
    )
    assert await dead_letters(engine, tenant) == []
    assert await attempts(engine, skipped["id"]) == []

    # Channel still unconfigured: backfill leaves it (R-BACKFILL-3).
    await run_tick(engine, delivery_settings, backfill_channels=[])
    assert (await delivery_rows(engine, tenant))[0]["status"] == "skipped_unconfigured"
    # One tick re-drives a bounded batch, oldest first; rows other tests left skipped in this
    # session's database may come before this one, so tick until the backfill runs dry.
    report = await run_tick(engine, delivery_settings, backfill_channels=["email"])
    assert report.backfilled >= 1
    for _ in range(100):
        if (await delivery_rows(engine, tenant))[0]["status"] != "skipped_unconfigured":
            break
        report = await run_tick(engine, delivery_settings, backfill_channels=["email"])
        assert report.backfilled >= 1, "backfill stopped before reaching this tenant's row"
    [requeued] = await delivery_rows(engine, tenant)
    assert requeued["status"] == "queued" and requeued["skipped_at"] is None
    await deliver(engine, ScriptedProvider("email"), vault, delivery_settings, tenant)()
    assert (await delivery_rows(engine, tenant))[0]["status"] == "sent"


async def test_backfill_window(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-BACKFILL-6: a skipped_unconfigured row older than HERALD_BACKFILL_MAX_AGE_HOURS is not resurrected."""
    await email_delivery(engine, tenant)
    await deliver(
        engine, ScriptedProvider("email", configured=False), vault, delivery_settings, tenant
    )()
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_delivery)
            .where(s.notification_delivery.c.tenant_id == tenant)
            .values(
                queued_at=func.now() - timedelta(hours=delivery_settings.backfill_max_age_hours + 1)
            )
        )
    await run_tick(engine, delivery_settings, backfill_channels=["email"])
    assert (await delivery_rows(engine, tenant))[0]["status"] == "skipped_unconfigured"


async def test_lease_expiry_reclaims_then_kills(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-4, R-REAPER-1, R-REAPER-2, R-REAPER-3, R-REAPER-4, R-REAPER-5, R-REAPER-6, R-STATE-18, R-OBS-5: an expired lease goes back to queued counting an attempt and
    a lease expiry (not a failure); at the maximum it is dead with a dead letter; an outcome that
    arrives after its lease was reclaimed is not written over the newer state."""
    row = await email_delivery(engine, tenant)
    from herald.delivery import queries as dq

    for round_ in range(delivery_settings.max_attempts):
        async with engine.begin() as conn:
            claimed = await dq.claim_due_deliveries(conn, "email", 10, 60, tenant)
        assert [c[0] for c in claimed] == [row["id"]]
        async with engine.begin() as conn:  # the worker died: its lease runs out
            await conn.execute(
                update(s.notification_delivery_queue)
                .where(s.notification_delivery_queue.c.delivery_id == row["id"])
                .values(lease_expires_at=func.now() - timedelta(seconds=1))
            )
        await run_tick(engine, delivery_settings, backfill_channels=[])
        [after] = await delivery_rows(engine, tenant)
        assert after["attempts"] == round_ + 1 and after["lease_expiry_count"] == round_ + 1
        assert after["failure_count"] == 0
    assert after["status"] == "dead" and after["last_error"] == "LEASE_EXPIRED"
    assert len(await dead_letters(engine, tenant)) == 1


async def test_late_outcome_is_not_written(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-17, R-REAPER-1: a worker whose lease was reclaimed mid-call does not overwrite the row."""
    from herald.delivery import queries as dq
    from herald.delivery import recorder
    from herald.delivery.send import Prepared

    row = await email_delivery(engine, tenant)
    async with engine.begin() as conn:
        [(claimed_id, _, occurred_at)] = await dq.claim_due_deliveries(
            conn, "email", 10, 60, tenant
        )
        [context] = await dq.load_send_contexts(conn, [claimed_id], (occurred_at, occurred_at))
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_delivery_queue)
            .where(s.notification_delivery_queue.c.delivery_id == row["id"])
            .values(lease_expires_at=func.now() - timedelta(seconds=1))
        )
    await run_tick(engine, delivery_settings, backfill_channels=[])
    written = await recorder.record(
        engine,
        [recorder.Result(Prepared(context), ProviderOutcome.sent("late"))],
        delivery_settings,
    )
    assert written == set()
    [after] = await delivery_rows(engine, tenant)
    assert after["status"] == "queued" and after["provider_message_id"] is None


async def test_liveness_rechecked_at_send(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-CHAN-4, R-CHAN-5, decision 5: deleted since the fan-out, or erased (user_id NULL), the row is
    skipped_recipient_gone and nothing is rendered or sent."""
    await email_delivery(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            update(s.person)
            .where(s.person.c.tenant_id == tenant, s.person.c.external_id == "g0")
            .values(deleted_at=func.now())
        )
    provider = ScriptedProvider("email")
    await deliver(engine, provider, vault, delivery_settings, tenant)()
    [gone] = await delivery_rows(engine, tenant)
    assert gone["status"] == "skipped_recipient_gone" and provider.messages == []
    assert gone["rendered_title"] is None


async def test_erased_recipient(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-CHAN-5, R-SCHEMA-18, R-SCHEMA-19: a hard-deleted person leaves the recipient with a NULL
    user_id and its snapshot; the send context still loads and records the row as gone."""
    await email_delivery(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            s.person.delete().where(s.person.c.tenant_id == tenant, s.person.c.external_id == "g0")
        )
    await deliver(engine, ScriptedProvider("email"), vault, delivery_settings, tenant)()
    [gone] = await delivery_rows(engine, tenant)
    assert gone["status"] == "skipped_recipient_gone"


async def test_no_address(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-CHAN-9, R-DLQ-19, R-STATE-14: nowhere to send is recorded on the row as a skip, never a failure
    or a dead letter."""
    await email_delivery(engine, tenant, email="")
    async with engine.begin() as conn:
        await conn.execute(
            update(s.person).where(s.person.c.tenant_id == tenant).values(email=None)
        )
    await deliver(engine, ScriptedProvider("email"), vault, delivery_settings, tenant)()
    [row] = await delivery_rows(engine, tenant)
    assert row["status"] == "skipped_no_destination" and row["attempts"] == 0
    assert await dead_letters(engine, tenant) == []


async def test_sms_number_normalised_or_skipped(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-CHAN-8, R-CHAN-9, R-CHAN-20: the phone goes through normalisation (Nepal by default); an
    unusable number is skipped_no_destination."""
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        pupil = await seed.person(conn, tenant, "s0")
        good = await seed.person(conn, tenant, "g0")
        bad = await seed.person(conn, tenant, "g1")
        await conn.execute(
            update(s.person).where(s.person.c.id == good.id).values(phone="981-2345678")
        )
        await conn.execute(update(s.person).where(s.person.c.id == bad.id).values(phone="12"))
        await seed.member(conn, tenant, group_id, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, good.id)
        await seed.guardian(conn, tenant, pupil.id, bad.id)
        # SMS is off by default outside security (R-PREF-11): these guardians opted in.
        for person in (good, bad):
            await conn.execute(
                s.notification_preference.insert().values(
                    tenant_id=tenant,
                    person_id=person.id,
                    category="announcement",
                    channel="sms",
                    enabled=True,
                )
            )
    await send_event(engine, tenant, channels=["sms"])
    await run_to_completion(engine, tenant)
    provider = ScriptedProvider("sms")
    await deliver(engine, provider, vault, delivery_settings, tenant)()
    assert [m.to for m in provider.messages] == ["+9779812345678"]
    statuses = sorted(r["status"] for r in await delivery_rows(engine, tenant))
    assert statuses == ["sent", "skipped_no_destination"]


async def test_push_token_rechecked_and_invalidated(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-CHAN-12, R-CHAN-13, R-CHAN-14, R-CHAN-16, R-CHAN-18, R-FANOUT-6: each token is its own delivery; a token
    invalidated after the fan-out is skipped; a provider's "unregistered" deactivates the token in
    the same send; the platform is passed; no destination hint is kept."""
    async with engine.begin() as conn:
        group_id = await seed.group(conn, tenant, "class-7a")
        pupil = await seed.person(conn, tenant, "s0")
        parent = await seed.person(conn, tenant, "g0")
        await seed.member(conn, tenant, group_id, pupil.id)
        await seed.guardian(conn, tenant, pupil.id, parent.id)
        a = await seed.push_token(conn, tenant, parent.id, "tok-a", platform="ios")
        b = await seed.push_token(conn, tenant, parent.id, "tok-b")
        c = await seed.push_token(conn, tenant, parent.id, "tok-c", platform="web")
    await send_event(engine, tenant, channels=["push"])
    await run_to_completion(engine, tenant)
    async with engine.begin() as conn:  # tok-c logs out after the fan-out
        await conn.execute(
            update(s.notification_push_token)
            .where(s.notification_push_token.c.id == c)
            .values(is_active=False, invalidated_at=func.now(), invalidation_reason="user_logout")
        )

    class PerToken(ScriptedProvider):
        async def send(self, message: Message) -> ProviderOutcome:
            self.messages.append(message)
            if message.to == "tok-b":
                return ProviderOutcome.failure(
                    "PUSH_TOKEN_INVALID", retryable=False, invalidate_token=True
                )
            return ProviderOutcome.sent("projects/x/messages/1")

    provider = PerToken("push")
    await deliver(engine, provider, vault, delivery_settings, tenant)()
    assert sorted((m.to, m.platform) for m in provider.messages) == [
        ("tok-a", "ios"),
        ("tok-b", "android"),
    ]
    rows = {r["provider_target_id"]: r for r in await delivery_rows(engine, tenant)}
    assert (
        rows[a]["status"] == "sent"
        and rows[b]["status"] == "dead"
        and rows[c]["status"] == "skipped_no_destination"
    )
    assert all(r["destination_hint"] is None for r in rows.values())
    async with engine.connect() as conn:
        token_b = (
            await conn.execute(
                select(s.notification_push_token).where(s.notification_push_token.c.id == b)
            )
        ).one()
    assert not token_b.is_active and token_b.invalidation_reason == "unregistered"


async def test_browsers_get_web_push_through_the_real_provider(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """A guardian with two browsers: the push service decrypts the rendered title and body for
    the live one (VAPID checked); the other's 410 marks its delivery dead and deactivates the
    device in the same send, as FCM's UNREGISTERED does (R-CHAN-16)."""
    from herald.channels.fcm import FcmPushProvider
    from herald.channels.push import PushProvider
    from herald.channels.webpush import WebPushProvider
    from tests.providers.servers import webpush_server

    settings = delivery_settings.model_copy(
        update={
            "webpush_vapid_subject": "mailto:ops@school.example",
            "webhook_allow_loopback": True,
        }
    )
    with webpush_server() as server:
        live, gone = server.subscribe(), server.subscribe()
        async with engine.begin() as conn:
            group_id = await seed.group(conn, tenant, "class-7a")
            pupil = await seed.person(conn, tenant, "s0")
            parent = await seed.person(conn, tenant, "g0")
            await seed.member(conn, tenant, group_id, pupil.id)
            await seed.guardian(conn, tenant, pupil.id, parent.id)
            live_id = await seed.push_token(
                conn, tenant, parent.id, live.endpoint, "webpush", (live.p256dh, live.auth_b64)
            )
            gone_id = await seed.push_token(
                conn, tenant, parent.id, gone.endpoint, "webpush", (gone.p256dh, gone.auth_b64)
            )
        await send_event(engine, tenant, channels=["push"])
        await run_to_completion(engine, tenant)

        server.gone.add(gone.endpoint.rsplit("/", 1)[1])
        provider = PushProvider(FcmPushProvider(settings), WebPushProvider(settings))
        try:
            await deliver(engine, provider, vault, settings, tenant)()
        finally:
            await provider.aclose()
    assert server.refused == []
    [push] = server.received
    assert push.path == live.endpoint.removeprefix(server.origin)
    document = push.json()
    assert document["title"] and document["body"]
    rows = {r["provider_target_id"]: r for r in await delivery_rows(engine, tenant)}
    assert rows[live_id]["status"] == "sent" and rows[gone_id]["status"] == "dead"
    assert rows[gone_id]["last_error"].startswith("PUSH_TOKEN_INVALID")
    async with engine.connect() as conn:
        device = (
            await conn.execute(
                select(s.notification_push_token).where(s.notification_push_token.c.id == gone_id)
            )
        ).one()
    assert not device.is_active and device.invalidation_reason == "unregistered"


async def test_replay(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-DLQ-4, R-DLQ-5, R-DLQ-12, R-DLQ-13, R-DLQ-14, R-DLQ-15, R-DLQ-16, R-SCHEMA-26, R-PLAT-6, decision 7: replay inserts a new queued
    row pointing at the original, leaves the original's evidence, records who replayed, and a
    second replay is refused; the replay is sent like any delivery."""
    await email_delivery(engine, tenant)
    await deliver(
        engine,
        ScriptedProvider("email", ProviderOutcome.failure("EMAIL_REJECTED:x", retryable=False)),
        vault,
        delivery_settings,
        tenant,
    )()
    [letter] = await dead_letters(engine, tenant)
    [original] = await delivery_rows(engine, tenant)
    async with engine.begin() as conn:
        new_id = await delivery.replay_dead_letter(
            conn, tenant, letter["public_id"], actor="operator-1"
        )
    async with engine.begin() as conn:
        with pytest.raises(delivery.DeadLetterAlreadyReplayed):
            await delivery.replay_dead_letter(conn, tenant, letter["public_id"], actor="operator-2")
    rows = await delivery_rows(engine, tenant)
    assert len(rows) == 2
    orig, replay = rows
    assert (orig["status"], orig["last_error"], orig["failed_at"]) == (
        "dead",
        original["last_error"],
        original["failed_at"],
    )
    assert (
        replay["public_id"] == new_id
        and replay["replay_of_delivery_id"] == orig["id"]
        and replay["status"] == "queued"
    )
    # The replay is in the person's history (GET /v1/admin/people/{externalId}/deliveries).
    assert orig["user_id"] is not None and replay["user_id"] == orig["user_id"]
    [after] = await dead_letters(engine, tenant)
    assert after["replayed_by"] == "operator-1" and after["replay_job_id"] == str(new_id)
    await deliver(engine, ScriptedProvider("email"), vault, delivery_settings, tenant)()
    assert [r["status"] for r in await delivery_rows(engine, tenant)] == ["dead", "sent"]


async def test_concurrent_replays_make_one_delivery(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """Decision 7, R-DLQ-15: two replays racing on one dead letter produce exactly one new delivery."""
    await email_delivery(engine, tenant)
    await deliver(
        engine,
        ScriptedProvider("email", ProviderOutcome.failure("EMAIL_REJECTED:x", retryable=False)),
        vault,
        delivery_settings,
        tenant,
    )()
    [letter] = await dead_letters(engine, tenant)

    async def attempt(actor: str) -> str:
        try:
            async with engine.begin() as conn:
                await delivery.replay_dead_letter(conn, tenant, letter["public_id"], actor=actor)
                await asyncio.sleep(0.05)  # hold the transaction open so the two overlap
            return "ok"
        except delivery.DeadLetterAlreadyReplayed:
            return "refused"

    results = sorted(await asyncio.gather(attempt("a"), attempt("b")))
    assert results == ["ok", "refused"]
    assert len(await delivery_rows(engine, tenant)) == 2


async def test_replay_refuses_outsiders(engine: AsyncEngine, tenant: str) -> None:
    """R-DLQ-9, R-DLQ-11: a dead letter from another work type is refused with 409, not hidden."""
    async with engine.begin() as conn:
        letter_id = (
            await conn.execute(
                s.dead_letter.insert()
                .values(
                    tenant_id=tenant,
                    queue_name="notification.operational",
                    job_name="operational_email",
                    job_id="x",
                    payload_ref={
                        "aggregateType": "feedback",
                        "aggregateId": "1",
                        "eventType": "feedback.submitted",
                    },
                    attempts=5,
                )
                .returning(s.dead_letter.c.public_id)
            )
        ).scalar_one()
    async with engine.begin() as conn:
        with pytest.raises(delivery.DeadLetterNotReplayable) as refused:
            await delivery.replay_dead_letter(conn, tenant, letter_id, actor="op")
    assert refused.value.status == 409
    async with engine.begin() as conn:
        with pytest.raises(delivery.DeadLetterNotFound):
            await delivery.replay_dead_letter(conn, f"{tenant}-other", letter_id, actor="op")


async def test_claims_are_disjoint(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-1, R-STATE-8, R-STATE-16, R-STATE-17: the claim is one conditional UPDATE over queued rows;
    two workers claiming at once never take the same row."""
    from herald.delivery import queries as dq

    await queued_emails(engine, tenant, 40)

    async def claim() -> list[int]:
        async with engine.begin() as conn:
            claimed = await dq.claim_due_deliveries(conn, "email", 25, 60, tenant)
            await asyncio.sleep(0.05)
            return [c[0] for c in claimed]

    first, second = await asyncio.gather(claim(), claim())
    assert len(first) + len(second) == 40 and not set(first) & set(second)


async def test_outcome_counters_never_null(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-12: even an absurd failure count yields a finite backoff and a non-NULL next_attempt_at."""
    row = await email_delivery(engine, tenant)
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_delivery)
            .where(s.notification_delivery.c.id == row["id"])
            .values(failure_count=10_000)
        )
    settings = delivery_settings.model_copy(update={"max_attempts": 100})
    await deliver(
        engine,
        ScriptedProvider("email", ProviderOutcome.failure("EMAIL_TRANSPORT", retryable=True)),
        vault,
        settings,
        tenant,
    )()
    [failed] = await delivery_rows(engine, tenant)
    assert failed["status"] == "failed" and failed["next_attempt_at"] is not None
    assert failed["next_attempt_at"] - datetime.now(UTC) <= timedelta(
        seconds=settings.retry_max_seconds + 5
    )


async def test_erasure_during_a_send_is_not_undone(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-ERASE-2, R-SCHEMA-30: a person erased while their delivery is in flight keeps no destination
    hint or rendered content, even though the send's outcome is recorded afterwards."""
    from herald.delivery import queries as dq
    from herald.delivery import recorder
    from herald.delivery.send import Prepared
    from herald.rendering.render import Rendered

    row = await email_delivery(engine, tenant)
    async with engine.begin() as conn:
        [(claimed_id, _, occurred_at)] = await dq.claim_due_deliveries(
            conn, "email", 10, 60, tenant
        )
        [context] = await dq.load_send_contexts(conn, [claimed_id], (occurred_at, occurred_at))
    async with engine.begin() as conn:  # erased mid-send: the person goes, the snapshot stays
        await conn.execute(
            s.person.delete().where(s.person.c.tenant_id == tenant, s.person.c.external_id == "g0")
        )
    prepared = Prepared(
        context,
        destination_hint="p●●●@example.com",
        rendered=Rendered(title="Sports day moved", body="Dear Parent <One>, …"),
        persist=True,
    )
    written = await recorder.record(
        engine, [recorder.Result(prepared, ProviderOutcome.sent("m-1"))], delivery_settings
    )
    assert written == {row["id"]}
    [after] = await delivery_rows(engine, tenant)
    assert after["status"] == "sent"
    assert (after["destination_hint"], after["rendered_title"], after["rendered_body"]) == (
        None,
        None,
        None,
    )


async def test_slow_provider_never_lets_a_live_workers_leases_expire(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """R-STATE-18, R-REAPER-1, R-PLAT-14: rows waiting their turn behind a slow provider keep their
    lease (the batch's heartbeat renews it), so a reaper sweeping all the while reclaims none of
    them and nothing is sent twice."""
    await queued_emails(engine, tenant, 24)
    settings = delivery_settings.model_copy(update={"lease_seconds": 5})

    class Slow(ScriptedProvider):
        async def send(self, message: Message) -> ProviderOutcome:
            await asyncio.sleep(1.0)  # 24 sends, 4 at a time: 6 s, longer than one lease
            return await super().send(message)

    provider = Slow("email")
    sending = asyncio.create_task(deliver(engine, provider, vault, settings, tenant)())
    while not sending.done():  # a reaper sweeping the whole time
        await run_tick(engine, settings, backfill_channels=[])
        await asyncio.sleep(0.5)
    assert await sending == 24
    assert (
        len(provider.messages) == 24 and len({m.idempotency_key for m in provider.messages}) == 24
    )
    rows = await delivery_rows(engine, tenant)
    assert {r["status"] for r in rows} == {"sent"}
    assert all(r["lease_expiry_count"] == 0 and r["attempts"] == 1 for r in rows)


async def test_a_batch_spanning_months_is_sent_and_recorded_whole(
    engine: AsyncEngine, tenant: str, vault: Vault, delivery_settings: Settings
) -> None:
    """A batch's statements are bounded by its rows' occurred_at (docs/scaling.md, partitions): a retry
    of last month's event claimed beside today's send lies in another partition, and both are
    sent, recorded and given their attempt rows in the one batch."""
    from sqlalchemy import text

    today = await email_delivery(engine, tenant)
    async with engine.begin() as conn:  # the same send, as an event of forty days ago
        [(event_id, occurred_at)] = (
            await conn.execute(
                text(
                    "INSERT INTO notification_event (tenant_id, kind, category, priority, "
                    "audience, channels, variables, dedupe_key, fanout_claimed_at, "
                    "fanout_claim_token, fanout_completed_at, recipient_count, occurred_at, "
                    "created_at) SELECT tenant_id, kind, category, priority, audience, channels, "
                    "variables, encode(sha256(convert_to(dedupe_key, 'UTF8')), 'hex'), fanout_claimed_at, gen_random_uuid(), fanout_completed_at, recipient_count, "
                    "occurred_at - interval '40 days', created_at - interval '40 days' "
                    "FROM notification_event WHERE id = :id RETURNING id, occurred_at"
                ),
                {"id": today["event_id"]},
            )
        ).all()
        [recipient_id] = (
            await conn.execute(
                text(
                    "INSERT INTO notification_recipient (tenant_id, event_id, user_id, "
                    "user_public_id_snapshot, variables, occurred_at) SELECT tenant_id, :event, "
                    "user_id, user_public_id_snapshot, variables, :at FROM notification_recipient "
                    "WHERE id = :id RETURNING id"
                ),
                {"event": event_id, "at": occurred_at, "id": today["recipient_id"]},
            )
        ).scalars()
        await conn.execute(
            text(
                "WITH d AS (INSERT INTO notification_delivery (tenant_id, event_id, "
                "recipient_id, channel, status, next_attempt_at, occurred_at) SELECT tenant_id, "
                ":event, :recipient, channel, 'queued', now() - interval '1 minute', :at "
                "FROM notification_delivery WHERE id = :id "
                "RETURNING id, tenant_id, channel, occurred_at, next_attempt_at) "
                "INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, "
                "occurred_at, next_attempt_at) SELECT * FROM d"
            ),
            {"event": event_id, "recipient": recipient_id, "at": occurred_at, "id": today["id"]},
        )
    provider = ScriptedProvider("email")
    assert await deliver(engine, provider, vault, delivery_settings, tenant)() == 2
    done = await delivery_rows(engine, tenant)
    assert sorted(r["occurred_at"] for r in done) == sorted([occurred_at, today["occurred_at"]])
    assert [r["status"] for r in done] == ["sent", "sent"]
    for row in done:
        assert [a["outcome"] for a in await attempts(engine, row["id"])] == ["sent"]


async def test_a_channels_loops_together_send_at_most_its_concurrency_at_once(
    engine: AsyncEngine,
    tenant: str,
    vault: Vault,
    delivery_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-CHAN-19: a channel's provider concurrency is a process total. drain_channel's batch loops
    share one gate, each sender holding its place for its run of rows: three email loops (four
    senders each) never have more than four sends open at once — and do reach four."""
    from herald.delivery import worker

    await queued_emails(engine, tenant, 30)

    class Counting(ScriptedProvider):
        open = peak = 0

        async def send(self, message: Message) -> ProviderOutcome:
            self.open += 1
            self.peak = max(self.peak, self.open)
            try:
                await asyncio.sleep(0.02)
                return await super().send(message)
            finally:
                self.open -= 1

    provider = Counting("email")
    # Batches of five, so that every loop holds rows of its own to send at the same time.
    monkeypatch.setitem(worker.BATCH_LIMIT, "email", 5)
    claimed = await worker.drain_channel(
        engine,
        "email",
        provider,
        registry=SAMPLE_REGISTRY,
        vault=vault,
        settings=delivery_settings,
        tenant_id=tenant,
        loops=3,
    )
    assert claimed == 30 and len({m.idempotency_key for m in provider.messages}) == 30
    assert provider.peak == worker.CONCURRENCY["email"]
    assert {r["status"] for r in await delivery_rows(engine, tenant)} == {"sent"}


async def test_a_fast_provider_earns_larger_claims_and_a_slow_one_keeps_the_floor(
    engine: AsyncEngine,
    tenant: str,
    vault: Vault,
    delivery_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A channel's claims are sized to what its provider sent in BATCH_SECONDS on the last full
    batch, between BATCH_LIMIT and PACED_LIMIT (docs/scaling.md, the worker): a slow provider keeps
    the floor, one that answers at once earns the ceiling, and every row is sent once."""
    from herald.delivery import worker

    await queued_emails(engine, tenant, 30)
    monkeypatch.setitem(worker.BATCH_LIMIT, "email", 5)
    monkeypatch.setitem(worker.PACED_LIMIT, "email", 20)
    monkeypatch.setattr(worker, "BATCH_SECONDS", 0.2)
    pace = worker.Pace("email")

    class Slow(ScriptedProvider):
        async def send(self, message: Message) -> ProviderOutcome:
            await asyncio.sleep(0.2)  # five sends four at a time: 0.4 s, 12.5 a second
            return await super().send(message)

    fast, slow = ScriptedProvider("email"), Slow("email")

    async def batch(provider: ScriptedProvider) -> tuple[int, int]:
        claimed = await worker.deliver_batch(
            engine,
            "email",
            provider,
            registry=SAMPLE_REGISTRY,
            vault=vault,
            settings=delivery_settings,
            tenant_id=tenant,
            pace=pace,
        )
        return claimed, pace.limit

    assert await batch(slow) == (5, 5)  # 12.5 a second × 0.2 s is under the floor
    assert await batch(fast) == (5, 20)  # at once: the ceiling
    assert await batch(fast) == (20, 20)
    assert await batch(fast) == (0, 20)  # nothing left: a batch the queue cannot fill
    sent = slow.messages + fast.messages
    assert len(sent) == 30 and len({m.idempotency_key for m in sent}) == 30
    assert {r["status"] for r in await delivery_rows(engine, tenant)} == {"sent"}
