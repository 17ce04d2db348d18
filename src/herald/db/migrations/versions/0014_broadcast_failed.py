"""Broadcasts: a `failed` state for one whose event's fan-out gave up (issue 11).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02 12:00:00.000000

A broadcast whose fan-out was dead-lettered stayed `sending` forever. It now settles as `failed`
(with `failed_at`) once nothing it wrote is in flight; its report still adds up from the rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_STATES_BEFORE = "('draft', 'approved', 'sending', 'completed', 'cancelled')"
_STATES_AFTER = "('draft', 'approved', 'sending', 'completed', 'cancelled', 'failed')"


def upgrade() -> None:
    op.add_column("broadcast", sa.Column("failed_at", sa.TIMESTAMP(timezone=True), nullable=True))
    op.drop_constraint(op.f("broadcast_state_check"), "broadcast", type_="check")
    op.create_check_constraint(
        op.f("broadcast_state_check"), "broadcast", f"state IN {_STATES_AFTER}"
    )
    op.drop_constraint(op.f("broadcast_frozen_when_released_check"), "broadcast", type_="check")
    op.create_check_constraint(
        op.f("broadcast_frozen_when_released_check"),
        "broadcast",
        "state NOT IN ('sending', 'completed', 'failed') OR audience_frozen_at IS NOT NULL",
    )
    op.create_check_constraint(
        op.f("broadcast_failure_pair_check"),
        "broadcast",
        "(state = 'failed') = (failed_at IS NOT NULL)",
    )


def downgrade() -> None:
    # A failed broadcast goes back to what it was before this revision: sending, settled.
    op.execute("UPDATE broadcast SET state = 'sending' WHERE state = 'failed'")
    op.drop_constraint(op.f("broadcast_failure_pair_check"), "broadcast", type_="check")
    op.drop_constraint(op.f("broadcast_frozen_when_released_check"), "broadcast", type_="check")
    op.create_check_constraint(
        op.f("broadcast_frozen_when_released_check"),
        "broadcast",
        "state NOT IN ('sending', 'completed') OR audience_frozen_at IS NOT NULL",
    )
    op.drop_constraint(op.f("broadcast_state_check"), "broadcast", type_="check")
    op.create_check_constraint(
        op.f("broadcast_state_check"), "broadcast", f"state IN {_STATES_BEFORE}"
    )
    op.drop_column("broadcast", "failed_at")
