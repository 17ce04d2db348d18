"""Credentials: the host's API keys (`keys create|list|revoke`) and a development end-user token."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from herald.cli import common
from herald.cli.common import TenantOption, console

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


keys_app = typer.Typer(help="API keys for the host's server-side calls.", no_args_is_help=True)


@keys_app.command("create")
def keys_create(
    tenant: TenantOption,
    scopes: Annotated[
        str,
        typer.Option(
            help="Comma-separated scopes (events:write, events:read, directory:write, "
            "secrets:write, feed:write, followups:write, admin, metrics:read), or * for all."
        ),
    ],
    name: Annotated[str, typer.Option(help="A label for the key.")] = "default",
) -> None:
    """Create an API key; it is shown once, alone on the last line of standard output."""
    from herald.auth import service as auth

    settings = common.load_settings()
    scope_list = [s.strip() for s in scopes.split(",") if s.strip()]

    async def create(conn: AsyncConnection) -> str:
        return await auth.create_api_key(conn, tenant_id=tenant, scopes=scope_list, name=name)

    key = common.run(common.in_transaction(settings, create))
    console.print("Store this key now: Herald keeps only its hash and cannot show it again.")
    print(key)


@keys_app.command("list")
def keys_list(
    tenant: TenantOption,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array on stdout.")] = False,
) -> None:
    """List the tenant's API keys, live and revoked: id, prefix, name, scopes and dates.

    The key itself is never shown (Herald keeps only its hash); the prefix is enough to tell
    keys apart and to revoke one. One key per line on standard output, tab-separated.
    """
    from herald.auth import service as auth

    settings = common.load_settings()

    async def listed(conn: AsyncConnection) -> list[Any]:
        return await auth.list_api_keys(conn, tenant)

    found = common.run(common.in_transaction(settings, listed))
    rows = [
        {
            "id": str(key.public_id),
            "prefix": key.prefix,
            "name": key.name,
            "scopes": key.scopes,
            "createdAt": key.created_at.isoformat(),
            "lastUsedAt": key.last_used_at.isoformat() if key.last_used_at else None,
            "revokedAt": key.revoked_at.isoformat() if key.revoked_at else None,
        }
        for key in found
    ]
    if as_json:
        print(json.dumps(rows))
        return
    console.print(f"{len(rows)} key(s) in tenant {escape(tenant)}: id, prefix, name, scopes, state")
    for row in rows:
        state = f"revoked {row['revokedAt']}" if row["revokedAt"] else "live"
        used = f"last used {row['lastUsedAt']}" if row["lastUsedAt"] else "never used"
        scopes = ",".join(row["scopes"])
        print(f"{row['id']}\t{row['prefix']}…\t{row['name']}\t{scopes}\t{state}\t{used}")


@keys_app.command("revoke")
def keys_revoke(
    tenant: TenantOption,
    key: Annotated[str, typer.Argument(help="The key's id, or its prefix as `keys list` shows.")],
) -> None:
    """Revoke one API key; it stops authenticating at once. Its id is the last line of stdout."""
    from herald.auth import service as auth

    settings = common.load_settings()

    async def revoke(conn: AsyncConnection) -> Any:
        return await auth.revoke_api_key(conn, tenant, key.rstrip("…"))

    revoked = common.run(common.in_transaction(settings, revoke))
    console.print(f"revoked {revoked.prefix}… ({escape(revoked.name)}) in tenant {escape(tenant)}")
    print(revoked.public_id)


def token(
    tenant: TenantOption,
    sub: Annotated[str, typer.Option("--sub", help="The person's external id.")],
    role: Annotated[str | None, typer.Option(help="The active role code.")] = None,
    hours: Annotated[int, typer.Option(min=1, max=24 * 30, help="Lifetime in hours.")] = 12,
) -> None:
    """Sign an end-user JWT (HS256, HERALD_JWT_SECRET) for development; the token is the last line.

    Without HERALD_JWT_SECRET it uses the secret `herald dev` generated, when there is one.
    """
    from herald.auth import service as auth
    from herald.demo import dev as devstate

    settings = common.load_settings()
    if not settings.jwt_secret:
        stored = devstate.load_state(settings.data_dir).jwt_secret
        settings = settings.model_copy(update={"jwt_secret": stored})
    with common.reported_errors():
        signed = auth.sign_token(
            settings, tenant_id=tenant, subject=sub, role=role, ttl=timedelta(hours=hours)
        )
    print(signed)
