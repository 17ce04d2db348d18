"""Template overrides: the list of kinds, the editor beside the registry's wording with a live
preview, and save, publish and archive."""

from __future__ import annotations

from fastapi import Response
from fastapi.responses import RedirectResponse

from herald.admin import paging
from herald.admin.templates import service as templates
from herald.admin.templates.schemas import (
    PreviewRequest,
    TemplateCreate,
    TemplateTransition,
    TemplateUpdate,
)
from herald.auth.deps import state
from herald.console import audit_trail, core
from herald.console.core import Console, ConsoleDep, blank, form_of, render, tenant_transaction
from herald.errors import NotFound, ValidationFailed
from herald.kinds import Template

router = core.screen_router()


def _templates_only(console: Console) -> None:
    if not console.may_templates:
        raise NotFound()


@router.get("/templates")
async def templates_page(console: ConsoleDep, cursor: str | None = None) -> Response:
    _templates_only(console)
    page = paging.parse_page(limit=20, cursor=blank(cursor), pagination=None)
    async with tenant_transaction(console) as conn:
        kinds = await templates.list_kinds(
            conn, console.operator, state(console.request).registry, page
        )
    return render(console, "templates.html", kinds=kinds)


def _registry_wording(
    console: Console, kind_name: str, channel: str, locale: str
) -> tuple[str | None, str | None]:
    kind = state(console.request).registry.get(kind_name)
    if kind is None or channel not in kind.channels:
        raise NotFound()
    builder = kind.templates.get(channel, {}).get(locale) or kind.templates.get(channel, {}).get(
        kind.default_locale
    )
    if isinstance(builder, Template):
        return builder.title, builder.body
    return None, None


@router.get("/templates/new")
async def template_new(console: ConsoleDep, kind: str, channel: str, locale: str) -> Response:
    _templates_only(console)
    title, body = _registry_wording(console, kind, channel, locale)
    return render(
        console,
        "template_edit.html",
        template=None,
        kind=kind,
        channel=channel,
        locale=locale,
        title=title or "",
        body=body or "",
        registry_title=title,
        registry_body=body,
        trail=[],
        error=None,
    )


@router.post("/templates")
async def template_create(console: ConsoleDep) -> Response:
    _templates_only(console)
    form = await form_of(console)
    data = TemplateCreate(
        kind=form.get("kind", ""),
        channel=form.get("channel", ""),
        locale=form.get("locale", ""),
        title=blank(form.get("title")),
        body=form.get("body", ""),
    )
    async with tenant_transaction(console) as conn:
        created = await templates.create_template(
            conn, console.operator, state(console.request).registry, data
        )
    return RedirectResponse(f"/console/templates/{created.id}", status_code=303)


@router.get("/templates/{template_id}")
async def template_page(console: ConsoleDep, template_id: str) -> Response:
    _templates_only(console)
    async with tenant_transaction(console) as conn:
        found = await templates.get_template(conn, console.operator, template_id)
        trail = await audit_trail.template_trail(conn, console.operator, str(found.id))
    registry_title, registry_body = _registry_wording(
        console, found.kind, found.channel, found.locale
    )
    return render(
        console,
        "template_edit.html",
        template=found,
        kind=found.kind,
        channel=found.channel,
        locale=found.locale,
        title=found.title or "",
        body=found.body,
        registry_title=registry_title,
        registry_body=registry_body,
        trail=trail,
        error=None,
    )


@router.post("/templates/preview")
async def template_preview(console: ConsoleDep) -> Response:
    """The live preview beside the editor (htmx, on input): renders with sample values, writes
    nothing."""
    _templates_only(console)
    form = await form_of(console)
    data = PreviewRequest(
        kind=form.get("kind", ""),
        channel=form.get("channel", ""),
        locale=form.get("locale", ""),
        title=blank(form.get("title")),
        body=form.get("body") or None,
    )
    try:
        async with tenant_transaction(console) as conn:
            shown = await templates.preview(
                conn, console.operator, state(console.request).registry, data
            )
    except ValidationFailed as exc:
        return render(console, "_preview.html", preview=None, error=exc.message)
    return render(console, "_preview.html", preview=shown, error=None)


@router.post("/templates/{template_id}")
async def template_update(console: ConsoleDep, template_id: str) -> Response:
    _templates_only(console)
    form = await form_of(console)
    action = form.get("action", "save")
    version = paging.parse_version(form.get("version"))
    if version is None:
        raise ValidationFailed("version is required")
    registry = state(console.request).registry
    async with tenant_transaction(console) as conn:
        if action == "publish":
            await templates.publish_template(
                conn, console.operator, registry, template_id, TemplateTransition(version=version)
            )
        elif action == "archive":
            await templates.archive_template(
                conn, console.operator, template_id, TemplateTransition(version=version)
            )
        else:
            await templates.update_template(
                conn,
                console.operator,
                registry,
                template_id,
                TemplateUpdate(
                    version=version, title=blank(form.get("title")), body=form.get("body", "")
                ),
            )
    return RedirectResponse(f"/console/templates/{template_id}", status_code=303)
