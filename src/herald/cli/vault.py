"""`herald vault rotate-key`: re-encrypt every stored secret from the old vault key to the new one.

The keys are read from environment variables, never from the command line, so they stay out of
shell history and `ps`: by default the new key from HERALD_VAULT_KEY and the old one (or
several, comma-separated) from HERALD_VAULT_OLD_KEYS — the same environment every process runs
with during a rotation (docs/tenancy-and-security.md, rotating the vault key). `--new-key-env`
and `--old-key-env` name other variables.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli import common
from herald.cli.common import console

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from herald.maintenance.keyrotation import RotationReport

vault_app = typer.Typer(help="The vault key that encrypts stored secrets.", no_args_is_help=True)


@vault_app.command("rotate-key")
def rotate_key(
    old_key_env: Annotated[
        str,
        typer.Option(
            help="The environment variable holding the old key (or several, comma-separated)."
        ),
    ] = "HERALD_VAULT_OLD_KEYS",
    new_key_env: Annotated[
        str, typer.Option(help="The environment variable holding the new key.")
    ] = "HERALD_VAULT_KEY",
) -> None:
    """Re-encrypt every tenant's stored secrets (webhook signing secrets, the embedded vault's
    entries, provider account secrets) under the new key, in one transaction, then this node's Web Push key file.

    Run it once every process reads with both keys (the new one as HERALD_VAULT_KEY, the old in
    HERALD_VAULT_OLD_KEYS). A secret already under the new key is skipped, so running it again
    is harmless. When a stored secret opens under neither key, nothing is changed and the exit
    status is 1. The number re-encrypted is printed alone on standard output.
    """
    from herald.maintenance import keyrotation

    settings = common.load_settings()
    with common.reported_errors():
        new = keyrotation.parse_key(os.environ.get(new_key_env), new_key_env)
        old = keyrotation.parse_keys(os.environ.get(old_key_env), old_key_env)

    async def rotated(conn: AsyncConnection) -> RotationReport:
        return await keyrotation.rotate(conn, old, new)

    report = common.run(common.in_transaction(settings, rotated))
    # This node's Web Push key file (outside the database) goes under the new key too.
    from cryptography.fernet import MultiFernet

    from herald.channels import webpush

    with common.reported_errors():
        if webpush.rotate_key_file(settings, MultiFernet([new, *old])):
            console.print(f"Re-encrypted the Web Push key file {webpush.key_file(settings)}.")
    console.print(
        f"Re-encrypted {report.re_encrypted} secret(s) under the new key "
        f"({report.webhook_secrets} webhook signing, {report.vault_secrets} vault, "
        f"{report.provider_secrets} provider account); "
        f"{report.already_rotated} already under it."
    )
    print(report.re_encrypted)
