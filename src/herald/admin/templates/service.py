"""Operator overrides of the registry's wording (R-ADMIN-1, R-RENDER-1, R-RENDER-40..44).

An override replaces one (kind, channel, locale) of a registry kind's wording. It starts as a
draft (R-RENDER-43) and reaches recipients only once published; archiving takes it out of use
again, and deleting removes it (its version history stays). The registry's code wording is never
copied into the table (R-SCHEMA-40, R-RENDER-7): it is the fallback that cannot be deleted, and
the send path falls through to it whenever a published override fails to render (R-RENDER-27).

Checks at save, publish and preview (each a 400 with its own code) live in
herald.admin.templates.wording: declared flat placeholders only, a title exactly where the
channel shows one, Telegram's markup rules, and every secret placeholder the registry's wording
carries, so an operator's edit can never send an OTP message without its code.

Every change is one compare-and-set on the version the client read (R-ADMIN-5, R-SEC-17),
appends an immutable version row (R-RENDER-40) and writes an audit record in the same
transaction (R-ADMIN-6..8, R-SEC-18).

Permissions (R-SEC-3, R-SEC-16): NotificationTemplate_READ to list, read and preview, _CREATE,
_UPDATE (update, publish, archive) and _DELETE. An id-addressed route or mutation answers 404 to a
caller without the permission (R-SEC-7); a list answers an empty page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.admin import editing, paging
from herald.admin.templates import queries, wording
from herald.admin.templates.schemas import (
    ChannelEntry,
    KindEntry,
    KindPage,
    LocaleEntry,
    OverrideRef,
    PreviewOut,
    PreviewRequest,
    RegistryWording,
    TemplateCreate,
    TemplateOut,
    TemplatePage,
    TemplateTransition,
    TemplateUpdate,
    TemplateVersionOut,
    TemplateVersionPage,
    VariableEntry,
    WhatsAppTemplateEntry,
)
from herald.audit.service import actor_label, field_changes, record_audit
from herald.auth.service import Operator, require_permission
from herald.errors import (
    TemplateOverrideExists,
    TemplateOverrideNotFound,
    TemplateStatusConflict,
    TemplateVersionConflict,
    ValidationFailed,
)
from herald.kinds import Kind, Registry, Template
from herald.kinds.registry import RECIPIENT_VARIABLES
from herald.rendering.render import Override, OverrideKey, render

READ = "NotificationTemplate_READ"
CREATE = "NotificationTemplate_CREATE"
UPDATE = "NotificationTemplate_UPDATE"
DELETE = "NotificationTemplate_DELETE"

# R-ADMIN-8: the audit entry's resource type (its module, NotificationTemplate, follows from it).
ENTITY = "notification_template"
AUDITED_FIELDS = ("title", "body", "status", "version")
SNAPSHOT_FIELDS = ("kind", "channel", "locale", "status", "title", "body", "version")


# ---------------------------------------------------------------------------------------------
# The list filter (before any transaction opens; every refusal is a 400 with a code)


@dataclass(frozen=True)
class TemplateFilter:
    kind: str | None = None
    channel: str | None = None
    locale: str | None = None
    status: str | None = None


def parse_filter(
    *, kind: str | None, channel: str | None, locale: str | None, status: str | None
) -> TemplateFilter:
    for name, value in (("kind", kind), ("locale", locale)):
        if value is not None and (not value or len(value) > 200 or "\x00" in value):
            raise ValidationFailed(f"{name} must be 1 to 200 characters")
    if channel is not None and channel not in vocabulary.CHANNELS:
        raise ValidationFailed(f"channel must be one of {', '.join(vocabulary.CHANNELS)}")
    if status is not None and status not in vocabulary.TEMPLATE_STATUSES:
        raise ValidationFailed(f"status must be one of {', '.join(vocabulary.TEMPLATE_STATUSES)}")
    return TemplateFilter(kind=kind, channel=channel, locale=locale, status=status)


# ---------------------------------------------------------------------------------------------
# Lists


async def list_kinds(
    conn: AsyncConnection, operator: Operator, registry: Registry, page: paging.Page
) -> KindPage:
    """The registry's kinds with their variables (and samples), channels, shipped wording and
    which (channel, locale) this tenant has overridden; kinds in name order."""
    if not operator.may(READ):
        return KindPage(items=[], next_cursor=None)
    after = paging.decode_cursor(page.cursor, "k", (str,))[0] if page.cursor is not None else None
    kinds = sorted((k for k in registry if after is None or k.name > after), key=lambda k: k.name)
    chosen, more = kinds[: page.limit], len(kinds) > page.limit
    rows = await queries.overrides_of_kinds(conn, operator.tenant_id, [k.name for k in chosen])
    by_key = {(r["kind"], r["channel"], r["locale"]): r for r in rows}
    return KindPage(
        items=[_kind_entry(kind, by_key) for kind in chosen],
        next_cursor=paging.encode_cursor("k", chosen[-1].name) if more else None,
    )


def _kind_entry(kind: Kind, overrides: Mapping[tuple[str, str, str], RowMapping]) -> KindEntry:
    channels = []
    for channel in kind.channels:
        shipped = kind.templates.get(channel, {})
        overridden = {loc for (k, c, loc) in overrides if k == kind.name and c == channel}
        locales = []
        for locale in sorted(set(shipped) | overridden):
            builder = shipped.get(locale)
            row = overrides.get((kind.name, channel, locale))
            locales.append(
                LocaleEntry(
                    locale=locale,
                    registry=(
                        RegistryWording(title=builder.title, body=builder.body)
                        if isinstance(builder, Template)
                        else None
                    ),
                    override=(
                        OverrideRef(
                            id=row["public_id"], status=row["status"], version=row["version"]
                        )
                        if row is not None
                        else None
                    ),
                )
            )
        mapping = kind.whatsapp if channel == "whatsapp" else None
        channels.append(
            ChannelEntry(
                channel=channel,
                title_required=channel in wording.TITLED_CHANNELS,
                locales=locales,
                whatsapp_template=(
                    WhatsAppTemplateEntry(
                        name=mapping.name,
                        language=mapping.language,
                        languages=dict(mapping.languages),
                        parameters=list(mapping.parameters),
                    )
                    if mapping is not None
                    else None
                ),
            )
        )
    variables = [VariableEntry(name=n, source="event", sample=s) for n, s in kind.variables.items()]
    variables += [
        VariableEntry(name=n, source="secret", sample=wording.SECRET_SAMPLE)
        for n in kind.secret_variables
    ]
    variables += [
        VariableEntry(name=n, source="recipient", sample=wording.RECIPIENT_SAMPLES.get(n, n))
        for n in sorted(RECIPIENT_VARIABLES)
    ]
    return KindEntry(
        kind=kind.name,
        category=kind.category,
        default_locale=kind.default_locale,
        variables=variables,
        channels=channels,
    )


async def list_templates(
    conn: AsyncConnection, operator: Operator, where: TemplateFilter, page: paging.Page
) -> TemplatePage:
    """This tenant's overrides, one item per row, in (kind, channel, locale, id) order."""
    if not operator.may(READ):
        return TemplatePage(items=[], next_cursor=None)
    after = None
    if page.cursor is not None:
        kind, channel, locale, row_id = paging.decode_cursor(page.cursor, "t", (str, str, str, int))
        after = (kind, channel, locale, row_id)
    rows = await queries.list_page(
        conn,
        operator.tenant_id,
        kind=where.kind,
        channel=where.channel,
        locale=where.locale,
        status=where.status,
        after=after,
        limit=page.limit + 1,
    )
    chosen, more = rows[: page.limit], len(rows) > page.limit
    next_cursor = None
    if more:
        last = chosen[-1]
        next_cursor = paging.encode_cursor(
            "t", last["kind"], last["channel"], last["locale"], last["id"]
        )
    return TemplatePage(items=[_out(row) for row in chosen], next_cursor=next_cursor)


