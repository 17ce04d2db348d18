"""Recipients, deliveries and attempts partitioned by month of occurred_at (issue 12).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03 11:30:00.000000

Retention then drops a whole month instead of deleting it row by row (herald.db.partitions,
docs/scaling.md, partitions). The delivery and the attempt get the event's `occurred_at` (copied from the
recipient, then from the delivery) as their partition key; every unique key gains it, as
PostgreSQL requires; the keys between the three tables become each month's own.

On a populated database the tables are not rewritten into months. Each is renamed `<t>_legacy`
with its indexes, its old keys left as they were, and attached to the new parent as the
partition FROM (MINVALUE) TO (the month after its newest row's): PostgreSQL reuses every index whose definition
matches the parent's and builds the four unique ones that gained `occurred_at` and the in-app
index that gained `id`. Months start
after the legacy range; the legacy partitions age out under the bounded deletes and retention drops them
once empty. What this costs is one pass over the two child tables to fill their new column and
one index build per new unique key, all inside this migration's transaction (its locks are
exclusive: run it in a maintenance window on a large database).

An empty table (a new installation) is dropped instead of attached, so a fresh database has no
legacy partition and equals db/schema.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from alembic import op
from sqlalchemy import Connection

from herald.db import partitions, tenancy

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

R, D, A = partitions.RECIPIENT, partitions.DELIVERY, partitions.ATTEMPT
TABLES = (R, D, A)
# The month keys at this revision (frozen here: herald.db.partitions.MONTH_KEYS dropped the
# attempt's in 0023, which drops it from the partitions this revision made).
MONTH_KEYS = {D: ("recipient_id", R), A: ("delivery_id", D)}

# What the partitioned parents carry beyond LIKE's columns, defaults and checks.
PARTITIONED_KEYS = {
    R: [
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_pkey PRIMARY KEY (id, occurred_at)",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_public_id_key UNIQUE (public_id, occurred_at)",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_event_user_key "
        "UNIQUE (event_id, user_public_id_snapshot, occurred_at)",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_event_id_fkey FOREIGN KEY (event_id, occurred_at) "
        "REFERENCES notification_event (id, occurred_at) ON DELETE RESTRICT",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_user_id_fkey FOREIGN KEY (user_id) "
        "REFERENCES person (id) ON DELETE SET NULL",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_audience_role_id_fkey FOREIGN KEY (audience_role_id) "
        "REFERENCES role (id) ON DELETE SET NULL",
        f"CREATE INDEX {R}_centre_idx ON {R} (user_id, occurred_at DESC, id DESC)",
        f"CREATE INDEX {R}_unread_idx ON {R} (user_id, occurred_at DESC, id DESC) "
        "WHERE read_at IS NULL",
    ],
    D: [
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_pkey PRIMARY KEY (id, occurred_at)",
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_public_id_key UNIQUE (public_id, occurred_at)",
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_event_id_fkey FOREIGN KEY (event_id, occurred_at) "
        "REFERENCES notification_event (id, occurred_at) ON DELETE RESTRICT",
        f"CREATE INDEX {D}_recipient_idx ON {D} (recipient_id)",
        f"CREATE INDEX {D}_event_id_idx ON {D} (event_id, status)",
        f"CREATE UNIQUE INDEX {D}_single_target_key ON {D} (recipient_id, channel, occurred_at) "
        "WHERE provider_target_id IS NULL AND replay_of_delivery_id IS NULL",
        f"CREATE UNIQUE INDEX {D}_multi_target_key ON {D} "
        "(recipient_id, channel, provider_target_id, occurred_at) "
        "WHERE provider_target_id IS NOT NULL AND replay_of_delivery_id IS NULL",
        f"CREATE INDEX {D}_due_idx ON {D} (channel, next_attempt_at, id) WHERE status = 'queued'",
        f"CREATE INDEX {D}_lease_idx ON {D} (lease_expires_at) WHERE status = 'processing'",
        f"CREATE INDEX {D}_failed_due_idx ON {D} (next_attempt_at) WHERE status = 'failed'",
        f"CREATE INDEX {D}_inbox_idx ON {D} (recipient_id, id) "
        "WHERE channel = 'in_app' AND status = 'delivered'",
        f"CREATE INDEX {D}_unconfigured_idx ON {D} (channel, queued_at) "
        "WHERE status = 'skipped_unconfigured'",
        f"CREATE INDEX {D}_held_idx ON {D} (queued_at) WHERE status = 'held'",
        f"CREATE INDEX {D}_provider_message_idx ON {D} (provider_message_id) "
        "WHERE provider_message_id IS NOT NULL",
    ],
    A: [
        f"ALTER TABLE {A} ADD CONSTRAINT {A}_pkey PRIMARY KEY (id, occurred_at)",
        f"CREATE INDEX {A}_delivery_id_idx ON {A} (delivery_id)",
    ],
}

# The unpartitioned tables as 0020 left them (the down migration's target).
PLAIN_KEYS = {
    R: [
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_pkey PRIMARY KEY (id)",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_public_id_key UNIQUE (public_id)",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_event_user_key "
        "UNIQUE (event_id, user_public_id_snapshot)",
        f"ALTER TABLE {R} ADD CONSTRAINT {R}_event_id_fkey FOREIGN KEY (event_id) "
        "REFERENCES notification_event (id) ON DELETE RESTRICT",
        *PARTITIONED_KEYS[R][4:],
    ],
    D: [
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_pkey PRIMARY KEY (id)",
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_public_id_key UNIQUE (public_id)",
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_recipient_id_fkey FOREIGN KEY (recipient_id) "
        f"REFERENCES {R} (id) ON DELETE CASCADE",
        f"ALTER TABLE {D} ADD CONSTRAINT {D}_event_id_fkey FOREIGN KEY (event_id) "
        "REFERENCES notification_event (id) ON DELETE RESTRICT",
        PARTITIONED_KEYS[D][3],
        PARTITIONED_KEYS[D][4],
        f"CREATE UNIQUE INDEX {D}_single_target_key ON {D} (recipient_id, channel) "
        "WHERE provider_target_id IS NULL AND replay_of_delivery_id IS NULL",
        f"CREATE UNIQUE INDEX {D}_multi_target_key ON {D} "
        "(recipient_id, channel, provider_target_id) "
        "WHERE provider_target_id IS NOT NULL AND replay_of_delivery_id IS NULL",
        *PARTITIONED_KEYS[D][7:10],
        f"CREATE INDEX {D}_inbox_idx ON {D} (recipient_id) "
        "WHERE channel = 'in_app' AND status = 'delivered'",
        *PARTITIONED_KEYS[D][11:],
    ],
    A: [
        f"ALTER TABLE {A} ADD CONSTRAINT {A}_pkey PRIMARY KEY (id)",
        f"ALTER TABLE {A} ADD CONSTRAINT {A}_delivery_id_fkey FOREIGN KEY (delivery_id) "
        f"REFERENCES {D} (id) ON DELETE CASCADE",
        PARTITIONED_KEYS[A][1],
    ],
}

# Every index of a table, renamed with a suffix (a constraint's index renames its constraint).
_RENAME_INDEXES = """
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
            WHERE x.indrelid = '{table}'::regclass LOOP
    EXECUTE 'ALTER INDEX ' || quote_ident(r.relname) || ' RENAME TO '
            || quote_ident(r.relname || '_{suffix}');
  END LOOP;
