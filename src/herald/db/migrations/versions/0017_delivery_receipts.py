"""Delivery receipts from providers (issue 16): the final status `bounced`, the index a receipt
finds its delivery by, and the addresses a hard bounce marked undeliverable.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01 17:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from herald.db import tenancy

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = [
    "queued",
    "processing",
    "sent",
    "delivered",
    "failed",
    "dead",
    "cancelled",
    "skipped_preference",
    "skipped_no_template",
    "skipped_no_destination",
    "skipped_unconfigured",
    "skipped_recipient_gone",
]
_AFTER = [*_BEFORE[:4], "bounced", *_BEFORE[4:]]
_TZ = postgresql.TIMESTAMP(timezone=True)


def _status_check(statuses: list[str]) -> None:
    op.drop_constraint(
        op.f("notification_delivery_status_check"), "notification_delivery", type_="check"
    )
    listed = ", ".join(f"'{s}'" for s in statuses)
    op.create_check_constraint(
        op.f("notification_delivery_status_check"),
        "notification_delivery",
        f"status IN ({listed})",
    )


def upgrade() -> None:
    _status_check(_AFTER)
    op.add_column("notification_delivery", sa.Column("bounced_at", _TZ, nullable=True))
    op.create_check_constraint(
        op.f("notification_delivery_bounced_at_when_bounced_check"),
        "notification_delivery",
        "status <> 'bounced' OR bounced_at IS NOT NULL",
    )
    op.create_index(
        "notification_delivery_provider_message_idx",
        "notification_delivery",
        ["provider_message_id"],
        postgresql_where=sa.text("provider_message_id IS NOT NULL"),
    )
    op.create_table(
        "undeliverable_address",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("address_hash", sa.String(length=64), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("delivery_public_id", sa.UUID(), nullable=True),
        sa.Column("created_at", _TZ, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "channel IN ('email')", name=op.f("undeliverable_address_channel_check")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("undeliverable_address_pkey")),
        sa.UniqueConstraint(
            "tenant_id",
            "channel",
            "address_hash",
            name=op.f("undeliverable_address_tenant_id_channel_address_hash_key"),
        ),
    )
    op.create_index("undeliverable_address_created_at_idx", "undeliverable_address", ["created_at"])
    for statement in tenancy.protect("undeliverable_address"):
        op.execute(statement)


def downgrade() -> None:
    for statement in tenancy.unprotect("undeliverable_address"):
        op.execute(statement)
    op.drop_table("undeliverable_address")
    op.drop_index("notification_delivery_provider_message_idx", table_name="notification_delivery")
    # A bounced delivery was sent: that is what it goes back to.
    op.execute("UPDATE notification_delivery SET status = 'sent' WHERE status = 'bounced'")
    op.drop_constraint(
        op.f("notification_delivery_bounced_at_when_bounced_check"),
        "notification_delivery",
        type_="check",
    )
    op.drop_column("notification_delivery", "bounced_at")
    _status_check(_BEFORE)