async def list_versions(
    conn: AsyncConnection, operator: Operator, template_id: str, page: paging.Page
) -> TemplateVersionPage:
    """An override's version rows, newest first."""
    _require(operator, READ)
    row = await _find(conn, operator, template_id)
    after = None
    if page.cursor is not None:
        version, row_id = paging.decode_cursor(page.cursor, "v", (int, int))
        after = (version, row_id)
    rows = await queries.versions_page(
        conn, operator.tenant_id, row["id"], after=after, limit=page.limit + 1
    )
    chosen, more = rows[: page.limit], len(rows) > page.limit
    return TemplateVersionPage(
        items=[
            TemplateVersionOut(
                version=r["version"],
                status=r["status"],
                title=r["title"],
                body=r["body"],
                created_by=r["created_by"],
                created_at=r["created_at"],
            )
            for r in chosen
        ],
        next_cursor=paging.encode_cursor("v", chosen[-1]["version"], chosen[-1]["id"])
        if more
        else None,
    )


# ---------------------------------------------------------------------------------------------
# One override


async def get_template(conn: AsyncConnection, operator: Operator, template_id: str) -> TemplateOut:
    _require(operator, READ)
    return _out(await _find(conn, operator, template_id))


async def create_template(
    conn: AsyncConnection, operator: Operator, registry: Registry, data: TemplateCreate
) -> TemplateOut:
    """A new draft (R-RENDER-43) at version 1, its first version row, and an audit entry."""
    require_permission(operator, CREATE)
    kind = wording.kind_for(registry, data.kind, data.channel)
    title, body = wording.validate_wording(kind, data.channel, data.locale, data.title, data.body)
    row = await queries.insert_override(
        conn,
        operator.tenant_id,
        kind=kind.name,
        channel=data.channel,
        locale=data.locale,
        title=title,
        body=body,
        actor=actor_label(operator),
    )
    if row is None:
        raise TemplateOverrideExists(
            f"{kind.name} already has a {data.channel}/{data.locale} override; update it instead"
        )
    await queries.append_version(conn, row, tenant_id=operator.tenant_id)
    await record_audit(
        conn, operator, "create", ENTITY, str(row["public_id"]), _snapshot(row)
    )  # R-ADMIN-7
    return _out(row)


