"""The `herald` command: every process role and the operator's tools (DESIGN.md §1, §5.1).

One module a group of commands: `serve` (migrate, api, worker, scheduler), `dev`, `credentials`
(keys, token), `send`, `broadcasts`, `people`, `vault` (rotate-key) and `demo`; `common` holds
what they share. This package assembles them into one Typer application, in the order
`herald --help` lists them.

Commands that print something another program reads (`keys create`, `token`, `send`) put it
alone on the last line of standard output and everything meant for a person on standard error.
Every command finds its database through herald.runtime.database.resolve_database_url.
"""

from __future__ import annotations

from typing import Annotated

import typer

from herald.cli import broadcasts, credentials, demo, dev, people, send, serve, vault
from herald.cli.common import fast_loop_factory

__all__ = ["app", "fast_loop_factory"]

app = typer.Typer(
    name="herald",
    help="Herald: a self-hostable notification engine over PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(credentials.keys_app, name="keys")
app.add_typer(demo.demo_app, name="demo")
app.add_typer(broadcasts.broadcasts_app, name="broadcasts")
app.add_typer(people.people_app, name="people")
app.add_typer(vault.vault_app, name="vault")
for command in (
    serve.migrate,
    serve.api,
    serve.worker,
    serve.scheduler,
    dev.dev,
    credentials.token,
    send.send,
):
    app.command()(command)


def _print_version(wanted: bool) -> None:
    if wanted:
        import herald

        print(f"herald {herald.__version__}")
        raise typer.Exit()


@app.callback()
def _herald(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print Herald's version and exit.",
        ),
    ] = False,
) -> None:
    """Herald: a self-hostable notification engine over PostgreSQL."""
