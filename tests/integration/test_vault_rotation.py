"""Rotating the vault key (issue 44): `herald vault rotate-key` re-encrypts every tenant's stored
ciphertext — webhook signing secrets and the embedded vault's stashed secrets — while processes
holding the new key as primary and the old one in HERALD_VAULT_OLD_KEYS keep reading both.

The rotation reads every tenant's rows, so these tests run on a database of their own: the
session's shared one holds other tests' rows under keys nobody here knows, which the rotation
would rightly refuse. The command is driven through its real entry (Typer's CliRunner, in a
thread of its own: the command runs its own event loop).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import httpx
import pytest
from click.testing import Result
from cryptography.fernet import Fernet, InvalidToken
from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from herald import cli
from herald.auth.service import Operator
from herald.config import Settings
from herald.db import migrate, tenancy
from herald.db import schema as s
from herald.db.engine import make_async_engine
from herald.secrets import service as secrets
from herald.secrets.vault import build_vault
from herald.webhooks import service as webhook_service
from herald.webhooks import worker as webhooks
from herald.webhooks.schemas import WebhookEndpointIn
from tests.conftest import create_database, drop_database
from tests.integration.test_webhooks import Receiver, receiver

__all__ = ["receiver"]

Stored = dict[str, bytes]


@pytest.fixture(scope="module")
def own_url(server_url: str) -> Iterator[str]:
    name = f"herald_test_rotation_{uuid.uuid4().hex[:8]}"
    url = create_database(server_url, name)
    migrate.upgrade(url)
    yield url
    drop_database(server_url, name)


@pytest.fixture(scope="module")
async def own_engine(own_url: str) -> AsyncIterator[AsyncEngine]:
    engine = make_async_engine(own_url, pool_size=2)
    yield engine
    await engine.dispose()


@pytest.fixture
async def engine(own_engine: AsyncEngine) -> AsyncEngine:
    """The module's database, emptied of every ciphertext: each test sees only its own rows."""
    async with own_engine.begin() as conn:
        await conn.execute(delete(s.webhook_endpoint))
        await conn.execute(delete(s.secret_vault))
        await conn.execute(delete(s.notification_provider_account))
    return own_engine


def keyed(settings: Settings, url: str, primary: bytes, old: Sequence[bytes] = ()) -> Settings:
    """A process's settings: `primary` encrypts, it and `old` decrypt."""
    return settings.model_copy(
        update={
            "database_url": url,
            "redis_url": None,
            "vault_key": primary.decode(),
            "vault_old_keys": ",".join(key.decode() for key in old),
            "webhook_allow_loopback": True,
        }
    )


def admin(tenant: str) -> Operator:
    return Operator(tenant, "api_key", "rotation-test", None, frozenset(), True)


async def create_endpoint(engine: AsyncEngine, settings: Settings, tenant: str, url: str) -> str:
    """A webhook endpoint created through the service; its signing secret (shown once)."""
    async with engine.begin() as conn:
        await tenancy.enter_tenant(conn, tenant)
        created = await webhook_service.create_endpoint(
            conn,
            admin(tenant),
            settings,
            WebhookEndpointIn(url=url, event_types=["delivery.delivered"]),
        )
    return created.secret


async def stash(engine: AsyncEngine, settings: Settings, tenant: str, token: str) -> str:
    """A stashed secret (a reset token) through the vault the settings build; its ref id."""
    ref = await secrets.stash(
        build_vault(settings, engine),
        tenant_id=tenant,
        type="password_reset",
        values={"token": token},
        ttl_seconds=900,
    )
    return ref.partition(":")[2]