END $$
"""


# The same, to a name made of the index's oid (the down migration: out of the way, never too long).
_RENAME_INDEXES_AWAY = """
DO $$ DECLARE r record; BEGIN
  FOR r IN SELECT c.relname, c.oid FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid
            WHERE x.indrelid = '{table}'::regclass LOOP
    EXECUTE 'ALTER INDEX ' || quote_ident(r.relname) || ' RENAME TO '
            || quote_ident('herald_0021_' || r.oid);
  END LOOP;
END $$
"""


def _copy_identity(new: str, old: str) -> None:
    """The new table's id sequence continues where the old one stopped (LIKE … INCLUDING
    IDENTITY starts a new sequence at 1)."""
    op.execute(
        f"SELECT setval(pg_get_serial_sequence('{new}', 'id'), last_value, is_called) "
        f"FROM {old}_id_seq"
    )
    op.execute(f"GRANT SELECT, USAGE ON SEQUENCE {new}_id_seq TO {tenancy.APP_ROLE}")


def _first_month() -> partitions.Month:
    """The first monthly partition: this month on an empty database; on a populated one the
    month after its newest row's (the legacy partition keeps that month, rows written in it
    after the migration included)."""
    now, newest = (
        op.get_bind().exec_driver_sql(f"SELECT now(), (SELECT max(occurred_at) FROM {R})").one()
    )
    assert isinstance(now, datetime)
    first = partitions.Month.of(now.astimezone(UTC))
    if isinstance(newest, datetime):
        first = max(first, partitions.Month.of(newest).next())
    return first


def _rekey_legacy() -> None:
    """The old tables' keys as a month's: a primary key of (id, occurred_at), the keys between
    them on (…, occurred_at), and no unique key without the partition key (the attach builds the
    parent's)."""
    rd, ra = (partitions.name(t, partitions.LEGACY) for t in (D, A))
    rr = partitions.name(R, partitions.LEGACY)
    op.execute(f"ALTER TABLE {ra} DROP CONSTRAINT {A}_delivery_id_fkey")
    op.execute(f"ALTER TABLE {rd} DROP CONSTRAINT {D}_recipient_id_fkey")
    op.execute(f"ALTER TABLE {rr} DROP CONSTRAINT {R}_event_id_fkey")  # now (event, occurred_at)
    op.execute(f"ALTER TABLE {rd} DROP CONSTRAINT {D}_event_id_fkey")  # likewise
    op.execute(f"ALTER TABLE {rr} DROP CONSTRAINT {R}_public_id_key_legacy")
    op.execute(f"ALTER TABLE {rr} DROP CONSTRAINT {R}_event_user_key_legacy")
    op.execute(f"ALTER TABLE {rd} DROP CONSTRAINT {D}_public_id_key_legacy")
    op.execute(f"DROP INDEX {D}_single_target_key_legacy")
    op.execute(f"DROP INDEX {D}_inbox_idx_legacy")  # now (recipient_id, id): the attach builds it
    op.execute(f"DROP INDEX {D}_multi_target_key_legacy")
    for table in TABLES:
        legacy = partitions.name(table, partitions.LEGACY)
        op.execute(f"ALTER TABLE {legacy} DROP CONSTRAINT {table}_pkey_legacy")
        op.execute(
            f"ALTER TABLE {legacy} ADD CONSTRAINT {table}_pkey_legacy PRIMARY KEY (id, occurred_at)"
        )
    for child, (column, parent) in MONTH_KEYS.items():
        part, referenced = (partitions.name(t, partitions.LEGACY) for t in (child, parent))
        op.execute(
            f"ALTER TABLE {part} ADD CONSTRAINT {part}_{column}_fkey FOREIGN KEY "
            f"({column}, occurred_at) REFERENCES {referenced} (id, occurred_at) ON DELETE CASCADE"
        )


EVENT_KEY = "notification_event_id_occurred_at_key"


def upgrade() -> None:
    # A recipient's occurred_at is its event's (every writer copies it); made so where a row
    # drifted, then held by the composite key to the event below.
    op.execute(
        f"UPDATE {R} r SET occurred_at = e.occurred_at FROM notification_event e "
        "WHERE e.id = r.event_id AND r.occurred_at IS DISTINCT FROM e.occurred_at"
    )
    op.execute(
        f"ALTER TABLE notification_event ADD CONSTRAINT {EVENT_KEY} UNIQUE (id, occurred_at)"
    )
    first = _first_month()
    # The partition key on the two child tables, from their parent row.
    op.execute(f"ALTER TABLE {D} ADD COLUMN occurred_at timestamptz")
    # …and its event is its recipient's (every writer copies both); made so where one drifted,
    # then held by the delivery's composite key to the event.
    op.execute(
        f"UPDATE {D} d SET occurred_at = r.occurred_at, event_id = r.event_id FROM {R} r "
        "WHERE r.id = d.recipient_id"
    )
    op.execute(f"ALTER TABLE {D} ALTER COLUMN occurred_at SET NOT NULL")
    op.execute(f"ALTER TABLE {A} ADD COLUMN occurred_at timestamptz")
    op.execute(
        f"UPDATE {A} a SET occurred_at = d.occurred_at FROM {D} d WHERE d.id = a.delivery_id"
    )
    op.execute(f"ALTER TABLE {A} ALTER COLUMN occurred_at SET NOT NULL")

    for table in TABLES:
        legacy = partitions.name(table, partitions.LEGACY)
        op.execute(f"ALTER TABLE {table} RENAME TO {legacy}")
        op.execute(_RENAME_INDEXES.format(table=legacy, suffix=partitions.LEGACY))
        op.execute(f"ALTER SEQUENCE {table}_id_seq RENAME TO {legacy}_id_seq")

    _rekey_legacy()

    bind = op.get_bind()
    for table in TABLES:
        legacy = partitions.name(table, partitions.LEGACY)
        op.execute(
            f"CREATE TABLE {table} (LIKE {legacy} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING IDENTITY) PARTITION BY RANGE (occurred_at)"
        )
        _copy_identity(table, legacy)
        for statement in PARTITIONED_KEYS[table]:
            op.execute(statement)
        for statement in tenancy.protect(table):
            op.execute(statement)

    for table in reversed(TABLES):
        legacy = partitions.name(table, partitions.LEGACY)
        if bind.exec_driver_sql(f"SELECT NOT EXISTS (SELECT 1 FROM {legacy})").scalar_one():
            op.execute(f"DROP TABLE {legacy}")
            continue
        # PostgreSQL 17 and later refuse to attach a partition with an identity of its own; the
        # parent's sequence (continued above) numbers every new row.
        op.execute(f"ALTER TABLE {legacy} ALTER COLUMN id DROP IDENTITY")
    for table in TABLES:
        legacy = partitions.name(table, partitions.LEGACY)
        if bind.exec_driver_sql(f"SELECT to_regclass('{legacy}') IS NOT NULL").scalar_one():
            op.execute(
                f"ALTER TABLE {table} ATTACH PARTITION {legacy} "
                f"FOR VALUES FROM (MINVALUE) TO ('{first.start.isoformat(sep=' ')}')"
            )
            # The attach reused the matching indexes and built the rest under its own names.
            op.execute(partitions.rename_indexes_sql(legacy, partitions.LEGACY))
    partitions.ensure(bind, partitions.months_from(first, partitions.MONTHS_AHEAD + 1))
    # The months' attempt → delivery keys, which partitions.ensure made at this revision.
    for suffix in _suffixes(bind, A):
        if suffix != partitions.LEGACY:
            op.execute(_attempt_key(suffix))


def _suffixes(bind: Connection, table: str) -> list[str]:
    return [
        relation.removeprefix(f"{table}_")
        for relation in bind.exec_driver_sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            f"WHERE i.inhparent = '{table}'::regclass ORDER BY 1"
        ).scalars()
    ]


