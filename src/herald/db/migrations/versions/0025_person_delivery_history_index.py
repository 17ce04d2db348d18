"""One person's deliveries in the admin list's order: notification_delivery.user_id and
notification_delivery_person_idx (user_id, queued_at DESC, id DESC) (issue 44).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 03:40:00.000000

`GET /v1/admin/people/{externalId}/deliveries` pages a person's deliveries newest first by
(queued_at, id). The person was known only through the recipient row (`r.user_id`), so no index
held a person's deliveries in that order: the plan joined every recipient of the person to its
deliveries and sorted all of them to return twenty (a million-row history: a million-row sort on
every page). The delivery now carries its recipient's person, written with it at fan-out and
replay, and the index holds each person's range in page order; each month is walked from the
cursor and a Merge Append combines the months, stopping at the page.

Upgrade adds the column (a catalog change), fills it from the recipients (one UPDATE: every
delivery row is rewritten, so on a large database run it in a quiet moment), then builds the
index the way a partitioned table allows without blocking writes: the parent's index ON ONLY the
parent (invalid until every partition has its own), each partition's built CONCURRENTLY and
attached. IF NOT EXISTS lets a rerun after an interruption finish the job.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import Connection

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

D, R = "notification_delivery", "notification_recipient"
INDEX = "notification_delivery_person_idx"
COLUMNS = "user_id, queued_at DESC, id DESC"


def _suffixes(bind: Connection) -> list[str]:
    """The delivery partitions' suffixes (the months, `default`, `legacy`)."""
    return [
        relation.removeprefix(f"{D}_")
        for relation in bind.exec_driver_sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            f"WHERE i.inhparent = '{D}'::regclass ORDER BY 1"
        ).scalars()
    ]


def upgrade() -> None:
    op.execute(f"ALTER TABLE {D} ADD COLUMN IF NOT EXISTS user_id bigint")
    op.execute(
        f"UPDATE {D} d SET user_id = r.user_id FROM {R} r "
        "WHERE r.id = d.recipient_id AND r.occurred_at = d.occurred_at "
        "AND r.user_id IS NOT NULL AND d.user_id IS DISTINCT FROM r.user_id"
    )
    op.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON ONLY {D} ({COLUMNS})")
    suffixes = _suffixes(op.get_bind())
    # CREATE INDEX CONCURRENTLY cannot run in a transaction: the block commits the above first.
    with op.get_context().autocommit_block():
        for suffix in suffixes:
            part, child = f"{D}_{suffix}", f"{INDEX}_{suffix}"
            op.execute(f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{child}" ON "{part}" ({COLUMNS})')
            op.execute(
                f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_inherits "
                f"WHERE inhrelid = '\"{child}\"'::regclass) THEN "
                f'ALTER INDEX {INDEX} ATTACH PARTITION "{child}"; END IF; END $$'
            )


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {INDEX}")
    op.execute(f"ALTER TABLE {D} DROP COLUMN IF EXISTS user_id")