async def seed(
    engine: AsyncEngine, settings: Settings, tenants: Sequence[str], url: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Two webhook endpoints and two stashed secrets in each tenant, under `settings`' key:
    (webhook secret by endpoint public id, token by vault ref id)."""
    endpoints: dict[str, str] = {}
    tokens: dict[str, str] = {}
    for tenant in tenants:
        for n in range(2):
            secret = await create_endpoint(engine, settings, tenant, url)
            endpoints[await public_id_of(engine, secret, settings)] = secret
            token = f"reset-{tenant}-{n}-{uuid.uuid4().hex}"
            tokens[await stash(engine, settings, tenant, token)] = token
    return endpoints, tokens


async def public_id_of(engine: AsyncEngine, secret: str, settings: Settings) -> str:
    for key, ciphertext in (await webhook_ciphertexts(engine)).items():
        try:
            if webhook_service.decrypt_secret(settings, ciphertext) == secret:
                return key
        except InvalidToken:
            continue
    raise AssertionError("endpoint not found")


async def webhook_ciphertexts(engine: AsyncEngine) -> Stored:
    w = s.webhook_endpoint
    async with engine.connect() as conn:
        rows = await conn.execute(select(w.c.public_id, w.c.secret_ciphertext))
        return {str(r.public_id): bytes(r.secret_ciphertext) for r in rows}


async def vault_ciphertexts(engine: AsyncEngine) -> Stored:
    v = s.secret_vault
    async with engine.connect() as conn:
        rows = await conn.execute(select(v.c.ref_id, v.c.ciphertext))
        return {str(r.ref_id): bytes(r.ciphertext) for r in rows}


async def stored(engine: AsyncEngine) -> tuple[Stored, Stored]:
    return await webhook_ciphertexts(engine), await vault_ciphertexts(engine)


async def rotate_key(url: str, env: Mapping[str, str | None], *args: str) -> Result:
    """`herald vault rotate-key` as an operator runs it, with only `env`'s vault keys set."""
    environment: dict[str, str | None] = {
        "HERALD_DATABASE_URL": url,
        "HERALD_VAULT_KEY": None,
        "HERALD_VAULT_OLD_KEYS": None,
        "HERALD_REDIS_URL": None,
        **env,
    }
    return await asyncio.to_thread(
        CliRunner().invoke, cli.app, ["vault", "rotate-key", *args], env=environment
    )


def keys_env(new: bytes, old: bytes) -> dict[str, str | None]:
    return {"HERALD_VAULT_KEY": new.decode(), "HERALD_VAULT_OLD_KEYS": old.decode()}


async def signs(settings: Settings, receiver: Receiver, ciphertext: bytes, secret: str) -> bool:
    """The webhook sender under `settings` posts a message signed with the stored secret; the
    receiver verifies it with `secret`, as the host does."""
    receiver.secret = secret
    context: dict[str, Any] = {
        "secret_ciphertext": ciphertext,
        "payload": {"type": "webhook.test", "data": {}},
        "url": receiver.url,
        "public_id": uuid.uuid4(),
    }
    async with httpx.AsyncClient() as client:
        outcome = await webhooks.post_one(client, settings, context)
    return outcome.sent


def assert_quiet(result: Result, *never: str) -> None:
    """Nothing secret in what the command printed, on either stream."""
    for value in never:
        assert value not in result.output


async def test_rotation_re_encrypts_every_tenants_secrets_while_services_keep_working(
    engine: AsyncEngine, own_url: str, settings: Settings, receiver: Receiver
) -> None:
    """Issue 44 (item 4): processes with the new key as primary and the old in the ring read
    both before the rotation; the rotation re-encrypts every old ciphertext of every tenant in
    one run, skips what the new key already wrote, and afterwards the new key alone reads
    everything while the old key alone reads nothing."""
    old, new = Fernet.generate_key(), Fernet.generate_key()
    before = keyed(settings, own_url, old)
    during = keyed(settings, own_url, new, [old])
    after = keyed(settings, own_url, new)
    tenants = [f"t-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    endpoints, tokens = await seed(engine, before, tenants, receiver.url)
    old_webhooks, old_vault = await stored(engine)
    assert len(old_webhooks) == 4 and len(old_vault) == 4

    # Mid-rotation: every process deployed with the ring, the command not yet run.
    some_endpoint = next(iter(endpoints))
    assert await signs(during, receiver, old_webhooks[some_endpoint], endpoints[some_endpoint])
    claimed_ref = next(iter(tokens))
    claimed = await build_vault(during, engine).claim(tenants[0], claimed_ref, "d-ring")
    assert claimed == {"token": tokens[claimed_ref]}
    # What a process with the ring writes is under the new key already.
    fresh_secret = await create_endpoint(engine, during, tenants[1], receiver.url)
    fresh_endpoint = await public_id_of(engine, fresh_secret, during)
    fresh_token = "reset-fresh-" + uuid.uuid4().hex
    fresh_ref = await stash(engine, during, tenants[0], fresh_token)
    mid_webhooks, mid_vault = await stored(engine)
    Fernet(new).decrypt(mid_webhooks[fresh_endpoint])
    Fernet(new).decrypt(mid_vault[fresh_ref])
    assert not receiver.unverified

    result = await rotate_key(own_url, keys_env(new, old))

    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "8"
    assert "Re-encrypted 8 secret(s)" in result.stderr
    assert "4 webhook signing, 4 vault" in result.stderr
    assert "2 already under it" in result.stderr
    assert_quiet(result, old.decode(), new.decode(), *endpoints.values(), *tokens.values())
    new_webhooks, new_vault = await stored(engine)
    assert new_webhooks.keys() == mid_webhooks.keys() and new_vault.keys() == mid_vault.keys()
    # The rows the new key wrote are untouched, byte for byte; every other one changed.
    assert new_webhooks[fresh_endpoint] == mid_webhooks[fresh_endpoint]
    assert new_vault[fresh_ref] == mid_vault[fresh_ref]
    for endpoint, secret in endpoints.items():
        assert new_webhooks[endpoint] != old_webhooks[endpoint]
        assert Fernet(new).decrypt(new_webhooks[endpoint]).decode() == secret
        with pytest.raises(InvalidToken):
            Fernet(old).decrypt(new_webhooks[endpoint])
    for ref, token in tokens.items():
        assert new_vault[ref] != old_vault[ref]
        assert Fernet(new).decrypt(new_vault[ref]).decode() == f'{{"token": "{token}"}}'
        with pytest.raises(InvalidToken):
            Fernet(old).decrypt(new_vault[ref])

    # After the rotation the old key can leave the ring: the new key alone reads everything.
    for endpoint, secret in endpoints.items():
        assert await signs(after, receiver, new_webhooks[endpoint], secret)
    assert not await signs(before, receiver, new_webhooks[some_endpoint], endpoints[some_endpoint])
    vault = build_vault(after, engine)
    # The claim taken before the rotation is still its holder's to read again, now re-encrypted.
    assert await vault.claim(tenants[0], claimed_ref, "d-ring") == {"token": tokens[claimed_ref]}
    for ref, token in tokens.items():
        if ref != claimed_ref:
            tenant = next(t for t in tenants if t in token)
            assert await vault.claim(tenant, ref, "d-after") == {"token": token}
    assert await vault.claim(tenants[0], fresh_ref, "d-after") == {"token": fresh_token}
    assert not receiver.unverified


async def test_running_the_rotation_again_is_harmless(
    engine: AsyncEngine, own_url: str, settings: Settings, receiver: Receiver
) -> None:
    """Issue 44 (item 4): a second run (after a crash, or by mistake) finds every secret under
    the new key, re-encrypts none and changes no byte."""
    old, new = Fernet.generate_key(), Fernet.generate_key()
    tenants = [f"t-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    await seed(engine, keyed(settings, own_url, old), tenants, receiver.url)

    first = await rotate_key(own_url, keys_env(new, old))
    assert first.exit_code == 0, first.output
    assert first.stdout.strip().splitlines()[-1] == "8"
    rotated = await stored(engine)

    second = await rotate_key(own_url, keys_env(new, old))
    assert second.exit_code == 0, second.output
    assert second.stdout.strip().splitlines()[-1] == "0"
    assert "8 already under it" in second.stderr
    assert await stored(engine) == rotated


async def test_a_wrong_old_key_refuses_and_touches_no_row(
    engine: AsyncEngine, own_url: str, settings: Settings, receiver: Receiver
) -> None:
    """Issue 44 (item 4): an old key that does not open the stored secrets refuses with a clear
    message and exit status 1, names what it could not read (never a key or a secret), and
    leaves every ciphertext byte-identical — even those it could have re-encrypted."""
    old, new, wrong = Fernet.generate_key(), Fernet.generate_key(), Fernet.generate_key()
    tenants = [f"t-{uuid.uuid4().hex[:12]}" for _ in range(2)]
    endpoints, tokens = await seed(engine, keyed(settings, own_url, old), tenants, receiver.url)
    # One secret the wrong key does open: the refusal must not re-encrypt it either.
    await stash(engine, keyed(settings, own_url, wrong), tenants[0], "reset-under-wrong")
    before = await stored(engine)

    result = await rotate_key(own_url, keys_env(new, wrong))

    assert result.exit_code == 1, result.output
    assert "VAULT_KEY_MISMATCH" in result.stderr
    assert "4 webhook signing secret(s)" in result.stderr
    assert "4 vault secret(s) in 2 tenant(s)" in result.stderr
    assert "nothing was changed" in result.stderr
    for endpoint in endpoints:
        assert endpoint in result.stderr  # its public id, so the operator can find it
    assert result.stdout == ""
    assert_quiet(
        result, old.decode(), new.decode(), wrong.decode(), *endpoints.values(), *tokens.values()
    )
    assert await stored(engine) == before


@pytest.mark.parametrize(
    ("env", "code", "says"),
    [
        ({"HERALD_VAULT_OLD_KEYS": "{old}"}, 1, "HERALD_VAULT_KEY is not set"),
        (
            {"HERALD_VAULT_KEY": "not-a-fernet-key-but-long", "HERALD_VAULT_OLD_KEYS": "{old}"},
            1,
            "HERALD_VAULT_KEY is not a Fernet key",
        ),
        ({"HERALD_VAULT_KEY": "{new}"}, 1, "HERALD_VAULT_OLD_KEYS is not set"),
        # HERALD_VAULT_OLD_KEYS is a setting too: the configuration refuses it first.
        (
            {"HERALD_VAULT_KEY": "{new}", "HERALD_VAULT_OLD_KEYS": "{old},not-a-fernet-key-either"},
            2,
            "HERALD_VAULT_OLD_KEYS: entry 2 is not a Fernet key",
        ),
        ({"HERALD_VAULT_KEY": "{old}", "HERALD_VAULT_OLD_KEYS": "{old}"}, 1, "also among the old"),
    ],
)
async def test_a_missing_or_malformed_key_refuses_and_touches_no_row(
    engine: AsyncEngine,
    own_url: str,
    settings: Settings,
    receiver: Receiver,
    env: dict[str, str],
    code: int,
    says: str,
) -> None:
    """Issue 44 (item 4): a missing or malformed key, or the same key as old and new, refuses
    before any row is read; the message names the variable, never its value."""
    old, new = Fernet.generate_key(), Fernet.generate_key()
    await seed(engine, keyed(settings, own_url, old), [f"t-{uuid.uuid4().hex[:12]}"], receiver.url)
    before = await stored(engine)
    given = {name: value.format(old=old.decode(), new=new.decode()) for name, value in env.items()}

    result = await rotate_key(own_url, given)

    assert result.exit_code == code, result.output
    assert says in result.stderr
    assert_quiet(result, old.decode(), new.decode(), "not-a-fernet-key")
    assert await stored(engine) == before


async def test_other_variables_can_hold_the_keys(
    engine: AsyncEngine, own_url: str, settings: Settings, receiver: Receiver
) -> None:
    """Issue 44 (item 4): --old-key-env and --new-key-env name where the keys are; the old one
    may be a list, of which each secret needs only one."""
    first, second, new = (Fernet.generate_key() for _ in range(3))
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    await seed(engine, keyed(settings, own_url, first), [tenant], receiver.url)
    await stash(engine, keyed(settings, own_url, second), tenant, "reset-under-second")

    result = await rotate_key(
        own_url,
        {"ROTATE_FROM": f"{second.decode()},{first.decode()}", "ROTATE_TO": new.decode()},
        "--old-key-env",
        "ROTATE_FROM",
        "--new-key-env",
        "ROTATE_TO",
    )

    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1] == "5"
    webhook_rows, vault_rows = await stored(engine)
    for ciphertext in [*webhook_rows.values(), *vault_rows.values()]:
        Fernet(new).decrypt(ciphertext)


async def test_the_web_push_key_file_is_rotated_with_the_same_key_pair(
    engine: AsyncEngine, own_url: str, settings: Settings, receiver: Receiver, tmp_path: Any
) -> None:
    """The VAPID key file lives outside the database, encrypted with the vault key: the rotation
    re-encrypts it under the new key and keeps the key pair, so no browser must subscribe
    again; a second run is harmless."""
    from herald.channels import webpush

    old, new = Fernet.generate_key(), Fernet.generate_key()
    before = settings.model_copy(
        update={
            "vault_key": old.decode(),
            "data_dir": tmp_path,
            "webpush_vapid_subject": "mailto:ops@school.example",
        }
    )
    public = webpush.public_key(webpush.load_or_create_vapid(before))
    env = keys_env(new, old) | {"HERALD_DATA_DIR": str(tmp_path)}
    for _ in range(2):
        result = await rotate_key(own_url, env)
        assert result.exit_code == 0, result.output
        assert "Re-encrypted the Web Push key file" in result.stderr
        assert_quiet(result, old.decode(), new.decode())
    after = before.model_copy(update={"vault_key": new.decode()})
    assert webpush.public_key(webpush.load_or_create_vapid(after)) == public
    Fernet(new).decrypt(webpush.key_file(after).read_bytes())


async def test_provider_account_secrets_are_rotated_and_still_send(
    engine: AsyncEngine, own_url: str, settings: Settings
) -> None:
    """Issue 46 item 4: a tenant's provider secrets are re-encrypted with the rest; afterwards a
    worker holding only the new key still builds the tenant's provider with its password, and
    the account's version is unchanged (nothing about it changed)."""
    from herald.admin.providers import service as provider_accounts
    from herald.admin.providers.schemas import ProviderAccountIn
    from herald.channels.smtp import SmtpEmailProvider
    from herald.delivery.accounts import TenantProviders

    old, new = Fernet.generate_key(), Fernet.generate_key()
    before, after = keyed(settings, own_url, old), keyed(settings, own_url, new)
    tenant = f"t-{uuid.uuid4().hex[:12]}"
    password = "smtp-" + uuid.uuid4().hex
    async with engine.begin() as conn:
        await tenancy.enter_tenant(conn, tenant)
        await provider_accounts.put_account(
            conn,
            admin(tenant),
            before,
            "smtp",
            ProviderAccountIn(settings={"host": "127.0.0.1", "password": password}),
        )

    result = await rotate_key(own_url, keys_env(new, old))
    assert result.exit_code == 0, result.output
    assert "1 provider account" in result.stderr
    assert_quiet(result, old.decode(), new.decode(), password)
    async with engine.connect() as conn:
        version, ciphertext = (
            await conn.execute(
                select(
                    s.notification_provider_account.c.version,
                    s.notification_provider_account.c.secret_ciphertext,
                )
            )
        ).one()
    assert version == 1
    assert password in Fernet(new).decrypt(bytes(ciphertext)).decode()
    default = SmtpEmailProvider(after)
    accounts = TenantProviders(after, {"email": default})
    await accounts.refresh(engine)
    own = accounts.provider_for(tenant, "email")
    assert own is not default and own.is_configured()
    assert accounts._accounts[tenant]["smtp"]["password"] == password
    await accounts.aclose()
