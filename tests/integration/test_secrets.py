"""Secret references end to end: stash, resolve once, send, and leave no trace anywhere."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message as EmailMessage
from typing import Any

import pytest
from cryptography.fernet import Fernet
from httpx import AsyncClient
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncEngine

from herald.auth.service import create_api_key
from herald.channels.smtp import SmtpEmailProvider
from herald.config import Settings
from herald.db import schema as s
from herald.delivery import service as delivery_service
from herald.delivery.worker import deliver_batch
from herald.errors import ConfigurationError
from herald.kinds.sample import SAMPLE_REGISTRY
from herald.secrets import service as secrets
from herald.secrets.vault import RedisVault, TableVault, Vault
from herald.sending.service import SendInput, asend
from tests import seed
from tests.integration.test_fanout import run_to_completion
from tests.providers.servers import SmtpTestServer, smtp_server

TOKEN = "RESET-7f3a9c1e5b"


@pytest.fixture
def smtp() -> Iterator[SmtpTestServer]:
    with smtp_server() as server:
        yield server


@pytest.fixture
def smtp_settings(settings: Settings, smtp: SmtpTestServer, tmp_path: Any) -> Settings:
    return settings.model_copy(
        update={
            "smtp_host": smtp.host,
            "smtp_port": smtp.port,
            "smtp_starttls": False,
            "email_from": "School <school@example.com>",
            "data_dir": tmp_path,
        }
    )


async def person(engine: AsyncEngine, tenant: str, email: str = "asha@example.com") -> seed.Person:
    async with engine.begin() as conn:
        return await seed.person(conn, tenant, "u1", full_name="Asha", email=email)


async def send_reset(
    engine: AsyncEngine, tenant: str, ref: str, kind: str = "auth.password_reset"
) -> None:
    async with engine.begin() as conn:
        await asend(
            conn,
            SendInput(
                tenant_id=tenant,
                kind=kind,
                audience={"kind": "users", "userIds": ["u1"]},
                variables={"secretRef": ref},
            ),
            registry=SAMPLE_REGISTRY,
        )
    await run_to_completion(engine, tenant)


async def deliver_email(engine: AsyncEngine, settings: Settings, vault: Vault, tenant: str) -> None:
    provider = SmtpEmailProvider(settings)
    try:
        await deliver_batch(
            engine,
            "email",
            provider,
            registry=SAMPLE_REGISTRY,
            vault=vault,
            settings=settings,
            tenant_id=tenant,
        )
    finally:
        await provider.aclose()


async def tables_containing(engine: AsyncEngine, needle: str) -> list[str]:
    """Every (table.column) of the public schema whose text form contains `needle`."""
    found = []
    async with engine.connect() as conn:
        columns = (
            await conn.execute(
                text(
                    "SELECT table_name, column_name FROM information_schema.columns "
                    "WHERE table_schema = 'public' ORDER BY 1, 2"
                )
            )
        ).all()
        for table, column in columns:
            hit = (
                await conn.execute(
                    text(f'SELECT count(*) FROM "{table}" WHERE "{column}"::text LIKE :needle'),
                    {"needle": f"%{needle}%"},
                )
            ).scalar_one()
            if hit:
                found.append(f"{table}.{column}")
    return found


def herald_log(caplog: pytest.LogCaptureFixture) -> str:
    """Everything Herald itself logged (the test's own SMTP server logs the DATA it receives)."""
    return "\n".join(
        f"{r.getMessage()} {r.exc_text or ''}"
        for r in caplog.records
        if r.name.startswith("herald")
    )


def body_text(raw: bytes) -> str:
    parsed: EmailMessage = message_from_bytes(raw)
    parts = [p.get_payload(decode=True) for p in parsed.walk() if not p.is_multipart()]
    return "\n".join(p.decode() for p in parts if isinstance(p, bytes))


async def test_password_reset_leaves_no_trace(
    client: AsyncClient,
    engine: AsyncEngine,
    tenant: str,
    smtp: SmtpTestServer,
    smtp_settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-SECRET-1, R-SECRET-2, R-SECRET-3, R-SECRET-4, R-SECRET-5, R-SECRET-6, R-SECRET-7, R-SECRET-9, R-SECRET-15, R-SECRET-16, R-SCHEMA-13, R-DLQ-3: the host stashes the
    token over HTTP and sends a reference; the email the real SMTP server receives carries the
    token, and afterwards it is in no table, no log line, no dead letter and no last_error."""
    caplog.set_level(logging.DEBUG, logger="herald")
    await person(engine, tenant)
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["secrets:write"])
    stashed = await client.post(
        "/v1/secrets",
        json={"type": "password_reset", "values": {"token": TOKEN}},
        headers={"Authorization": f"Bearer {key}"},
    )
    assert stashed.status_code == 201, stashed.text
    ref = stashed.json()["secretRef"]
    assert ref.startswith("password_reset:") and TOKEN not in ref

    vault = client._transport.app.state.herald.vault  # type: ignore[attr-defined]
    await send_reset(engine, tenant, ref)
    await deliver_email(engine, smtp_settings, vault, tenant)

    [received] = smtp.handler.received
    assert received.rcpt_tos == ["asha@example.com"]
    assert TOKEN in body_text(received.content)
    assert "{{" not in body_text(received.content)

    assert await tables_containing(engine, TOKEN) == []
    assert TOKEN not in herald_log(caplog)
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(s.notification_delivery).where(s.notification_delivery.c.tenant_id == tenant)
            )
        ).one()
    assert (
        row.status == "sent" and row.rendered_body is None and row.rendered_hash is None
    )  # R-SECRET-5
    # Single use: the reference resolves no more (R-SECRET-9), not even for the delivery that
    # claimed it: its claim was released once the outcome was recorded.
    assert await secrets.resolve(vault, tenant, ref, holder=str(row.public_id)) is None
    assert await secrets.resolve(vault, tenant, ref, holder="another-delivery") is None


async def test_dead_letter_of_a_secret_send_holds_no_secret(
    engine: AsyncEngine,
    tenant: str,
    smtp: SmtpTestServer,
    smtp_settings: Settings,
    vault: Vault,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """R-SECRET-6, R-DLQ-3, R-STATE-15: a refused reset email goes dead; its dead letter, last_error and
    the logs carry the reference at most, never the token (the SMTP refusal echoes the address)."""
    caplog.set_level(logging.DEBUG, logger="herald")
    smtp.handler.refuse_rcpt = "550 5.1.1 <{address}> unknown " + TOKEN
    await person(engine, tenant)
    ref = await secrets.stash(
        vault, tenant_id=tenant, type="password_reset", values={"token": TOKEN}, ttl_seconds=600
    )
    await send_reset(engine, tenant, ref)
    await deliver_email(engine, smtp_settings, vault, tenant)
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(s.notification_delivery).where(s.notification_delivery.c.tenant_id == tenant)
            )
        ).one()
        letters = (
            await conn.execute(select(s.dead_letter).where(s.dead_letter.c.tenant_id == tenant))
        ).all()
    assert row.status == "dead" and row.last_error.startswith("EMAIL_REJECTED")
    assert len(letters) == 1
    assert await tables_containing(engine, TOKEN) == []
    assert await tables_containing(engine, "asha@example.com") == ["person.email"]
    assert TOKEN not in herald_log(caplog)


async def test_unresolvable_reference_skips(
    engine: AsyncEngine, tenant: str, smtp: SmtpTestServer, smtp_settings: Settings, vault: Vault
) -> None:
    """R-SECRET-11, R-SECRET-14: a reference that resolves to nothing (expired, flushed, used) records
    skipped_no_destination and sends nothing, never a partial render."""
    await person(engine, tenant)
    await send_reset(engine, tenant, "password_reset:never-stashed")
    await deliver_email(engine, smtp_settings, vault, tenant)
    async with engine.connect() as conn:
        status = (
            await conn.execute(
                select(s.notification_delivery.c.status).where(
                    s.notification_delivery.c.tenant_id == tenant
                )
            )
        ).scalar_one()
    assert status == "skipped_no_destination" and smtp.handler.received == []


async def test_to_email_override_comes_only_from_the_vault(
    engine: AsyncEngine, tenant: str, smtp: SmtpTestServer, smtp_settings: Settings, vault: Vault
) -> None:
    """R-CHAN-6, R-CHAN-7: an email-change confirmation goes to the vault's toEmail, which is never
    written to the event; the hint is masked."""
    await person(engine, tenant)
    ref = await secrets.stash(
        vault,
        tenant_id=tenant,
        type="email_change",
        values={"token": TOKEN, "toEmail": "new.asha@example.org"},
        ttl_seconds=600,
    )
    await send_reset(engine, tenant, ref, kind="auth.email_change")
    await deliver_email(engine, smtp_settings, vault, tenant)
    [received] = smtp.handler.received
    assert received.rcpt_tos == ["new.asha@example.org"]
    assert await tables_containing(engine, "new.asha") == []
    async with engine.connect() as conn:
        hint = (
            await conn.execute(
                select(s.notification_delivery.c.destination_hint).where(
                    s.notification_delivery.c.tenant_id == tenant
                )
            )
        ).scalar_one()
    assert hint == "n●●●@example.org"


async def test_registered_resolver_by_prefix(
    engine: AsyncEngine, tenant: str, smtp: SmtpTestServer, smtp_settings: Settings, vault: Vault
) -> None:
    """R-SECRET-12, R-SECRET-13, R-SECRET-17: a module can register a resolver for its prefix; a second
    registration of the prefix raises; other prefixes still go to the vault."""
    prefix = f"invite{uuid.uuid4().hex[:6]}"
    calls: list[str] = []

    async def resolve_invite(tenant_id: str, ref: str) -> dict[str, str]:
        calls.append(ref)
        return {"token": "derived-from-my-own-row"}

    secrets.RESOLVERS.register(prefix, resolve_invite)
    with pytest.raises(ConfigurationError):
        secrets.RESOLVERS.register(prefix, resolve_invite)
    await person(engine, tenant)
    await send_reset(engine, tenant, f"{prefix}:42")
    await deliver_email(engine, smtp_settings, vault, tenant)
    assert calls == [f"{prefix}:42"]
    assert "derived-from-my-own-row" in body_text(smtp.handler.received[0].content)


async def test_table_vault_is_encrypted_single_use_and_expiring(
    engine: AsyncEngine, tenant: str
) -> None:
    """R-SECRET-8, R-SECRET-9, DESIGN §7: the embedded vault stores ciphertext only, deletes on
    read, refuses expired entries, and a key other than the writer's reads nothing."""
    vault = TableVault(engine, Fernet.generate_key())
    ref = await secrets.stash(
        vault, tenant_id=tenant, type="otp", values={"code": "OTP-493817-Q"}, ttl_seconds=600
    )
    assert await tables_containing(engine, "OTP-493817-Q") == []
    assert (
        await secrets.resolve(vault, f"{tenant}-other", ref, holder="d1") is None
    )  # tenant-scoped
    assert await secrets.resolve(vault, tenant, ref, holder="d1") == {"code": "OTP-493817-Q"}
    # The same delivery may read its claim again (a read whose answer was lost); nobody else may.
    assert await secrets.resolve(vault, tenant, ref, holder="d1") == {"code": "OTP-493817-Q"}
    assert await secrets.resolve(vault, tenant, ref, holder="d2") is None
    await secrets.release(vault, tenant, ref, holder="d1")
    assert await secrets.resolve(vault, tenant, ref, holder="d1") is None

    expired = await secrets.stash(
        vault, tenant_id=tenant, type="otp", values={"code": "1"}, ttl_seconds=600
    )
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "UPDATE secret_vault SET expires_at = now() - interval '1 second' WHERE tenant_id = :t"
            ),
            {"t": tenant},
        )
    assert await secrets.resolve(vault, tenant, expired, holder="d1") is None

    other_key = await secrets.stash(
        vault, tenant_id=tenant, type="otp", values={"code": "2"}, ttl_seconds=600
    )
    assert (
        await secrets.resolve(
            TableVault(engine, Fernet.generate_key()), tenant, other_key, holder="d1"
        )
        is None
    )
    async with engine.connect() as conn:
        persistence = (
            await conn.execute(
                text("SELECT relpersistence FROM pg_class WHERE relname = 'secret_vault'")
            )
        ).scalar_one()
    assert persistence == "u"  # UNLOGGED


