"""Provider accounts: the tenant's own SMTP, SMS, Telegram, Slack and Web Push settings, each
secret shown only as set or not, with a form to set or clear each account.

The screen needs NotificationProvider_READ (404 otherwise, and its link is not shown); the forms
appear with NotificationProvider_WRITE, and the service checks it again. A secret's input is
always empty: leaving it empty keeps the stored secret, ticking "clear" removes it."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from typing import Any

from fastapi import Response
from fastapi.responses import RedirectResponse

from herald.admin.providers import service as provider_accounts
from herald.admin.providers.schemas import ProviderAccount, ProviderAccountIn
from herald.auth.deps import state
from herald.channels import accounts
from herald.console import core
from herald.console.core import Console, ConsoleDep, form_of, render, tenant_transaction
from herald.errors import (
    NotFound,
    ProviderAccountVersionConflict,
    ProviderHostForbidden,
    ProviderHostUnresolvable,
    ProviderSettingsInvalid,
)

router = core.screen_router()

_REFUSALS = (
    ProviderSettingsInvalid,
    ProviderHostForbidden,
    ProviderHostUnresolvable,
    ProviderAccountVersionConflict,
)


@dataclass(frozen=True)
class FieldView:
    name: str  # the API name, also the form input's
    kind: str  # "text" | "number" | "bool" | "secret"


@dataclass(frozen=True)
class ProviderView:
    name: str
    channel: str
    fields: list[FieldView]
    account: ProviderAccount | None


def _kind(spec: accounts.ProviderSpec, field: str) -> str:
    if field in spec.secrets:
        return "secret"
    annotation = spec.schema_.model_fields[field].annotation
    inner = [a for a in typing.get_args(annotation) if a is not types.NoneType] or [annotation]
    if inner[0] is bool:
        return "bool"
    if inner[0] is int:
        return "number"
    return "text"


def _views(held: list[ProviderAccount]) -> list[ProviderView]:
    by_name = {account.provider: account for account in held}
    return [
        ProviderView(
            name=spec.name,
            channel=spec.channel,
            fields=[
                FieldView(accounts.field_alias(spec, field), _kind(spec, field))
                for field in spec.schema_.model_fields
            ],
            account=by_name.get(spec.name),  # type: ignore[call-overload]
        )
        for spec in accounts.SPECS.values()
    ]


def _readers_only(console: Console) -> None:
    if not console.may(provider_accounts.READ):
        raise NotFound()


async def _page(console: Console, status: int = 200, **shown: Any) -> Response:
    settings = state(console.request).settings
    async with tenant_transaction(console) as conn:
        held = await provider_accounts.list_accounts(conn, console.operator, settings)
    return render(
        console,
        "providers.html",
        status=status,
        providers=_views(held.items),
        may_write=console.may(provider_accounts.WRITE),
        error=shown.get("error"),
        error_provider=shown.get("error_provider"),
    )


@router.get("/providers")
async def providers_page(console: ConsoleDep) -> Response:
    _readers_only(console)
    return await _page(console)


def settings_of_form(provider: str, form: dict[str, str]) -> dict[str, Any]:
    """The PUT body's settings from the posted form: an empty plain field is not overridden; an
    empty secret is kept, unless its "clear" box is ticked."""
    spec = accounts.SPECS[provider]
    found: dict[str, Any] = {}
    for field in spec.schema_.model_fields:
        name = accounts.field_alias(spec, field)
        value = form.get(name, "").strip()
        kind = _kind(spec, field)
        if kind == "secret":
            if form.get(f"clear-{name}"):
                found[name] = None
            elif value:
                found[name] = value
        elif kind == "bool":
            if value in ("true", "false"):
                found[name] = value == "true"
        elif value:
            # A number the schema refuses is refused there (422, with the field's name).
            found[name] = int(value) if kind == "number" and value.isdigit() else value
    return found


@router.post("/providers/{provider}")
async def provider_save(console: ConsoleDep, provider: str) -> Response:
    _readers_only(console)
    if provider not in accounts.SPECS:
        raise NotFound()
    form = await form_of(console)
    data = ProviderAccountIn(settings=settings_of_form(provider, form))
    settings = state(console.request).settings
    try:
        async with tenant_transaction(console) as conn:
            await provider_accounts.put_account(conn, console.operator, settings, provider, data)
    except _REFUSALS as exc:
        return await _page(console, status=exc.status, error=exc.message, error_provider=provider)
    return RedirectResponse("/console/providers", status_code=303)


@router.post("/providers/{provider}/clear")
async def provider_clear(console: ConsoleDep, provider: str) -> Response:
    _readers_only(console)
    if provider not in accounts.SPECS:
        raise NotFound()
    await form_of(console)
    async with tenant_transaction(console) as conn:
        await provider_accounts.delete_account(conn, console.operator, provider)
    return RedirectResponse("/console/providers", status_code=303)
