"""The narrow delivery queue: notification_delivery_queue, filled from a live database's queued
and processing deliveries (issue 48).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 12:00:00.000000

Claims, lease renewals and the reaper move from the wide delivery row, whose every status change
entered eleven indexes, to a narrow row holding only the queue state (docs/scaling.md, "The
queue table"). A delivery has a queue row exactly while it is queued; a claimed row is one whose
queue row has `claimed_at` set, and readers call that `processing` (herald.db.queue).

Upgrade creates the table, its indexes and its tenant policy (a catalog change), then copies the
queue in bounded batches, each its own short transaction, so a populated database keeps taking
writes meanwhile: every `queued` delivery's row, channel by channel in the due index's order
(next_attempt_at, id) with a key set as the cursor, and then every `processing` delivery's, claim
and lease copied, the delivery itself put back to `queued` (the claim is the queue row's now).
Failed deliveries waiting for their retry stay off the queue: the reaper's re-queue enters them
when their backoff has elapsed, as it enters every row it re-queues. A rerun after an
interruption finishes the job (ON CONFLICT DO NOTHING).

Stop the channel workers and the scheduler of the previous release before migrating: they claim
through the delivery's status and would not see the queue. 0027 then drops the delivery's own
claim columns and its due and lease indexes.

Down moves each claimed queue row's claim back to its delivery (which becomes `processing`
again; 0027's down has restored the columns) and drops the table.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from herald.db import tenancy

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

D, Q = "notification_delivery", "notification_delivery_queue"
BATCH = 5_000

# One batch of one channel's queued deliveries after the cursor (next_attempt_at, id), walking
# notification_delivery_due_idx (channel, next_attempt_at, id) WHERE status = 'queued'.
COPY_QUEUED = f"""
WITH batch AS MATERIALIZED (
    SELECT d.id, d.tenant_id, d.channel, d.occurred_at, d.next_attempt_at
      FROM {D} d
     WHERE d.status = 'queued' AND d.channel = %(channel)s
       AND (d.next_attempt_at, d.id) > (%(after_at)s, %(after_id)s)
     ORDER BY d.next_attempt_at, d.id
     LIMIT {BATCH}
), copied AS (
    INSERT INTO {Q} (delivery_id, tenant_id, channel, occurred_at, next_attempt_at)
    SELECT id, tenant_id, channel, occurred_at, next_attempt_at FROM batch
        ON CONFLICT (delivery_id) DO NOTHING
)
SELECT next_attempt_at, id FROM batch ORDER BY next_attempt_at DESC, id DESC LIMIT 1
"""

# The claimed rows (few: a batch per worker loop), through notification_delivery_lease_idx.
MOVE_PROCESSING = f"""
WITH held AS (
    INSERT INTO {Q} (delivery_id, tenant_id, channel, occurred_at, next_attempt_at, claimed_at,
                     lease_expires_at)
    SELECT d.id, d.tenant_id, d.channel, d.occurred_at, d.next_attempt_at, d.claimed_at,
           d.lease_expires_at
      FROM {D} d
     WHERE d.status = 'processing' AND d.lease_expires_at IS NOT NULL
        ON CONFLICT (delivery_id) DO NOTHING
    RETURNING delivery_id, occurred_at
)
UPDATE {D} d SET status = 'queued', claimed_at = NULL, lease_expires_at = NULL
  FROM held WHERE d.id = held.delivery_id AND d.occurred_at = held.occurred_at
"""


def upgrade() -> None:
    op.execute(
        f"CREATE TABLE {Q} ("
        "delivery_id bigint NOT NULL, tenant_id text NOT NULL, channel text NOT NULL, "
        "occurred_at timestamp with time zone NOT NULL, "
        "next_attempt_at timestamp with time zone DEFAULT now() NOT NULL, "
        "claimed_at timestamp with time zone, lease_expires_at timestamp with time zone, "
        f"CONSTRAINT {Q}_pkey PRIMARY KEY (delivery_id), "
        f"CONSTRAINT {Q}_lease_pair_check CHECK ((claimed_at IS NULL) = (lease_expires_at IS NULL)))"
    )
    op.execute(
        f"CREATE INDEX {Q}_due_idx ON {Q} (channel, next_attempt_at, delivery_id) "
        "WHERE claimed_at IS NULL"
    )
    op.execute(f"CREATE INDEX {Q}_lease_idx ON {Q} (lease_expires_at) WHERE claimed_at IS NOT NULL")
    for statement in tenancy.protect(Q):
        op.execute(statement)
    bind = op.get_bind()
    channels = [
        row[0]
        for row in bind.exec_driver_sql(
            f"SELECT DISTINCT channel FROM {D} WHERE status IN ('queued', 'processing')"
        )
    ]
    # Each batch its own transaction: the live database's writers wait on none of them long.
    with op.get_context().autocommit_block():
        for channel in channels:
            after: tuple[object, int] = ("-infinity", 0)
            while True:
                last = bind.exec_driver_sql(
                    COPY_QUEUED, {"channel": channel, "after_at": after[0], "after_id": after[1]}
                ).first()
                if last is None:
                    break
                after = (last[0], last[1])
        bind.exec_driver_sql(MOVE_PROCESSING)


def downgrade() -> None:
    op.execute(
        f"UPDATE {D} d SET status = 'processing', claimed_at = q.claimed_at, "
        f"lease_expires_at = q.lease_expires_at FROM {Q} q "
        "WHERE q.claimed_at IS NOT NULL AND d.id = q.delivery_id AND d.occurred_at = q.occurred_at"
    )
    for statement in tenancy.unprotect(Q):
        op.execute(statement)
    op.execute(f"DROP TABLE {Q}")
