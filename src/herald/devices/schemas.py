"""HTTP models of an end user's push devices (DESIGN.md §5.1)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

TOKEN_MAX_LENGTH = 4096
# No control character anywhere, no whitespace at either end (spelled out rather than \s, which
# JSON Schema, Python and pydantic's regex engine each read differently).
_CONTROL = r"\x00-\x1f\x7f-\x9f"
_SPACE = r"\x20\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
TOKEN_PATTERN = rf"^[^{_CONTROL}{_SPACE}](?:[^{_CONTROL}]*[^{_CONTROL}{_SPACE}])?$"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


# base64url, as PushSubscription.toJSON() gives them (padding tolerated): p256dh is a 65-byte
# uncompressed P-256 point (0x04 first, so "B"), auth 16 bytes.
P256DH_PATTERN = r"^B[A-Za-z0-9_-]{86}=?$"
AUTH_PATTERN = r"^[A-Za-z0-9_-]{22}(==)?$"


class SubscriptionKeys(_Model):
    """A Web Push subscription's keys, as the browser's PushSubscription.toJSON() has them."""

    p256dh: Annotated[str, Field(pattern=P256DH_PATTERN)]
    auth: Annotated[str, Field(pattern=AUTH_PATTERN)]


class TokenRegistration(_Model):
    """A phone's (or an FCM web client's) push token. No user or device id: the owner is always
    the verified token's subject (R-DEVICE-6, R-DEVICE-11), and `extra="forbid"` refuses one."""

    # A NUL byte would be refused by PostgreSQL as a 500; surrounding blanks would make one
    # device look like two. Refused (422) rather than silently rewritten.
    token: Annotated[str, Field(min_length=1, max_length=TOKEN_MAX_LENGTH, pattern=TOKEN_PATTERN)]
    platform: Literal["android", "ios", "web"]


class SubscriptionRegistration(_Model):
    """A browser's Web Push subscription as PushSubscription.toJSON() gives it, with
    `platform: "webpush"`. The endpoint must be https to a public address (checked, as a
    webhook's URL is, before anything is stored)."""

    platform: Literal["webpush"]
    endpoint: Annotated[
        str, Field(min_length=1, max_length=TOKEN_MAX_LENGTH, pattern=TOKEN_PATTERN)
    ]
    keys: SubscriptionKeys
    # Herald keeps no expiry of its own: a dead subscription is found by the push service's
    # 404/410.
    expiration_time: int | None = None


# The body of POST /v1/me/devices: which shape is told by `platform`.
DeviceRegistration = Annotated[
    TokenRegistration | SubscriptionRegistration, Field(discriminator="platform")
]


class Device(_Model):
    """A registered device as its owner sees it; the token itself is never echoed back."""

    id: UUID
    platform: str


class DeviceItem(_Model):
    id: UUID
    platform: str
    created_at: datetime
    last_used_at: datetime


class DeviceList(_Model):
    items: list[DeviceItem]


class VapidPublicKey(_Model):
    # base64url, no padding: the uncompressed P-256 point.
    public_key: str
