"""Broadcasts: draft, the second person's approval, cancel, live progress."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from fastapi import Response
from fastapi.responses import JSONResponse, RedirectResponse

from herald import vocabulary
from herald.admin import paging
from herald.auth.deps import state
from herald.console import audience_form, core
from herald.console.core import Console, ConsoleDep, blank, form_of, render, tenant_transaction
from herald.errors import HeraldError, NotFound, ValidationFailed
from herald.scheduling.broadcasts import audiences
from herald.scheduling.broadcasts import service as broadcasts
from herald.scheduling.broadcasts.schemas import DraftAudienceReach

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
    return await _draft_form(console, {}, audience_form.Picked(), ticked=())


@router.post("/broadcasts/audience-reach", response_model=DraftAudienceReach)
async def broadcast_audience_reach(console: ConsoleDep) -> Response:
    """console.js's live "This reaches N people": the draft form's audience fields, checked as
    the draft would be (a refusal is the API's JSON envelope), counted, nothing stored."""
    _broadcasts_only(console)
    form = await _posted(console)
    async with tenant_transaction(console) as conn:
        found = await audiences.draft_reach(conn, console.operator, _spec(form))
    return JSONResponse(found.model_dump(mode="json", by_alias=True))


@router.post("/broadcasts")
async def broadcast_create(console: ConsoleDep) -> Response:
    _broadcasts_only(console)
    form = await _posted(console)
    values = {key: items[0] for key, items in form.items() if items}
    if values.get("intent") == "preview":
        # The no-script path of the live count: the same form again, with the count.
        picked = audience_form.picked_from(form)
        ticked = form.get("channels", [])
        return await _draft_form(console, values, picked, ticked=ticked, preview=True)
    raw: dict[str, object] = {
        "title": values.get("title", ""),
        "kind": values.get("kind", ""),
        "audience": _spec(form),
        "variables": _json_field(values, "variables", {}),
        "channels": form.get("channels") or None,
    }
    if blank(values.get("scheduledFor")):
        raw["scheduledFor"] = values["scheduledFor"].strip()
    async with tenant_transaction(console) as conn:
        created = await broadcasts.create_broadcast(
            conn, console.operator, state(console.request).registry, raw
        )
    return RedirectResponse(f"/console/broadcasts/{created.id}", status_code=303)


async def _posted(console: Console) -> dict[str, list[str]]:
    """The posted form (CSRF checked), name → every value given for it."""
    await form_of(console)
    form = await console.request.form()
    fields: dict[str, list[str]] = {}
    for key, value in form.multi_items():
        if isinstance(value, str):
            fields.setdefault(key, []).append(value)
    return fields


def _spec(form: dict[str, list[str]]) -> object:
    return audience_form.spec_of(audience_form.picked_from(form))


async def _draft_form(
    console: Console,
    values: Mapping[str, str],
    picked: audience_form.Picked,
    *,
    ticked: Sequence[str],
    preview: bool = False,
) -> Response:
    """The draft form, filled with `values`; with `preview`, the audience's reach (or why it is
    refused) under the picker."""
    reached: DraftAudienceReach | None = None
    refusal: HeraldError | None = None
    async with tenant_transaction(console) as conn:
        choices = await audiences.choices(conn, console.operator)
        if preview:
            try:
                spec = audience_form.spec_of(picked)
                reached = await audiences.draft_reach(conn, console.operator, spec)
            except ValidationFailed as exc:
                refusal = exc
    kinds = sorted(kind.name for kind in state(console.request).registry)
    return render(
        console,
        "broadcast_new.html",
        status=refusal.status if refusal else 200,
        kinds=kinds,
        channels=vocabulary.CHANNELS,
        values=values,
        ticked=frozenset(ticked),
        picked=picked,
        audience_kinds=audience_form.KINDS,
        choices=choices,
        reached=reached,
        refusal=refusal,
    )


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