@pytest.mark.redis
async def test_redis_vault_getdel_and_ttl(redis_url: str, tenant: str) -> None:
    """R-SECRET-8, R-SECRET-9, R-SECRET-10: with Redis the vault is SET … EX then GETDEL: the entry has a
    TTL, the first read returns it and deletes it, the second finds nothing."""
    import redis.asyncio as redis

    vault = RedisVault(redis_url)
    try:
        ref = await secrets.stash(
            vault, tenant_id=tenant, type="otp", values={"code": "771204"}, ttl_seconds=120
        )
        client = redis.from_url(redis_url)
        ttl = await client.ttl(f"herald:secret:{tenant}:{ref.split(':', 1)[1]}")
        assert 0 < ttl <= 120
        assert await secrets.resolve(vault, tenant, ref, holder="d1") == {"code": "771204"}
        assert await client.exists(f"herald:secret:{tenant}:{ref.split(':', 1)[1]}") == 0
        assert await secrets.resolve(vault, tenant, ref, holder="d1") == {"code": "771204"}
        assert await secrets.resolve(vault, tenant, ref, holder="d2") is None
        await secrets.release(vault, tenant, ref, holder="d1")
        assert await secrets.resolve(vault, tenant, ref, holder="d1") is None
    finally:
        await client.aclose()
        await vault.aclose()


