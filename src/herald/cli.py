"""The `herald` command: every process role and the operator's tools (DESIGN.md §1, §5.1).

Commands that print something another program reads (`keys create`, `token`, `send`) put it
alone on the last line of standard output and everything meant for a person on standard error.
Every command finds its database through herald.runtime.database.resolve_database_url.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import logging
import os
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from herald.config import Settings
from herald.errors import HeraldError

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from herald.demo.dev import DevInfo

T = TypeVar("T")

app = typer.Typer(
    name="herald",
    help="Herald: a self-hostable notification engine over PostgreSQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
keys_app = typer.Typer(help="API keys for the host's server-side calls.", no_args_is_help=True)
demo_app = typer.Typer(help="The demo school directory (tenant `demo`).", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(demo_app, name="demo")
broadcasts_app = typer.Typer(help="Broadcasts (DESIGN.md §5.2).", no_args_is_help=True)
app.add_typer(broadcasts_app, name="broadcasts")
people_app = typer.Typer(help="The tenant's directory of people.", no_args_is_help=True)
app.add_typer(people_app, name="people")


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


# For people; machine-readable answers go to stdout with print().
console = Console(stderr=True, soft_wrap=True, highlight=False)

HostOption = Annotated[str, typer.Option(help="Address to listen on.")]
PortOption = Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")]
TenantOption = Annotated[str, typer.Option("--tenant", help="Tenant id.")]


# ---------------------------------------------------------------------------------------------
# Plumbing shared by the commands


def _fail(message: str, code: int = 1) -> NoReturn:
    console.print(f"[red]error:[/] {escape(message)}", markup=True)
    raise typer.Exit(code)


@contextmanager
def _reported_errors() -> Iterator[None]:
    """Turn Herald's own errors, and an unreachable database, into one line on stderr and
    exit status 1; anything else is a bug and keeps its traceback."""
    try:
        yield
    except HeraldError as exc:
        _fail(f"{exc.code}: {exc.message}")
    except Exception as exc:
        reason = _connection_failure(exc)
        if reason is None:
            raise
        _fail(f"cannot reach the database: {reason}")


def _connection_failure(exc: Exception) -> str | None:
    import psycopg
    from sqlalchemy.exc import OperationalError

    if isinstance(exc, OperationalError):
        return str(exc.orig).strip()
    if isinstance(exc, psycopg.OperationalError):
        return str(exc).strip()
    return None


def _settings() -> Settings:
    try:
        return Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"HERALD_{'.'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        _fail(f"invalid configuration: {problems}", code=2)


def _configure_logging(settings: Settings, role: str, *, dev: bool = False) -> None:
    """Logs (JSON a line, or text under `herald dev`), the metrics directory this host's Herald
    processes share, and tracing when an OTLP endpoint is set (herald.observability)."""
    from herald.observability import logs, tracing

    logs.configure(settings, role, dev=dev)
    if not dev:
        # One process in `herald dev`: its own registry is the whole story.
        from herald.observability import metrics

        directory = settings.metrics_dir or (
            Path(os.environ[metrics.MULTIPROC_ENV])
            if os.environ.get(metrics.MULTIPROC_ENV)
            else settings.data_dir / "metrics"
        )
        metrics.use_directory(directory)
    if tracing.configure(settings, role):
        atexit.register(tracing.shutdown)


@contextmanager
def _metrics_endpoint(settings: Settings) -> Iterator[None]:
    """HERALD_METRICS_PORT: this process serves /metrics itself (a worker with no API beside it)."""
    if settings.metrics_port is None:
        yield
        return
    from prometheus_client import start_http_server

    from herald.observability import metrics

    server, thread = start_http_server(settings.metrics_port, registry=metrics.registry())
    logging.getLogger(__name__).info("metrics served on port %d", settings.metrics_port)
    try:
        yield
    finally:
        server.shutdown()
        thread.join(timeout=5)


def _run(main: Coroutine[Any, Any, T], *, fast_loop: bool = False) -> T:
    """Run `main` to completion; `fast_loop`: on uvloop's event loop when it is installed (the
    API, where the loop's own cost is part of every request's, and the worker and the
    scheduler, whose batches make a dozen round trips each: psycopg's wait on every one of them
    registers and unregisters a reader with the loop, and on the standard loop that was a
    tenth of a worker's CPU a delivery; docs/scaling.md, the worker)."""
    with _reported_errors():
        try:
            with asyncio.Runner(loop_factory=fast_loop_factory() if fast_loop else None) as runner:
                return runner.run(main)
        except asyncio.CancelledError:
            # A second Ctrl-C cancelled the graceful stop.
            raise typer.Exit(130) from None


