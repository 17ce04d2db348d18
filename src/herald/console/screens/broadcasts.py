"""Broadcasts: draft, the second person's approval, cancel, live progress."""

from __future__ import annotations

import json
from collections.abc import Mapping

from fastapi import Response
from fastapi.responses import RedirectResponse

from herald import vocabulary
from herald.admin import paging
from herald.auth.deps import state
from herald.console import core
from herald.console.core import Console, ConsoleDep, blank, form_of, render, tenant_transaction
from herald.errors import NotFound, ValidationFailed
from herald.scheduling.broadcasts import service as broadcasts

router = core.screen_router()


def _broadcasts_only(console: Console) -> None:
    if not console.may_broadcasts:
        raise NotFound()


def _json_field(form: Mapping[str, str], name: str, default: object) -> object:
    raw = (form.get(name) or "").strip()
    if not raw:
        return default
    try:
        return json.loads(raw)
    except ValueError:
        raise ValidationFailed(f"{name} must be JSON") from None


@router.get("/broadcasts")
async def broadcasts_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    _broadcasts_only(console)
    page = paging.parse_page(limit=20, cursor=blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        listed = await broadcasts.list_broadcasts(conn, console.operator, page)
    return render(console, "broadcasts.html", page=listed)


@router.get("/broadcasts/new")
async def broadcast_new(console: ConsoleDep) -> Response:
    _broadcasts_only(console)
    if not console.may(broadcasts.CREATE):
        raise NotFound()
    kinds = sorted(kind.name for kind in state(console.request).registry)
    return render(console, "broadcast_new.html", kinds=kinds, channels=vocabulary.CHANNELS)


@router.post("/broadcasts")
async def broadcast_create(console: ConsoleDep) -> Response:
    _broadcasts_only(console)
    form = await console.request.form()
    values = await form_of(console)
    raw: dict[str, object] = {
        "title": values.get("title", ""),
        "kind": values.get("kind", ""),
        "audience": _json_field(values, "audience", {}),
        "variables": _json_field(values, "variables", {}),
        "channels": [c for c in form.getlist("channels") if isinstance(c, str)] or None,
    }
    if blank(values.get("scheduledFor")):
        raw["scheduledFor"] = values["scheduledFor"].strip()
    async with tenant_transaction(console) as conn:
        created = await broadcasts.create_broadcast(
            conn, console.operator, state(console.request).registry, raw
        )
    return RedirectResponse(f"/console/broadcasts/{created.id}", status_code=303)


@router.get("/broadcasts/{broadcast_id}")
async def broadcast_page(console: ConsoleDep, broadcast_id: str) -> Response:
    _broadcasts_only(console)
    async with tenant_transaction(console) as conn:
        found = await broadcasts.get_broadcast(conn, console.operator, broadcast_id)
    return render(
        console,
        "broadcast.html",
        broadcast=found,
        mine=found.created_by == f"person:{console.operator.actor_id}",
    )


@router.get("/broadcasts/{broadcast_id}/progress")
async def broadcast_progress(console: ConsoleDep, broadcast_id: str) -> Response:
    """The live counts (polls itself while the broadcast is still on its way)."""
    _broadcasts_only(console)
    async with tenant_transaction(console) as conn:
        found = await broadcasts.get_broadcast(conn, console.operator, broadcast_id)
    return render(console, "_broadcast_progress.html", broadcast=found)


@router.post("/broadcasts/{broadcast_id}/approve")
async def broadcast_approve(console: ConsoleDep, broadcast_id: str) -> Response:
    _broadcasts_only(console)
    form = await form_of(console)
    version = paging.parse_version(form.get("version"))
    async with tenant_transaction(console) as conn:
        await broadcasts.approve_broadcast(
            conn,
            console.operator,
            state(console.request).registry,
            broadcast_id,
            {"version": version},
        )
    return RedirectResponse(f"/console/broadcasts/{broadcast_id}", status_code=303)


@router.post("/broadcasts/{broadcast_id}/cancel")
async def broadcast_cancel(console: ConsoleDep, broadcast_id: str) -> Response:
    _broadcasts_only(console)
    await form_of(console)
    async with tenant_transaction(console) as conn:
        await broadcasts.cancel_broadcast(conn, console.operator, broadcast_id)
    return RedirectResponse(f"/console/broadcasts/{broadcast_id}", status_code=303)