async def test_stash_validation(client: AsyncClient, engine: AsyncEngine, tenant: str) -> None:
    """R-SEC-13: bad secret requests are refused with a code; a key without secrets:write is refused."""
    async with engine.begin() as conn:
        key = await create_api_key(conn, tenant_id=tenant, scopes=["secrets:write"])
        other = await create_api_key(conn, tenant_id=tenant, scopes=["events:write"])
    headers = {"Authorization": f"Bearer {key}"}
    bad_type = await client.post(
        "/v1/secrets", json={"type": "Bad Type", "values": {"token": "x"}}, headers=headers
    )
    # The type's pattern is published, so a bad one breaks the schema (422).
    assert bad_type.status_code == 422 and bad_type.json()["error"]["code"] == "REQUEST_MALFORMED"
    empty = await client.post("/v1/secrets", json={"type": "otp", "values": {}}, headers=headers)
    assert empty.status_code == 422
    forbidden = await client.post(
        "/v1/secrets",
        json={"type": "otp", "values": {"code": "1"}},
        headers={"Authorization": f"Bearer {other}"},
    )
    assert forbidden.status_code == 403


async def test_transient_failure_keeps_the_secret_for_the_retry(
    engine: AsyncEngine, tenant: str, smtp: SmtpTestServer, smtp_settings: Settings, vault: Vault
) -> None:
    """R-SECRET-4, R-SECRET-9, R-STATE-10: after a temporary SMTP refusal the delivery keeps its
    claim on the token (in the vault, never a table), so the retry still sends the reset email;
    after the successful send the claim is released and the reference resolves no more."""
    from sqlalchemy import func, update

    smtp.handler.refuse_rcpt = "451 4.3.0 try again later"
    await person(engine, tenant)
    ref = await secrets.stash(
        vault, tenant_id=tenant, type="password_reset", values={"token": TOKEN}, ttl_seconds=600
    )
    await send_reset(engine, tenant, ref)
    await deliver_email(engine, smtp_settings, vault, tenant)
    assert smtp.handler.received == []
    assert await tables_containing(engine, TOKEN) == []

    smtp.handler.refuse_rcpt = None
    async with engine.begin() as conn:  # the backoff elapses; sweep 2 re-queues it
        await conn.execute(
            update(s.notification_delivery)
            .where(s.notification_delivery.c.tenant_id == tenant)
            .values(next_attempt_at=func.now())
        )
        await delivery_service.requeue_due_failures(conn, limit=100)
    await deliver_email(engine, smtp_settings, vault, tenant)
    [received] = smtp.handler.received
    assert TOKEN in body_text(received.content)
    async with engine.connect() as conn:
        delivery_id = (
            await conn.execute(
                select(s.notification_delivery.c.public_id).where(
                    s.notification_delivery.c.tenant_id == tenant
                )
            )
        ).scalar_one()
    assert await secrets.resolve(vault, tenant, ref, holder=str(delivery_id)) is None
    assert await tables_containing(engine, TOKEN) == []


