"""`herald demo load`: the demo school directory."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from herald.cli import common
from herald.cli.common import console

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


demo_app = typer.Typer(help="The demo school directory (tenant `demo`).", no_args_is_help=True)


@demo_app.command("load")
def demo_load() -> None:
    """Load (or refresh) the demo school directory; idempotent."""
    from herald.demo import loader
    from herald.demo.school import SCHOOL

    settings = common.load_settings()

    async def load(conn: AsyncConnection) -> loader.LoadSummary:
        return await loader.load_school(conn, SCHOOL)

    summary = common.run(common.in_transaction(settings, load))
    console.print(f"tenant {SCHOOL.tenant_id}: {summary.describe()}")
