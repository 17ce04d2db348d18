"""An end user's push devices, by JWT, with no permission grant.

Authentication is the only gate; the owner of every row is the token's subject, and the service's
(tenant, person) predicate is the only access control (R-DEVICE-11).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from herald.auth.deps import ActorDep, state, transaction
from herald.devices import service
from herald.devices.schemas import Device, DeviceList, DeviceRegistration

router = APIRouter(prefix="/v1/me/devices", tags=["devices"])


@router.get("", response_model=DeviceList)
async def list_devices(request: Request, actor: ActorDep) -> DeviceList:
    async with transaction(request) as conn:
        return await service.list_devices(conn, actor)


@router.post(
    "",
    response_model=Device,
    status_code=status.HTTP_201_CREATED,
    responses={status.HTTP_200_OK: {"model": Device, "description": "A touch of the caller's own"}},
)
async def register_device(
    request: Request, response: Response, actor: ActorDep, body: DeviceRegistration
) -> Device:
    limit = state(request).settings.device_limit
    async with transaction(request) as conn:
        registration = await service.register_device(conn, actor, body, limit=limit)
    if not registration.created:
        response.status_code = status.HTTP_200_OK
    return registration.device


@router.delete("/{device_id}", status_code=status.HTTP_204_NO_CONTENT)
async def remove_device(request: Request, actor: ActorDep, device_id: str) -> Response:
    async with transaction(request) as conn:
        await service.remove_device(conn, actor, device_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