class _DownVault:
    """A vault that does not answer (Redis restarting, a pool timeout)."""

    async def put(
        self, tenant_id: str, ref_id: str, values: dict[str, str], ttl_seconds: int
    ) -> None:
        raise ConnectionError("vault down")

    remote = True

    async def claim(self, tenant_id: str, ref_id: str, holder: str) -> dict[str, str] | None:
        raise ConnectionError("vault down")

    async def release(self, tenant_id: str, ref_id: str, holder: str) -> None:
        raise ConnectionError("vault down")

    async def ping(self) -> None:
        raise ConnectionError("vault down")

    async def aclose(self) -> None:
        return None


async def test_vault_outage_is_retried_not_dropped(
    engine: AsyncEngine, tenant: str, smtp: SmtpTestServer, smtp_settings: Settings, vault: Vault
) -> None:
    """R-SECRET-11 (only a *missing* entry skips): a vault that does not answer is a retryable failure,
    so the reset email goes out once the vault is back."""
    from sqlalchemy import func, update

    await person(engine, tenant)
    ref = await secrets.stash(
        vault, tenant_id=tenant, type="password_reset", values={"token": TOKEN}, ttl_seconds=600
    )
    await send_reset(engine, tenant, ref)
    await deliver_email(engine, smtp_settings, _DownVault(), tenant)
    async with engine.connect() as conn:
        row = (
            await conn.execute(
                select(s.notification_delivery).where(s.notification_delivery.c.tenant_id == tenant)
            )
        ).one()
    assert row.status == "failed" and row.last_error == "SECRET_VAULT_UNAVAILABLE"
    assert smtp.handler.received == []
    async with engine.begin() as conn:
        await conn.execute(
            update(s.notification_delivery)
            .where(s.notification_delivery.c.tenant_id == tenant)
            .values(next_attempt_at=func.now())
        )
        await delivery_service.requeue_due_failures(conn, limit=100)
    await deliver_email(engine, smtp_settings, vault, tenant)
    [received] = smtp.handler.received
    assert TOKEN in body_text(received.content)
