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

import base64
import binascii
from dataclasses import dataclass
from uuid import UUID

from cryptography.hazmat.primitives.asymmetric import ec
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.auth.service import Actor
from herald.channels import destination
from herald.config import Settings
from herald.devices import queries
from herald.devices.schemas import (
    Device,
    DeviceItem,
    DeviceList,
    DeviceRegistration,
    TokenRegistration,
)
from herald.errors import (
    DeviceLimitReached,
    DeviceNotFound,
    DeviceRegistrationConflict,
    PushEndpointForbidden,
    PushSubscriptionInvalid,
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


@dataclass(frozen=True)
class Target:
    """What a registration stores: the token (a browser's endpoint URL) and, for webpush, keys."""

    token: str
    platform: str
    keys: tuple[str, str] | None


async def checked_target(body: DeviceRegistration, settings: Settings) -> Target:
    """The registration's target, or a 400 saying what is wrong. A browser subscription's keys
    must decode to a P-256 point and a 16-byte secret, and its endpoint must be https to a public
    address (herald.channels.destination, as for webhooks): checked here, before anything is
    written, and again before every send."""
    if isinstance(body, TokenRegistration):
        return Target(body.token, body.platform, None)
    p256dh, auth = _decoded(body.keys.p256dh), _decoded(body.keys.auth)
    if p256dh is None or len(p256dh) != 65 or p256dh[0] != 4:
        raise PushSubscriptionInvalid("keys.p256dh must be a 65-byte uncompressed P-256 point")
    try:
        # The pattern cannot say the point is on the curve.
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), p256dh)
    except ValueError:
        raise PushSubscriptionInvalid("keys.p256dh is not a point on P-256") from None
    if auth is None or len(auth) != 16:
        raise PushSubscriptionInvalid("keys.auth must be 16 bytes")
    try:
        if (
            destination.parse(body.endpoint).scheme != "https"
            and not settings.webhook_allow_loopback
        ):
            raise destination.WebhookUrlInvalid()
        await destination.resolve(body.endpoint, settings)
    except destination.WebhookUrlInvalid:
        raise PushSubscriptionInvalid("endpoint must be an absolute https URL") from None
    except (destination.WebhookUrlForbidden, destination.WebhookUrlUnresolvable):
        raise PushEndpointForbidden() from None
    return Target(body.endpoint, body.platform, (body.keys.p256dh, body.keys.auth))


def _decoded(value: str) -> bytes | None:
    try:
        return base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))
    except (binascii.Error, ValueError):
        return None


async def register_device(
    conn: AsyncConnection, actor: Actor, target: Target, *, limit: int
) -> Registration:
    """Register `target` for the caller: a touch, a fresh row, or a replacement."""
    if not await queries.lock_person(conn, actor.tenant_id, actor.person_id):
        raise Unauthenticated("unknown person")
    for _ in range(MAX_ATTEMPTS):
        held = await queries.find_active_token(conn, actor.tenant_id, target.token)
        if held is not None and held.person_id == actor.person_id:
            # R-DEVICE-7: a touch, never invalidate-and-reinsert, so app launches do not churn.
            # A browser that re-subscribes to the same endpoint may bring new keys.
            public_id, platform = await queries.touch(conn, held.id, target.platform, target.keys)
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
            conn, actor.tenant_id, actor.person_id, target.token, target.platform, target.keys
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
