"""An end user's push devices, by JWT, with no permission grant.

Authentication is the only gate; the owner of every row is the token's subject, and the service's
(tenant, person) predicate is the only access control (R-DEVICE-11).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from herald.auth.deps import ActorDep, state, transaction
from herald.channels import webpush
from herald.devices import service
from herald.devices.schemas import Device, DeviceList, DeviceRegistration, VapidPublicKey
from herald.errors import WebPushNotConfigured

router = APIRouter(prefix="/v1/me/devices", tags=["devices"])
webpush_router = APIRouter(prefix="/v1/webpush", tags=["devices"])

# key file → the public key: read (and on a fresh data dir made) once per process.
_public_keys: dict[str, str] = {}


@webpush_router.get("/vapid-public-key", response_model=VapidPublicKey)
async def vapid_public_key(request: Request) -> VapidPublicKey:
    """The applicationServerKey a browser passes to PushManager.subscribe(). Public, as the name
    says: no token is needed to read it."""
    settings = state(request).settings
    if not settings.webpush_vapid_subject:
        raise WebPushNotConfigured()
    path = str(webpush.key_file(settings))
    if path not in _public_keys:
        _public_keys[path] = webpush.public_key(webpush.load_or_create_vapid(settings))
    return VapidPublicKey(public_key=_public_keys[path])


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
    settings = state(request).settings
    # Checked before the transaction opens: a DNS lookup never holds a connection.
    target = await service.checked_target(body, settings)
    async with transaction(request) as conn:
        registration = await service.register_device(
            conn, actor, target, limit=settings.device_limit
        )
    if not registration.created:
        response.status_code = status.HTTP_200_OK
    return registration.device


@router.delete("/{device_id}", status_code=status.HTTP_204_NO_CONTENT)
async def remove_device(request: Request, actor: ActorDep, device_id: str) -> Response:
    async with transaction(request) as conn:
        await service.remove_device(conn, actor, device_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
