"""Indexes for the admin history list and retention's dead-letter check.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "notification_event_history_idx",
        "notification_event",
        ["tenant_id", sa.literal_column("occurred_at DESC"), sa.literal_column("id DESC")],
        unique=False,
    )
    op.create_index(
        "dead_letter_unreplayed_delivery_idx",
        "dead_letter",
        [sa.literal_column("(payload_ref ->> 'notificationDeliveryPublicId')")],
        unique=False,
        postgresql_where=sa.text("replayed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("dead_letter_unreplayed_delivery_idx", table_name="dead_letter")
    op.drop_index("notification_event_history_idx", table_name="notification_event")