async def update_template(
    conn: AsyncConnection,
    operator: Operator,
    registry: Registry,
    template_id: str,
    data: TemplateUpdate,
) -> TemplateOut:
    """Replace the wording; the status stays as it was (a published override is live at once)."""
    _require(operator, UPDATE)
    before = await _find(conn, operator, template_id)
    _check_version(before, data.version)
    kind = wording.kind_for(registry, before["kind"], before["channel"])
    title, body = wording.validate_wording(
        kind, before["channel"], before["locale"], data.title, data.body
    )
    after = await _compare_and_set(
        conn, operator, before, data.version, {"title": title, "body": body}
    )
    # R-ADMIN-6: every changed field with its before and after value.
    await record_audit(
        conn,
        operator,
        "update",
        ENTITY,
        str(after["public_id"]),
        field_changes(before, after, AUDITED_FIELDS),
    )
    return _out(after)


async def publish_template(
    conn: AsyncConnection,
    operator: Operator,
    registry: Registry,
    template_id: str,
    data: TemplateTransition,
) -> TemplateOut:
    """Put a draft or archived override in use. Its wording is checked again against today's
    registry: the kind or its variables may have changed since the draft was saved, and a row
    may have been written by something other than this API."""
    _require(operator, UPDATE)
    before = await _find(conn, operator, template_id)
    _check_version(before, data.version)
    if before["status"] == "published":
        raise TemplateStatusConflict("the override is already published")
    kind = wording.kind_for(registry, before["kind"], before["channel"])
    wording.validate_wording(
        kind, before["channel"], before["locale"], before["title"], before["body"]
    )
    after = await _compare_and_set(conn, operator, before, data.version, {"status": "published"})
    await record_audit(
        conn,
        operator,
        "publish",
        ENTITY,
        str(after["public_id"]),
        field_changes(before, after, AUDITED_FIELDS),
    )
    return _out(after)


async def archive_template(
    conn: AsyncConnection, operator: Operator, template_id: str, data: TemplateTransition
) -> TemplateOut:
    """Take an override out of use (recipients get the registry wording) but keep it. Works for
    an override whose kind has left the registry, so such rows can always be retired."""
    _require(operator, UPDATE)
    before = await _find(conn, operator, template_id)
    _check_version(before, data.version)
    if before["status"] == "archived":
        raise TemplateStatusConflict("the override is already archived")
    after = await _compare_and_set(conn, operator, before, data.version, {"status": "archived"})
    await record_audit(
        conn,
        operator,
        "archive",
        ENTITY,
        str(after["public_id"]),
        field_changes(before, after, AUDITED_FIELDS),
    )
    return _out(after)


