"""Receipts that arrive before their send is recorded are kept, not lost (issue 44).

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 03:30:00.000000

A Twilio status callback can arrive while the recorder is still writing the message id the
callback names; Twilio posts it once. `pending_receipt` keeps it until the recorder's transaction
that stores the id applies and deletes it (herald.receipts). It has no tenant_id: row-level
security scopes a row through the delivery that carries its message id (tenancy.PARENT_SCOPED).
Down drops the table and whatever receipts it still held (they could not exist before).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from herald.db import tenancy

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "pending_receipt"
# tenancy.PARENT_SCOPED's rule as of this revision, written out so a later change there does not
# rewrite history here.
RULE = (
    "EXISTS (SELECT 1 FROM notification_delivery d "
    "WHERE d.provider_message_id = pending_receipt.provider_message_id "
    "AND d.channel = pending_receipt.channel)"
)


def upgrade() -> None:
    op.create_table(
        TABLE,
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("provider_message_id", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("code", sa.Text(), nullable=True),
        sa.Column("hard", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("provider_status", sa.Text(), nullable=False),
        sa.Column(
            "received_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint("provider IN ('twilio')", name=op.f("pending_receipt_provider_check")),
        sa.CheckConstraint("channel IN ('sms')", name=op.f("pending_receipt_channel_check")),
        sa.CheckConstraint(
            "status IN ('delivered', 'bounced')", name=op.f("pending_receipt_status_check")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pending_receipt_pkey")),
        sa.UniqueConstraint(
            "channel",
            "provider_message_id",
            "status",
            name=op.f("pending_receipt_channel_provider_message_id_status_key"),
        ),
    )
    op.create_index("pending_receipt_received_at_idx", TABLE, ["received_at"])
    for statement in tenancy.protect(TABLE, rule=RULE):
        op.execute(statement)


def downgrade() -> None:
    for statement in tenancy.unprotect(TABLE):
        op.execute(statement)
    op.drop_table(TABLE)
