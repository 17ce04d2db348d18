"""Routes of /v1/admin/webhooks, for operators: thin, one service call each; the service checks
the permission (404 without it, an empty list for the list) and writes the audit record."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from herald.auth.deps import OperatorDep, state, transaction
from herald.webhooks import service
from herald.webhooks.schemas import (
    WebhookEndpoint,
    WebhookEndpointCreated,
    WebhookEndpointIn,
    WebhookEndpointList,
    WebhookEndpointPatch,
    WebhookSecret,
    WebhookTestQueued,
)

router = APIRouter(prefix="/v1/admin/webhooks", tags=["admin: webhooks"])


@router.post("", response_model=WebhookEndpointCreated, status_code=status.HTTP_201_CREATED)
async def create_webhook(
    request: Request, operator: OperatorDep, data: WebhookEndpointIn
) -> WebhookEndpointCreated:
    async with transaction(request) as conn:
        return await service.create_endpoint(conn, operator, state(request).settings, data)


@router.get("", response_model=WebhookEndpointList)
async def list_webhooks(request: Request, operator: OperatorDep) -> WebhookEndpointList:
    async with transaction(request) as conn:
        return await service.list_endpoints(conn, operator)


@router.get("/{endpoint_id}", response_model=WebhookEndpoint)
async def get_webhook(request: Request, operator: OperatorDep, endpoint_id: str) -> WebhookEndpoint:
    async with transaction(request) as conn:
        return await service.get_endpoint(conn, operator, endpoint_id)


@router.patch("/{endpoint_id}", response_model=WebhookEndpoint)
async def update_webhook(
    request: Request, operator: OperatorDep, endpoint_id: str, data: WebhookEndpointPatch
) -> WebhookEndpoint:
    async with transaction(request) as conn:
        return await service.update_endpoint(
            conn, operator, state(request).settings, endpoint_id, data
        )


@router.delete("/{endpoint_id}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_webhook(request: Request, operator: OperatorDep, endpoint_id: str) -> Response:
    async with transaction(request) as conn:
        await service.delete_endpoint(conn, operator, endpoint_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{endpoint_id}/rotate-secret", response_model=WebhookSecret)
async def rotate_webhook_secret(
    request: Request, operator: OperatorDep, endpoint_id: str
) -> WebhookSecret:
    async with transaction(request) as conn:
        return await service.rotate_secret(conn, operator, state(request).settings, endpoint_id)


@router.post(
    "/{endpoint_id}/test", response_model=WebhookTestQueued, status_code=status.HTTP_202_ACCEPTED
)
async def test_webhook(
    request: Request, operator: OperatorDep, endpoint_id: str
) -> WebhookTestQueued:
    async with transaction(request) as conn:
        return await service.send_test(conn, operator, endpoint_id)