async def delete_template(
    conn: AsyncConnection, operator: Operator, template_id: str, version: int | None
) -> None:
    """Remove the override for good (archive keeps it); its version rows stay as history and the
    audit entry records what was removed (R-ADMIN-7). With `version`, only if still current."""
    _require(operator, DELETE)
    before = await _find(conn, operator, template_id)
    if version is not None:
        _check_version(before, version)
    # Compare on the version just read, so the audit entry describes exactly the row removed.
    removed = await queries.delete_override(
        conn, operator.tenant_id, before["id"], expected_version=before["version"]
    )
    if removed is None:
        raise TemplateVersionConflict()
    await record_audit(
        conn, operator, "delete", ENTITY, str(removed["public_id"]), _snapshot(removed)
    )


async def preview(
    conn: AsyncConnection, operator: Operator, registry: Registry, data: PreviewRequest
) -> PreviewOut:
    """Render with sample data and send nothing (R-RENDER-41, R-RENDER-42): no event, no
    recipient, no delivery, no write of any kind.

    With a `body`, the wording given (checked exactly as a save would check it); without, what
    a recipient in that locale would get today: the published override, else the registry's.
    """
    require_permission(operator, READ)
    kind = wording.kind_for(registry, data.kind, data.channel)
    samples = wording.sample_values(kind)
    overrides: dict[OverrideKey, Override]
    if data.body is not None:
        title, body = wording.validate_wording(
            kind, data.channel, data.locale, data.title, data.body
        )
        # Version 0 marks the draft; stored versions start at 1.
        overrides = {(kind.name, data.channel, data.locale): Override(title, body, 0)}
    else:
        rows = await queries.published_overrides(conn, operator.tenant_id, kind.name)
        overrides = {
            (kind.name, r["channel"], r["locale"]): Override(r["title"], r["body"], r["version"])
            for r in rows
        }
    rendered = render(kind, data.channel, data.locale, samples, overrides)
    if rendered is None:
        # The registry's own wording could not be built (a code defect, logged by render).
        raise ValidationFailed(f"{kind.name} has no {data.channel} wording that renders")
    if rendered.template_version == 0:
        source, version = "draft", None
    elif rendered.template_version is not None:
        source, version = "override", rendered.template_version
    else:
        source, version = "registry", None
    return PreviewOut(
        kind=kind.name,
        channel=data.channel,
        locale=data.locale,
        source=source,
        title=rendered.title,
        body=rendered.body,
        body_html=rendered.body_html,
        template_version=version,
        variables=samples,
    )


# ---------------------------------------------------------------------------------------------
# Helpers


def _require(operator: Operator, permission: str) -> None:
    editing.require(operator, permission, TemplateOverrideNotFound)


async def _find(conn: AsyncConnection, operator: Operator, template_id: str) -> RowMapping:
    return await editing.find(conn, operator, template_id, queries.find, TemplateOverrideNotFound)


def _check_version(row: RowMapping, read: int) -> None:
    editing.check_version(row, read, TemplateVersionConflict, "override")


async def _compare_and_set(
    conn: AsyncConnection,
    operator: Operator,
    before: RowMapping,
    read: int,
    changes: dict[str, Any],
) -> RowMapping:
    """One UPDATE … WHERE version = :read (R-ADMIN-5), then the new version row (R-RENDER-40)."""
    after = await queries.compare_and_set(
        conn,
        operator.tenant_id,
        before["id"],
        expected_version=read,
        changes=changes,
        actor=actor_label(operator),
    )
    if after is None:
        # Another writer moved the version between our read and this write.
        raise TemplateVersionConflict()
    await queries.append_version(conn, after, tenant_id=operator.tenant_id)
    return after


def _snapshot(row: RowMapping) -> dict[str, Any]:
    return {name: row[name] for name in SNAPSHOT_FIELDS}


def _out(row: RowMapping) -> TemplateOut:
    return TemplateOut(
        id=row["public_id"],
        kind=row["kind"],
        channel=row["channel"],
        locale=row["locale"],
        status=row["status"],
        title=row["title"],
        body=row["body"],
        version=row["version"],
        created_by=row["created_by"],
        updated_by=row["updated_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
