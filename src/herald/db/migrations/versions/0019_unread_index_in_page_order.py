"""The unread index in the inbox's page order: (user_id, occurred_at DESC, id DESC) WHERE unread.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-01 20:20:00.000000

`notification_recipient_unread_idx` was (user_id) WHERE read_at IS NULL: enough for the unread
count (which stops at 100 rows) and read-all, but the list with `unreadOnly=true` pages newest
first, and a plan that chose this index had to fetch and sort every unread row of the person
before taking a page (tests/integration/test_plans_inbox.py found the Sort in the generic plan).
With occurred_at and id as further keys, in the page's order, the unread list is an index walk
that stops at the page, and the count and read-all read the same index by its first column.

Built CONCURRENTLY under a new name and swapped, as 0013 did, so a populated inbox keeps taking
writes while it builds.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "notification_recipient_unread_idx"
NEW = "user_id, occurred_at DESC, id DESC"
OLD = "user_id"


def _swap(columns: str) -> None:
    """CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction: an autocommit block. IF [NOT]
    EXISTS lets a rerun after an interruption finish the job."""
    built = f"{INDEX}_swap"
    with op.get_context().autocommit_block():
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {built} "
            f"ON notification_recipient ({columns}) WHERE read_at IS NULL"
        )
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {INDEX}")
        op.execute(f"ALTER INDEX {built} RENAME TO {INDEX}")


def upgrade() -> None:
    _swap(NEW)


def downgrade() -> None:
    _swap(OLD)
