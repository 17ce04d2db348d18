"""A tenant's own provider accounts (issue 46): `notification_provider_account`.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07 15:30:00.000000

One row per (tenant, provider): the plain fields the tenant overrides, its secret fields as a
Fernet token under the vault key, and a version the workers' provider cache compares. Under
forced row-level security from its first statement (herald.db.tenancy). A new, empty table:
catalog changes only. The provider names are written out as they stand today.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from herald.db import tenancy

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE = "notification_provider_account"
_PROVIDERS = (
    "smtp",
    "resend",
    "twilio",
    "aakash",
    "telegram",
    "slack",
    "fcm",
    "webpush",
    "whatsapp",
)
_TZ = postgresql.TIMESTAMP(timezone=True)


def upgrade() -> None:
    providers = ", ".join(f"'{p}'" for p in _PROVIDERS)
    op.create_table(
        TABLE,
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column(
            "settings",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("secret_ciphertext", sa.LargeBinary(), nullable=True),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_at", _TZ, server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", _TZ, server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_by", sa.Text(), nullable=False),
        sa.CheckConstraint(f"provider IN ({providers})", name=op.f(f"{TABLE}_provider_check")),
        sa.PrimaryKeyConstraint("id", name=op.f(f"{TABLE}_pkey")),
        sa.UniqueConstraint("tenant_id", "provider", name=op.f(f"{TABLE}_tenant_id_provider_key")),
    )
    for statement in tenancy.protect(TABLE):
        op.execute(statement)


def downgrade() -> None:
    for statement in tenancy.unprotect(TABLE):
        op.execute(statement)
    op.drop_table(TABLE)