def fast_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop factory, or None (the standard loop) where it is not installed: the
    loop `herald api`, `herald worker` and `herald scheduler` run on (benches use it too)."""
    try:
        import uvloop
    except ImportError:  # not installed (Windows): the standard loop
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


async def _in_transaction(settings: Settings, work: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    """Run `work` in one transaction on this process's database, then close the pool."""
    from herald.db.engine import make_async_engine
    from herald.runtime.database import resolve_database_url

    engine = make_async_engine(
        resolve_database_url(settings), pool_size=1, application_name="herald-cli"
    )
    try:
        async with engine.begin() as conn:
            return await work(conn)
    finally:
        await engine.dispose()


# ---------------------------------------------------------------------------------------------
# Processes


@app.command()
def migrate() -> None:
    """Apply the database migrations (idempotent)."""
    from herald.db import migrate as db_migrate
    from herald.runtime.database import resolve_database_url

    settings = _settings()
    with _reported_errors():
        db_migrate.upgrade(resolve_database_url(settings))
    console.print("database is up to date")


@app.command()
def api(host: HostOption = "127.0.0.1", port: PortOption = 8000) -> None:
    """Serve the HTTP API (FastAPI under uvicorn) until SIGINT/SIGTERM."""
    settings = _settings()
    _configure_logging(settings, "api")
    _run(_serve(settings, host, port), fast_loop=True)


async def _serve(settings: Settings, host: str, port: int) -> None:
    from herald.api.app import create_app
    from herald.db.engine import API_PING_AFTER_IDLE_SECONDS, make_async_engine
    from herald.kinds import get_registry
    from herald.runtime import server
    from herald.runtime.database import resolve_database_url

    registry = get_registry()
    engine = make_async_engine(
        resolve_database_url(settings),
        pool_size=settings.db_pool_size,
        ping_after_idle=API_PING_AFTER_IDLE_SECONDS,
        application_name="herald-api",
    )
    stop = asyncio.Event()
    try:
        with server.stop_on_signals(stop):
            await server.serve_api(
                create_app(settings, engine, registry), host=host, port=port, stop=stop, freeze=True
            )
    finally:
        await engine.dispose()


@app.command()
def worker(
    tenant: Annotated[
        str | None,
        typer.Option(help="Work for this tenant only (sharding workers by tenant); default: all."),
    ] = None,
    fanout: Annotated[
        bool,
        typer.Option(
            "--fanout/--no-fanout",
            help="Fan events out (--no-fanout: a process for the channel senders only).",
        ),
    ] = True,
    channels: Annotated[
        bool,
        typer.Option(
            "--channels/--no-channels",
            help="Send deliveries (--no-channels: a fan-out process whose event loop no "
            "sender shares, so a big broadcast's sends do not slow its own fan-out).",
        ),
    ] = True,
) -> None:
    """Run the background worker until SIGINT/SIGTERM, then drain and exit."""
    if not fanout and not channels:
        raise typer.BadParameter("--no-fanout and --no-channels together leave nothing to run")
    settings = _settings()
    _configure_logging(settings, "worker")
    with _metrics_endpoint(settings):
        _run(_work(settings, tenant, fanout=fanout, channels=channels), fast_loop=True)


