"""Delivery sweep indexes and the embedded secret vault.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "notification_delivery_failed_due_idx",
        "notification_delivery",
        ["next_attempt_at"],
        unique=False,
        postgresql_where=sa.text("status = 'failed'"),
    )
    op.create_index(
        "notification_delivery_inbox_idx",
        "notification_delivery",
        ["recipient_id"],
        unique=False,
        postgresql_where=sa.text("channel = 'in_app' AND status = 'delivered'"),
    )
    op.create_index(
        "notification_delivery_unconfigured_idx",
        "notification_delivery",
        ["channel", "queued_at"],
        unique=False,
        postgresql_where=sa.text("status = 'skipped_unconfigured'"),
    )
    op.create_table(
        "secret_vault",
        sa.Column("ref_id", sa.Text(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("ref_id", name=op.f("secret_vault_pkey")),
        prefixes=["UNLOGGED"],
    )
    op.create_index("secret_vault_expires_at_idx", "secret_vault", ["expires_at"], unique=False)


def downgrade() -> None:
    op.drop_index("secret_vault_expires_at_idx", table_name="secret_vault")
    op.drop_table("secret_vault")
    op.drop_index("notification_delivery_unconfigured_idx", table_name="notification_delivery")
    op.drop_index("notification_delivery_inbox_idx", table_name="notification_delivery")
    op.drop_index("notification_delivery_failed_due_idx", table_name="notification_delivery")
