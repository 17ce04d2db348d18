"""`herald send`: record an event from the command line, as POST /v1/events does."""

from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from herald.cli import common
from herald.cli.common import TenantOption, console

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


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

    settings = common.load_settings()
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
    with common.reported_errors():
        registry = get_registry()

    async def record(conn: AsyncConnection) -> sending.SendResult:
        result = await sending.asend(conn, send_input, registry=registry)
        assert result is not None  # only best_effort sends answer None
        return result

    result = common.run(common.in_transaction(settings, record))
    console.print("recorded" if result.created else "folded into an existing event")
    print(result.id)