async def _work(
    settings: Settings, tenant: str | None = None, *, fanout: bool = True, channels: bool = True
) -> None:
    from herald.db.engine import make_async_engine
    from herald.kinds import get_registry
    from herald.runtime import server
    from herald.runtime.database import resolve_database_url
    from herald.runtime.worker import run_worker

    registry = get_registry()
    engine = make_async_engine(
        resolve_database_url(settings),
        pool_size=settings.db_pool_size,
        application_name="herald-worker",
    )
    stop = asyncio.Event()
    # Everything alive now lives as long as the process: out of the collector's walks.
    server.freeze_startup_objects()
    try:
        with server.stop_on_signals(stop):
            await run_worker(
                settings,
                engine,
                registry,
                stop,
                tenant_id=tenant,
                fanout=fanout,
                channels=channels,
            )
    finally:
        # R-OPS-12: the pool is closed before the process exits.
        await engine.dispose()


@app.command()
def scheduler() -> None:
    """Run the scheduler (reminder occurrences) until SIGINT/SIGTERM, then stop cleanly.

    Several may run against one database: a database lease lets one fire at a time.
    """
    settings = _settings()
    _configure_logging(settings, "scheduler")
    with _metrics_endpoint(settings):
        _run(_schedule(settings), fast_loop=True)


async def _schedule(settings: Settings) -> None:
    from herald.db.engine import make_async_engine
    from herald.kinds import get_registry
    from herald.runtime import server
    from herald.runtime.database import resolve_database_url
    from herald.runtime.scheduler import run_scheduler

    registry = get_registry()
    # One tick's transactions run one after another: a small pool is plenty.
    engine = make_async_engine(
        resolve_database_url(settings), pool_size=2, application_name="herald-scheduler"
    )
    stop = asyncio.Event()
    try:
        with server.stop_on_signals(stop):
            await run_scheduler(settings, engine, registry, stop)
    finally:
        # R-OPS-12: the pool is closed before the process exits.
        await engine.dispose()


@app.command()
def dev(host: HostOption = "127.0.0.1", port: PortOption = 8000) -> None:
    """Everything on a laptop: embedded PostgreSQL, demo school, API, worker and scheduler in one
    process."""
    from herald.db import migrate as db_migrate
    from herald.demo import dev as devmode
    from herald.runtime.database import resolve_database_url

    settings = _settings()
    _configure_logging(settings, "dev", dev=True)
    state = devmode.load_state(settings.data_dir)
    settings = devmode.dev_settings(settings, state)
    with _reported_errors():
        url = resolve_database_url(settings)
        db_migrate.upgrade(url)
    _run(devmode.run_dev(settings, url, state, host=host, port=port, announce=_announce_dev))
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


# ---------------------------------------------------------------------------------------------
# Tools


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

    settings = _settings()
    scope_list = [s.strip() for s in scopes.split(",") if s.strip()]

    async def create(conn: AsyncConnection) -> str:
        return await auth.create_api_key(conn, tenant_id=tenant, scopes=scope_list, name=name)

    key = _run(_in_transaction(settings, create))
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

    settings = _settings()

    async def listed(conn: AsyncConnection) -> list[Any]:
        return await auth.list_api_keys(conn, tenant)

    found = _run(_in_transaction(settings, listed))
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

    settings = _settings()

    async def revoke(conn: AsyncConnection) -> Any:
        return await auth.revoke_api_key(conn, tenant, key.rstrip("…"))

    revoked = _run(_in_transaction(settings, revoke))
    console.print(f"revoked {revoked.prefix}… ({escape(revoked.name)}) in tenant {escape(tenant)}")
    print(revoked.public_id)


