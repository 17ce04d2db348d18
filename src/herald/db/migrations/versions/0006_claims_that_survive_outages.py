"""claims that survive outages: fan-out claim holders, secret vault claims

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 13:20:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("notification_event", sa.Column("fanout_claimed_by", sa.Integer(), nullable=True))
    op.add_column("secret_vault", sa.Column("holder", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("secret_vault", "holder")
    op.drop_column("notification_event", "fanout_claimed_by")
