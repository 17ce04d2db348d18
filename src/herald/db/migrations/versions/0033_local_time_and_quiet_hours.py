"""Send at the person's own hour and quiet hours per person (issue 45, items 2 and 3).

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-07 15:30:00.000000

An event may carry `deliverAt` — a local wall-clock time and optionally a local date — that the
fan-out turns into each recipient's own moment in their zone. A person's preference set may
carry quiet hours: a local start and end (end < start wraps past midnight) and an optional zone.
Every column is nullable: catalog changes only, no rewrite. The CHECKs are added NOT VALID and
validated after (no existing row can fail them: the columns are new and NULL).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECKS = (
    (
        "notification_event",
        "notification_event_deliver_at_pair_check",
        "deliver_local_time IS NOT NULL OR deliver_local_date IS NULL",
    ),
    (
        "notification_event",
        "notification_event_deliver_at_or_scheduled_check",
        "deliver_local_time IS NULL OR scheduled_for IS NULL",
    ),
    (
        "notification_preference_set",
        "notification_preference_set_quiet_hours_pair_check",
        "(quiet_hours_start IS NULL AND quiet_hours_end IS NULL) OR (quiet_hours_start IS NOT"
        " NULL AND quiet_hours_end IS NOT NULL AND quiet_hours_start <> quiet_hours_end)",
    ),
)


def upgrade() -> None:
    op.add_column("notification_event", sa.Column("deliver_local_time", sa.Time()))
    op.add_column("notification_event", sa.Column("deliver_local_date", sa.Date()))
    op.add_column("notification_preference_set", sa.Column("quiet_hours_start", sa.Time()))
    op.add_column("notification_preference_set", sa.Column("quiet_hours_end", sa.Time()))
    op.add_column("notification_preference_set", sa.Column("quiet_hours_timezone", sa.Text()))
    for table, name, predicate in _CHECKS:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({predicate}) NOT VALID")
        op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")


def downgrade() -> None:
    for table, name, _ in _CHECKS:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    op.drop_column("notification_preference_set", "quiet_hours_timezone")
    op.drop_column("notification_preference_set", "quiet_hours_end")
    op.drop_column("notification_preference_set", "quiet_hours_start")
    op.drop_column("notification_event", "deliver_local_date")
    op.drop_column("notification_event", "deliver_local_time")
