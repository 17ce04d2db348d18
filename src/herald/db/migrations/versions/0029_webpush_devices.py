"""Browser Web Push subscriptions as devices: platform `webpush` and its two keys (issue 46).

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07 12:10:00.000000

A subscription is stored like a phone's token: `token` holds its endpoint URL (unique among live
devices, as tokens are), and the new `webpush_p256dh` and `webpush_auth` columns the keys the
browser made for it, which a webpush row must have and no other row may. The platform check
gains `webpush`. Both columns are nullable and added without a default (catalog changes only);
the checks are added NOT VALID and then validated, so existing rows are read without blocking
writes. Down refuses nothing: it deletes the webpush devices (no earlier release could send
them) and restores the previous catalog.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

T = "notification_push_token"
PLATFORMS_BEFORE = "('android', 'ios', 'web')"
PLATFORMS_AFTER = "('android', 'ios', 'web', 'webpush')"
KEYS = "(platform = 'webpush') = (webpush_p256dh IS NOT NULL AND webpush_auth IS NOT NULL)"


def upgrade() -> None:
    op.execute(f"ALTER TABLE {T} ADD COLUMN IF NOT EXISTS webpush_p256dh text")
    op.execute(f"ALTER TABLE {T} ADD COLUMN IF NOT EXISTS webpush_auth text")
    op.execute(f"ALTER TABLE {T} DROP CONSTRAINT {T}_platform_check")
    op.execute(
        f"ALTER TABLE {T} ADD CONSTRAINT {T}_platform_check "
        f"CHECK (platform IN {PLATFORMS_AFTER}) NOT VALID"
    )
    op.execute(f"ALTER TABLE {T} VALIDATE CONSTRAINT {T}_platform_check")
    op.execute(f"ALTER TABLE {T} ADD CONSTRAINT {T}_webpush_keys_check CHECK ({KEYS}) NOT VALID")
    op.execute(f"ALTER TABLE {T} VALIDATE CONSTRAINT {T}_webpush_keys_check")


def downgrade() -> None:
    op.execute(f"DELETE FROM {T} WHERE platform = 'webpush'")
    op.execute(f"ALTER TABLE {T} DROP CONSTRAINT {T}_webpush_keys_check")
    op.execute(f"ALTER TABLE {T} DROP CONSTRAINT {T}_platform_check")
    op.execute(
        f"ALTER TABLE {T} ADD CONSTRAINT {T}_platform_check CHECK (platform IN {PLATFORMS_BEFORE})"
    )
    op.execute(f"ALTER TABLE {T} DROP COLUMN webpush_auth")
    op.execute(f"ALTER TABLE {T} DROP COLUMN webpush_p256dh")
