"""`herald dev`: everything on a laptop in one process, and what it prints on start."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console

from herald.cli import common
from herald.cli.common import HostOption, PortOption, console

if TYPE_CHECKING:
    from herald.demo.dev import DevInfo


def dev(host: HostOption = "127.0.0.1", port: PortOption = 8000) -> None:
    """Everything on a laptop: embedded PostgreSQL, demo school, API, worker and scheduler in one
    process."""
    from herald.db import migrate as db_migrate
    from herald.demo import dev as devmode
    from herald.runtime.database import resolve_database_url

    settings = common.load_settings()
    common.configure_logging(settings, "dev", dev=True)
    state = devmode.load_state(settings.data_dir)
    settings = devmode.dev_settings(settings, state)
    with common.reported_errors():
        url = resolve_database_url(settings)
        db_migrate.upgrade(url)
    common.run(devmode.run_dev(settings, url, state, host=host, port=port, announce=_announce_dev))
    console.print("herald dev stopped")


def _announce_dev(info: DevInfo) -> None:
    out = Console(soft_wrap=True, highlight=False)
    out.print()
    out.print("[bold green]Herald is running[/] (API, worker and scheduler in this process)")
    out.print(f"  API        {info.base_url}   (docs: {info.base_url}/docs)", markup=False)
    out.print(f"  API key    {info.api_key}   (all scopes, tenant demo)", markup=False)
    out.print(
        f"  token      {info.token}   ({info.guardian}, role {info.guardian_role})", markup=False
    )
    out.print(
        f"  demo page  {info.demo_url}   (pick a person, watch their inbox live)", markup=False
    )
    out.print(f"  outbox     {info.outbox_url}   (what the mock providers sent)", markup=False)
    if info.console_operator:
        out.print(
            f"  console    {info.console_operator}   (the principal, every permission)",
            markup=False,
        )
        out.print(
            f"  console    {info.console_approver}   (the deputy: broadcast approver)",
            markup=False,
        )
    out.print()
    out.print("Send an announcement to the guardians of class 7A:")
    out.print(f"  {info.curl[0]}", markup=False)
    out.print(f"Read {info.guardian}'s inbox:")
    out.print(f"  {info.curl[1]}", markup=False)
    out.print(
        "Mark Aarav absent (a follow-up: his guardians are told after 10 s, reminded 30 s later):"
    )
    out.print(f"  {info.curl[2]}", markup=False)
    out.print("Acknowledge the absence before the reminder goes, and it never does:")
    out.print(f"  {info.curl[3]}", markup=False)
    if info.broadcast_curl:
        out.print("A broadcast, drafted by the principal and approved by the deputy:")
        for line in info.broadcast_curl:
            out.print(f"  {line}", markup=False)
    out.print()
    out.print("Ctrl-C stops.")
