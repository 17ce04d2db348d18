"""Routes of the provider-account admin (`/v1/admin/providers`), for operators.

Thin: authenticate the operator, open the request's transaction and call one service function,
which checks the permission and writes the audit record."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from herald.admin.providers import service
from herald.admin.providers.schemas import ProviderAccount, ProviderAccountIn, ProviderAccountList
from herald.auth.deps import OperatorDep, state, transaction
from herald.vocabulary import AccountProvider

router = APIRouter(prefix="/v1/admin/providers", tags=["admin: provider accounts"])


@router.get("", response_model=ProviderAccountList)
async def list_accounts(request: Request, operator: OperatorDep) -> ProviderAccountList:
    async with transaction(request) as conn:
        return await service.list_accounts(conn, operator, state(request).settings)


@router.get("/{provider}", response_model=ProviderAccount)
async def get_account(
    request: Request, operator: OperatorDep, provider: AccountProvider
) -> ProviderAccount:
    async with transaction(request) as conn:
        return await service.get_account(conn, operator, state(request).settings, provider)


@router.put("/{provider}", response_model=ProviderAccount)
async def put_account(
    request: Request, operator: OperatorDep, provider: AccountProvider, data: ProviderAccountIn
) -> ProviderAccount:
    async with transaction(request) as conn:
        return await service.put_account(conn, operator, state(request).settings, provider, data)


@router.delete("/{provider}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_account(
    request: Request, operator: OperatorDep, provider: AccountProvider
) -> Response:
    async with transaction(request) as conn:
        await service.delete_account(conn, operator, provider)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
