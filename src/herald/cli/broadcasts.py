"""`herald broadcasts status`: a broadcast's state and delivery counts, optionally followed."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from herald.cli import common
from herald.cli.common import TenantOption, console

broadcasts_app = typer.Typer(help="Broadcasts (DESIGN.md §5.2).", no_args_is_help=True)


@broadcasts_app.command("status")
def broadcasts_status(
    broadcast_id: Annotated[str, typer.Argument(help="The broadcast's id.")],
    tenant: TenantOption,
    follow: Annotated[
        bool, typer.Option("--follow", help="Watch until it is completed, failed or cancelled.")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.2, max=60, help="Seconds between reads.")] = 1.0,
) -> None:
    """Print a broadcast's state and its delivery counts (read from the delivery rows); with
    --follow, a progress bar until it is completed or failed, or cancelled with nothing left in
    flight."""
    from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

    from herald.db import tenancy
    from herald.db.engine import make_async_engine
    from herald.runtime.database import resolve_database_url
    from herald.scheduling.broadcasts import service as broadcasts

    settings = common.load_settings()

    async def watch() -> broadcasts.Status:
        engine = make_async_engine(
            resolve_database_url(settings), pool_size=1, application_name="herald-cli"
        )
        try:
            with Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[counts]}"),
                console=console,
                transient=False,
                disable=not follow,
            ) as progress:
                task = progress.add_task("", total=None, counts="")
                while True:
                    async with engine.begin() as conn:
                        await tenancy.enter_tenant(conn, tenant)
                        status = await broadcasts.status(conn, tenant, broadcast_id)
                    progress.update(
                        task,
                        description=f"{status.state} · {status.recipients} recipients",
                        total=max(status.deliveries, 1),
                        completed=status.finished,
                        counts=status.describe(),
                    )
                    if not follow or status.done:
                        return status
                    await asyncio.sleep(interval)
        finally:
            await engine.dispose()

    with common.reported_errors():
        final = common.run(watch())
    console.print(f"{final.state}: {final.recipients} recipients; {final.describe()}")
    print(final.state)
