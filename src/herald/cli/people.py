"""`herald people import`: load a directory from a file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from herald.cli import common
from herald.cli.common import TenantOption, console

people_app = typer.Typer(help="The tenant's directory of people.", no_args_is_help=True)


@people_app.command("import")
def people_import(
    file: Annotated[
        Path,
        typer.Argument(
            exists=True, dir_okay=False, readable=True, help="A .jsonl (or .json) or .csv file."
        ),
    ],
    tenant: TenantOption,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check and count everything, then write nothing.")
    ] = False,
    batch_size: Annotated[int, typer.Option(min=1, max=1000, help="Lines per transaction.")] = 1000,
) -> None:
    """Load roles, groups, people, memberships and guardianships from a file
    (docs/importing-people.md). Rejected lines are listed with their numbers and reasons and the
    rest still go in; a line that would change nothing is counted unchanged, so a second run writes nothing.
    The summary is one JSON object on the last line of stdout; the exit status is 0, or 3 when
    some lines were rejected."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from herald.db.engine import make_async_engine
    from herald.directory import importer
    from herald.runtime.database import resolve_database_url

    settings = common.load_settings()
    with Progress(
        TextColumn("{task.description:>13}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
    ) as bar:
        tasks: dict[str, Any] = {}

        def on_read(counts: dict[importer.Kind, int]) -> None:
            for kind, count in counts.items():
                if count:
                    tasks[kind] = bar.add_task(f"{kind}s", total=count)

        def advance(kind: importer.Kind, done: int) -> None:
            bar.advance(tasks[kind], done)

        async def load() -> importer.ImportReport:
            engine = make_async_engine(
                resolve_database_url(settings), pool_size=1, application_name="herald-cli"
            )
            try:
                return await importer.import_file(
                    engine,
                    tenant,
                    file,
                    dry_run=dry_run,
                    batch_size=batch_size,
                    on_read=on_read,
                    progress=advance,
                )
            finally:
                await engine.dispose()

        report = common.run(load())
    rejected = importer.sorted_rejections(report)
    for rejection in rejected:
        console.print(f"line {rejection.line}: {escape(rejection.reason)}")
    verb = "would be" if dry_run else "were"
    console.print(f"{report.lines} line(s) read from {escape(str(file))}; tenant {escape(tenant)}")
    for kind, tally in report.tallies.items():
        if tally.total:
            console.print(
                f"{kind}s: {tally.created} {verb} created, {tally.updated} {verb} updated, "
                f"{tally.unchanged} unchanged"
            )
    console.print(
        f"{len(rejected)} line(s) rejected" + (" (dry run: nothing written)" if dry_run else "")
    )
    print(json.dumps(report.as_json()))
    if rejected:
        raise typer.Exit(3)
