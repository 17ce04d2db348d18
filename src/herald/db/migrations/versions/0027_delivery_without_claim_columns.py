"""The delivery record without its claim: claimed_at, lease_expires_at, their constraints and
the due and lease indexes are dropped (issue 48).

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 12:05:00.000000

After 0026 the claim is the queue row's (notification_delivery_queue), and nothing writes or
reads these on the delivery. While they stayed, every queued delivery the fan-out writes entered
`notification_delivery_due_idx` for no reader. Each drop is a catalog change (a brief ACCESS
EXCLUSIVE lock on the table and its months, no scan). PostgreSQL cannot drop an index of a
partitioned table CONCURRENTLY, and there is no reader left to wait for: 0026 already required
the previous release's workers to be stopped.

Down restores the columns, constraints and indexes as 0021 made them (the indexes are built on
every month: run it in a quiet moment on a large database); 0026's down then moves the claims
back.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from herald.db import partitions

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

D = "notification_delivery"


def upgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {D}_due_idx")
    op.execute(f"DROP INDEX IF EXISTS {D}_lease_idx")
    op.execute(f"ALTER TABLE {D} DROP CONSTRAINT IF EXISTS {D}_claim_while_processing_check")
    op.execute(f"ALTER TABLE {D} DROP CONSTRAINT IF EXISTS {D}_lease_pair_check")
    op.execute(f"ALTER TABLE {D} DROP COLUMN IF EXISTS claimed_at")
    op.execute(f"ALTER TABLE {D} DROP COLUMN IF EXISTS lease_expires_at")


def downgrade() -> None:
    op.execute(f"ALTER TABLE {D} ADD COLUMN claimed_at timestamp with time zone")
    op.execute(f"ALTER TABLE {D} ADD COLUMN lease_expires_at timestamp with time zone")
    op.execute(
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_lease_pair_check "
        "CHECK ((claimed_at IS NULL) = (lease_expires_at IS NULL))"
    )
    op.execute(
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_claim_while_processing_check "
        "CHECK ((status = 'processing') = (claimed_at IS NOT NULL))"
    )
    op.execute(
        f"CREATE INDEX {D}_due_idx ON {D} (channel, next_attempt_at, id) WHERE status = 'queued'"
    )
    op.execute(f"CREATE INDEX {D}_lease_idx ON {D} (lease_expires_at) WHERE status = 'processing'")
    # Each partition's new indexes under the parent's names plus the month, as 0021 named them.
    parts = op.get_bind().exec_driver_sql(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        f"WHERE i.inhparent = '{D}'::regclass ORDER BY 1"
    )
    for part in parts.scalars().all():
        op.execute(partitions.rename_indexes_sql(part, part.removeprefix(f"{D}_")))
