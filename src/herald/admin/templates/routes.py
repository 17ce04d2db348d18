"""Routes of the template-override admin (`/v1/admin/templates`), for operators.

Thin: authenticate the operator, parse the query string, open the request's transaction and call
one service function, which checks the permission (R-SEC-16) and writes the audit record. Static
paths (`/kinds`, `/preview`) are declared before `/{template_id}`.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from herald import vocabulary
from herald.admin import paging
from herald.admin.templates import service
from herald.admin.templates.schemas import (
    KindPage,
    PreviewOut,
    PreviewRequest,
    TemplateCreate,
    TemplateOut,
    TemplatePage,
    TemplateTransition,
    TemplateUpdate,
    TemplateVersionPage,
)
from herald.auth.deps import Cursor, Limit, OperatorDep, Pagination, state, transaction

router = APIRouter(prefix="/v1/admin/templates", tags=["admin: templates"])


@router.get("", response_model=TemplatePage)
async def list_templates(
    request: Request,
    operator: OperatorDep,
    kind: Annotated[str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00]+$")] = None,
    channel: vocabulary.Channel | None = None,
    locale: Annotated[
        str | None, Query(min_length=1, max_length=200, pattern=r"^[^\x00]+$")
    ] = None,
    status_: Annotated[vocabulary.TemplateStatus | None, Query(alias="status")] = None,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> TemplatePage:
    page = paging.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    where = service.parse_filter(kind=kind, channel=channel, locale=locale, status=status_)
    async with transaction(request) as conn:
        return await service.list_templates(conn, operator, where, page)


@router.get("/kinds", response_model=KindPage)
async def list_kinds(
    request: Request,
    operator: OperatorDep,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> KindPage:
    page = paging.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    async with transaction(request) as conn:
        return await service.list_kinds(conn, operator, state(request).registry, page)


@router.post("", response_model=TemplateOut, status_code=status.HTTP_201_CREATED)
async def create_template(
    request: Request, operator: OperatorDep, data: TemplateCreate
) -> TemplateOut:
    async with transaction(request) as conn:
        return await service.create_template(conn, operator, state(request).registry, data)


@router.post("/preview", response_model=PreviewOut)
async def preview(request: Request, operator: OperatorDep, data: PreviewRequest) -> PreviewOut:
    async with transaction(request) as conn:
        return await service.preview(conn, operator, state(request).registry, data)


@router.get("/{template_id}", response_model=TemplateOut)
async def get_template(request: Request, operator: OperatorDep, template_id: str) -> TemplateOut:
    async with transaction(request) as conn:
        return await service.get_template(conn, operator, template_id)


@router.put("/{template_id}", response_model=TemplateOut)
async def update_template(
    request: Request, operator: OperatorDep, template_id: str, data: TemplateUpdate
) -> TemplateOut:
    async with transaction(request) as conn:
        return await service.update_template(
            conn, operator, state(request).registry, template_id, data
        )


@router.post("/{template_id}/publish", response_model=TemplateOut)
async def publish_template(
    request: Request, operator: OperatorDep, template_id: str, data: TemplateTransition
) -> TemplateOut:
    async with transaction(request) as conn:
        return await service.publish_template(
            conn, operator, state(request).registry, template_id, data
        )


@router.post("/{template_id}/archive", response_model=TemplateOut)
async def archive_template(
    request: Request, operator: OperatorDep, template_id: str, data: TemplateTransition
) -> TemplateOut:
    async with transaction(request) as conn:
        return await service.archive_template(conn, operator, template_id, data)


@router.delete("/{template_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_template(
    request: Request,
    operator: OperatorDep,
    template_id: str,
    version: Annotated[int | None, Query(ge=1, le=2**31 - 1)] = None,
) -> Response:
    expected = paging.parse_version(version)
    async with transaction(request) as conn:
        await service.delete_template(conn, operator, template_id, expected)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{template_id}/versions", response_model=TemplateVersionPage)
async def list_versions(
    request: Request,
    operator: OperatorDep,
    template_id: str,
    limit: Limit = None,
    cursor: Cursor = None,
    pagination: Pagination = None,
) -> TemplateVersionPage:
    page = paging.parse_page(limit=limit, cursor=cursor, pagination=pagination)
    async with transaction(request) as conn:
        return await service.list_versions(conn, operator, template_id, page)
