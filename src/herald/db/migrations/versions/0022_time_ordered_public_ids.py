"""Time-ordered (version-7) public ids for the rows every send writes by the million.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05 03:00:00.000000

notification_event, notification_recipient, notification_delivery, dead_letter and
webhook_message took gen_random_uuid() (version 4). A random key puts each insert into a random
leaf of the table's public-id unique index, and so does every non-HOT update (a delivery is
written three times: queued, claimed, ended); once the index outgrows shared_buffers each of
those is a page read and a dirty page to write. A version-7 id (RFC 9562: 48 bits of Unix
milliseconds, the version, 74 random bits) puts them on the index's newest leaves
(docs/scaling.md, index maintenance). The expression is written out rather than PostgreSQL 18's uuidv7(), so
that every supported server has the same default.

Only the column default changes: a catalog update on each table and partition (a brief ACCESS
EXCLUSIVE lock each, no rewrite). Existing rows keep their ids; ids made before and after both
stay valid and unique (the two versions' bits differ). Down restores gen_random_uuid().
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The same text as herald.db.schema.TIME_ORDERED_UUID at this revision (frozen here: a later
# change to the schema's expression needs a migration of its own).
TIME_ORDERED_UUID = (
    "encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid()) PLACING "
    "substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) "
    "FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid"
)
TABLES = (
    "notification_event",
    "notification_recipient",
    "notification_delivery",
    "dead_letter",
    "webhook_message",
)


def upgrade() -> None:
    # Without ONLY, ALTER TABLE reaches every partition of the two partitioned tables as well.
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN public_id SET DEFAULT {TIME_ORDERED_UUID}")


def downgrade() -> None:
    for table in TABLES:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN public_id SET DEFAULT gen_random_uuid()")
