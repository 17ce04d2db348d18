"""The delivery attempt's foreign key to its delivery is dropped (issue 12).

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-05 11:30:00.000000

Each month's `notification_delivery_attempt_<month>_delivery_id_fkey` checked every attempt row
the recorder writes: one index probe and a key-share lock of the delivery row for each, 3.8 µs
of PostgreSQL a delivery, and the in-process delivery rate 5.3 % lower with it than without
(ten drains each, alternating: docs/scaling.md, index maintenance). It guarded nothing Herald can do wrong:

- an attempt is written only by `record_outcomes`, from the rows of its own `UPDATE … RETURNING`
  of the deliveries (the `ended` step), so it names a delivery that exists, in its month;
- its ON DELETE CASCADE had no work left: the only deletes of deliveries are retention's, whose
  bounded delete takes the attempts in the same statement and whose month drop drops the month's
  attempts with it (tests/integration/test_retention.py counts both).

Dropping a constraint is a catalog change on each attempt partition (a brief lock each, no scan).
Down adds the keys back, one per attempt partition to the delivery partition of its month (a
scan of each to validate: run it in a quiet moment on a large database; it refuses if an attempt
was written by hand for a delivery that is not there).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from sqlalchemy import Connection

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ATTEMPT, DELIVERY = "notification_delivery_attempt", "notification_delivery"


def _suffixes(bind: Connection) -> list[str]:
    """The attempt partitions' suffixes (the months, `default`, `legacy`)."""
    return [
        relation.removeprefix(f"{ATTEMPT}_")
        for relation in bind.exec_driver_sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            f"WHERE i.inhparent = '{ATTEMPT}'::regclass ORDER BY 1"
        ).scalars()
    ]


def upgrade() -> None:
    bind = op.get_bind()
    for suffix in _suffixes(bind):
        part = f"{ATTEMPT}_{suffix}"
        op.execute(f'ALTER TABLE "{part}" DROP CONSTRAINT IF EXISTS "{part}_delivery_id_fkey"')


def downgrade() -> None:
    bind = op.get_bind()
    for suffix in _suffixes(bind):
        part, referenced = f"{ATTEMPT}_{suffix}", f"{DELIVERY}_{suffix}"
        op.execute(
            f'ALTER TABLE "{part}" ADD CONSTRAINT "{part}_delivery_id_fkey" '
            f'FOREIGN KEY (delivery_id, occurred_at) REFERENCES "{referenced}" (id, occurred_at) '
            "ON DELETE CASCADE"
        )
