"""An end user's push devices: register, list, remove — always the verified caller's own.

The owner of every row written here is the token's subject, never a body field (R-DEVICE-2,
R-DEVICE-6, R-DEVICE-11). Rows are never deleted or reassigned: a token that changes hands, or a
device the user removes, is invalidated with its reason and kept as history (R-DEVICE-1,
R-DEVICE-3, R-DEVICE-10) until retention prunes it.

Concurrency. A registration first locks the caller's person row, so one person's registrations
run one at a time and the cap is counted without a race (R-DEVICE-9). Registrations of one token
by different people are ordered by the row lock on the live token and by INSERT … ON CONFLICT on
the partial unique index (R-SCHEMA-37): a loser sees the winner's row on its next look and either
touches it (same person) or replaces it (another person), so there is never a second live row and
never a UniqueViolation.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Actor
from herald.devices import queries
from herald.devices.schemas import Device, DeviceItem, DeviceList, DeviceRegistration
from herald.errors import (
    DeviceLimitReached,
    DeviceNotFound,
    DeviceRegistrationConflict,
    Unauthenticated,
)

# Each retry means another transaction registered this very token and committed in between;
# more than a few in a row is not a race any client could be helped through.
MAX_ATTEMPTS = 5


@dataclass(frozen=True)
class Registration:
    device: Device
    # True for a new row (201), False for a touch of the caller's own (200).
    created: bool


async def register_device(
    conn: AsyncConnection, actor: Actor, body: DeviceRegistration, *, limit: int
) -> Registration:
    """Register `body.token` for the caller: a touch, a fresh row, or a replacement."""
    if not await queries.lock_person(conn, actor.tenant_id, actor.person_id):
        raise Unauthenticated("unknown person")
    for _ in range(MAX_ATTEMPTS):
        held = await queries.find_active_token(conn, actor.tenant_id, body.token)
        if held is not None and held.person_id == actor.person_id:
            # R-DEVICE-7: a touch, never invalidate-and-reinsert, so app launches do not churn.
            public_id, platform = await queries.touch(conn, held.id, body.platform)
            return Registration(Device(id=public_id, platform=platform), created=False)
        # R-DEVICE-9: counted on live rows under the person lock; refused at the cap, and the
        # oldest device is never evicted to make room. Checked before the other holder's row is
        # touched, so a refusal changes nothing.
        if await queries.count_active(conn, actor.tenant_id, actor.person_id) >= limit:
            raise DeviceLimitReached(
                f"at most {limit} active devices per person; remove one before adding another"
            )
        if held is not None:
            # R-DEVICE-1, R-DEVICE-8: the earlier holder's row stays as history, never reassigned.
            await queries.invalidate(conn, held.id, "replaced")
        inserted = await queries.insert_active(
            conn, actor.tenant_id, actor.person_id, body.token, body.platform
        )
        if inserted is not None:
            public_id, platform = inserted
            return Registration(Device(id=public_id, platform=platform), created=True)
        # A concurrent registration of this token committed first: look again.
    raise DeviceRegistrationConflict()


async def list_devices(conn: AsyncConnection, actor: Actor) -> DeviceList:
    rows = await queries.list_active(conn, actor.tenant_id, actor.person_id)
    return DeviceList(
        items=[
            DeviceItem(
                id=row.public_id,
                platform=row.platform,
                created_at=row.created_at,
                last_used_at=row.last_used_at,
            )
            for row in rows
        ]
    )


async def remove_device(conn: AsyncConnection, actor: Actor, device_id: str) -> None:
    """R-DEVICE-10: a soft invalidation with reason `user_logout`. Anything the caller cannot
    remove — a malformed id, someone else's device, one already invalidated — is a 404."""
    try:
        public_id = UUID(device_id)
    except ValueError:
        raise DeviceNotFound() from None
    if not await queries.invalidate_own(
        conn, actor.tenant_id, actor.person_id, public_id, "user_logout"
    ):
        raise DeviceNotFound()
