"""The claim's due index in the claim's own order: (channel, next_attempt_at, id) WHERE queued.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01 17:00:00.000000

The claim orders by (next_attempt_at, id) so that rows with tied due times (one fan-out batch
queues thousands in the same millisecond) are taken in a stable order. The index 0002 created
ended at next_attempt_at, so the planner could not read the order off it: with tied or
near-tied times it sequentially scanned and sorted every queued row of the channel on every
claim (105 ms at 50,000 queued; docs/scaling.md). With `id` as the last key column the claim is
an index range scan that stops after LIMIT rows, whatever the queue depth.

operational_email_due_idx gets the same treatment: its claim orders by (next_attempt_at, id)
too, and the index ended at next_attempt_at.

The other indexes of notification_delivery stay (docs/scaling.md weighs each): a status change
can never be a HOT update while `status` appears in any index or partial-index predicate, and
each of them has a reader.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# (index, table, new key columns, old key columns); every one is partial on status = 'queued'.
_INDEXES = (
    (
        "notification_delivery_due_idx",
        "notification_delivery",
        "channel, next_attempt_at, id",
        "channel, next_attempt_at",
    ),
    ("operational_email_due_idx", "operational_email", "next_attempt_at, id", "next_attempt_at"),
)


def _swap(index: str, table: str, columns: str) -> None:
    """Build the replacement without blocking writes, then swap names.

    CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction, so this runs in an autocommit
    block (the migrations before it are committed first). On a populated database a plain
    CREATE INDEX would hold off every claim, fan-out insert and outcome for the whole build.
    IF [NOT] EXISTS makes a rerun after an interruption finish the job; an index left INVALID by
    an interrupted concurrent build must be dropped by hand (the runbook's usual advice)."""
    built = f"{index}_swap"
    with op.get_context().autocommit_block():
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {built} "
            f"ON {table} ({columns}) WHERE status = 'queued'"
        )
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
        op.execute(f"ALTER INDEX {built} RENAME TO {index}")


def upgrade() -> None:
    for index, table, new, _ in _INDEXES:
        _swap(index, table, new)


def downgrade() -> None:
    for index, table, _, old in _INDEXES:
        _swap(index, table, old)