def _attempt_key(suffix: str) -> str:
    part, referenced = partitions.name(A, suffix), partitions.name(D, suffix)
    return (
        f'ALTER TABLE "{part}" ADD CONSTRAINT "{part}_delivery_id_fkey" '
        f'FOREIGN KEY (delivery_id, occurred_at) REFERENCES "{referenced}" (id, occurred_at) '
        "ON DELETE CASCADE"
    )


def downgrade() -> None:
    bind = op.get_bind()
    for table in TABLES:
        whole = f"{table}_partitioned"
        op.execute(f"ALTER TABLE {table} RENAME TO {whole}")
        op.execute(f"ALTER SEQUENCE {table}_id_seq RENAME TO {whole}_id_seq")
        # Index names are schema-wide: the parent's (and its partitions') give theirs up.
        for relation in bind.exec_driver_sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            f"WHERE i.inhparent = '{whole}'::regclass"
        ).scalars():
            op.execute(_RENAME_INDEXES_AWAY.format(table=relation))
        op.execute(_RENAME_INDEXES_AWAY.format(table=whole))
    for table in TABLES:
        whole = f"{table}_partitioned"
        op.execute(
            f"CREATE TABLE {table} (LIKE {whole} INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING IDENTITY)"
        )
        _copy_identity(table, whole)
        op.execute(f"INSERT INTO {table} OVERRIDING SYSTEM VALUE SELECT * FROM {whole}")
    for table in TABLES:
        for statement in PLAIN_KEYS[table]:
            op.execute(statement)
        for statement in tenancy.protect(table):
            op.execute(statement)
    for table in reversed(TABLES):
        op.execute(f"DROP TABLE {table}_partitioned CASCADE")
    op.execute(f"ALTER TABLE {A} DROP COLUMN occurred_at")
    op.execute(f"ALTER TABLE {D} DROP COLUMN occurred_at")
    op.execute(f"ALTER TABLE notification_event DROP CONSTRAINT {EVENT_KEY}")
