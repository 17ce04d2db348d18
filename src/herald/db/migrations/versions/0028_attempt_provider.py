"""The delivery attempt names its provider: notification_delivery_attempt.provider and
passed_over (issue 45, provider failover within a channel).

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 12:10:00.000000

A channel may list several providers (HERALD_EMAIL_PROVIDERS, HERALD_SMS_PROVIDERS), so the
attempt row records which one answered, and which were passed over on the way (`name:reason`).
Both columns are nullable and without a default: adding them to the partitioned table is a
catalog change on each partition, with no rewrite. Rows written before stay NULL (the trace says
nothing about their provider).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0028"
# 0026 and 0027 are being written beside this on another branch: whichever merges second
# re-points its down_revision at the other's head.
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ATTEMPT = "notification_delivery_attempt"


def upgrade() -> None:
    op.execute(f"ALTER TABLE {ATTEMPT} ADD COLUMN IF NOT EXISTS provider text")
    op.execute(f"ALTER TABLE {ATTEMPT} ADD COLUMN IF NOT EXISTS passed_over text")


def downgrade() -> None:
    op.execute(f"ALTER TABLE {ATTEMPT} DROP COLUMN IF EXISTS passed_over")
    op.execute(f"ALTER TABLE {ATTEMPT} DROP COLUMN IF EXISTS provider")
