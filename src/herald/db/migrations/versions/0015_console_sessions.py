"""Console sessions (issue 13): the operator console's server-side sessions.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01 17:00:00.000000

The table is under forced row-level security from its first statement (herald.db.tenancy).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from herald.db import tenancy

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_session",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("person_id", sa.BigInteger(), nullable=False),
        sa.Column("role_code", sa.Text(), nullable=True),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", postgresql.TIMESTAMP(timezone=True), nullable=False),
        sa.CheckConstraint(
            "length(token_hash) = 64", name=op.f("console_session_token_hash_sha256_check")
        ),
        sa.CheckConstraint(
            "expires_at > created_at", name=op.f("console_session_expires_after_created_check")
        ),
        sa.ForeignKeyConstraint(
            ["person_id"],
            ["person.id"],
            name=op.f("console_session_person_id_fkey"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("console_session_pkey")),
        sa.UniqueConstraint("token_hash", name=op.f("console_session_token_hash_key")),
    )
    op.create_index(
        "console_session_expires_at_idx", "console_session", ["expires_at"], unique=False
    )
    op.create_index("console_session_person_id_idx", "console_session", ["person_id"], unique=False)
    for statement in tenancy.protect("console_session"):
        op.execute(statement)


def downgrade() -> None:
    for statement in tenancy.unprotect("console_session"):
        op.execute(statement)
    op.drop_index("console_session_person_id_idx", table_name="console_session")
    op.drop_index("console_session_expires_at_idx", table_name="console_session")
    op.drop_table("console_session")