@app.command()
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

    settings = _settings()
    if not settings.jwt_secret:
        stored = devstate.load_state(settings.data_dir).jwt_secret
        settings = settings.model_copy(update={"jwt_secret": stored})
    with _reported_errors():
        signed = auth.sign_token(
            settings, tenant_id=tenant, subject=sub, role=role, ttl=timedelta(hours=hours)
        )
    print(signed)


def _parse_variables(pairs: list[str]) -> dict[str, str]:
    variables: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"expected key=value, got {pair!r}", param_hint="--var")
        variables[key.strip()] = value
    return variables


def _parse_audience(raw: str) -> dict[str, Any]:
    try:
        audience = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--audience") from None
    if not isinstance(audience, dict):
        raise typer.BadParameter("must be a JSON object", param_hint="--audience")
    return audience


def _parse_moment(raw: str | None) -> datetime | None:
    if raw is None:
        return None
    try:
        return datetime.fromisoformat(raw)
    except ValueError:
        raise typer.BadParameter(
            "expected an ISO 8601 time such as 2026-12-01T08:00:00Z", param_hint="--scheduled-for"
        ) from None


@app.command()
def send(
    kind: Annotated[str, typer.Argument(help="The kind, e.g. announcement.posted.")],
    tenant: TenantOption,
    audience: Annotated[str, typer.Option(help='Audience JSON, e.g. {"kind":"all_users"}.')],
    var: Annotated[
        list[str] | None, typer.Option("--var", help="A variable as key=value; repeatable.")
    ] = None,
    channel: Annotated[
        list[str] | None,
        typer.Option("--channel", help="A channel; repeatable (default: the kind's channels)."),
    ] = None,
    action_url: Annotated[str | None, typer.Option(help="Where the notification leads.")] = None,
    scheduled_for: Annotated[
        str | None, typer.Option(help="Deliver at this ISO 8601 time instead of now.")
    ] = None,
    request_id: Annotated[
        str | None, typer.Option(help="Idempotency key (folds repeatable kinds).")
    ] = None,
) -> None:
    """Record an event, as POST /v1/events does; its id is the last line of standard output."""
    from herald.kinds import get_registry
    from herald.sending import service as sending

    settings = _settings()
    send_input = sending.SendInput(
        tenant_id=tenant,
        kind=kind,
        audience=_parse_audience(audience),
        channels=channel or None,
        variables=_parse_variables(var or []),
        action_url=action_url,
        scheduled_for=_parse_moment(scheduled_for),
        request_id=request_id,
    )
    with _reported_errors():
        registry = get_registry()

    async def record(conn: AsyncConnection) -> sending.SendResult:
        result = await sending.asend(conn, send_input, registry=registry)
        assert result is not None  # only best_effort sends answer None
        return result

    result = _run(_in_transaction(settings, record))
    console.print("recorded" if result.created else "folded into an existing event")
    print(result.id)


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

    settings = _settings()

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

    with _reported_errors():
        final = _run(watch())
    console.print(f"{final.state}: {final.recipients} recipients; {final.describe()}")
    print(final.state)


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
    """Load roles, groups, people, memberships and guardianships from a file (README: "Importing
    a directory"). Rejected lines are listed with their numbers and reasons and the rest still go
    in; a line that would change nothing is counted unchanged, so a second run writes nothing.
    The summary is one JSON object on the last line of stdout; the exit status is 0, or 3 when
    some lines were rejected."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from herald.db.engine import make_async_engine
    from herald.directory import importer
    from herald.runtime.database import resolve_database_url

    settings = _settings()
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

        report = _run(load())
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


@demo_app.command("load")
def demo_load() -> None:
    """Load (or refresh) the demo school directory; idempotent."""
    from herald.demo import loader
    from herald.demo.school import SCHOOL

    settings = _settings()

    async def load(conn: AsyncConnection) -> loader.LoadSummary:
        return await loader.load_school(conn, SCHOOL)

    summary = _run(_in_transaction(settings, load))
    console.print(f"tenant {SCHOOL.tenant_id}: {summary.describe()}")
