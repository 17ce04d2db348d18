"""Monthly partitions of the three write-time tables that grow with every send.

`notification_recipient`, `notification_delivery` and `notification_delivery_attempt` are
partitioned by RANGE of `occurred_at` (the event's, copied to each row), one partition per UTC
calendar month, so that retention drops a month in milliseconds instead of deleting it row by row
(docs/scaling.md, partitions). Beside the months:

- `<table>_default` (DEFAULT) takes a row no month holds: a month that was never created (the
  maintenance tick stopped for longer than it creates ahead) or one already dropped. Nothing is
  ever refused for want of a partition.
- `<table>_legacy` (FROM MINVALUE TO the first month), on a database that held rows when
  migration 0021 ran: the old table, attached as it was, aging out under the bounded deletes and
  dropped once empty.

A delivery lives in its recipient's month and an attempt in its delivery's, so each month's
foreign key runs between the month's own partitions (delivery → recipient, ON DELETE CASCADE as
before). A key on the parent would also hold, but detaching a month of a parent that another
parent references runs PostgreSQL's "is any row still referencing it" join over the whole
referencing table under an ACCESS EXCLUSIVE lock (385 ms for 500,000 rows on this machine,
growing with both tables); per-month keys make the month's DROP a catalog change.

An attempt has no foreign key to its delivery (migration 0023): its check was 3.8 µs of
PostgreSQL a delivery, 5 % of the delivery rate (docs/scaling.md, index maintenance). An attempt is written
only by the recorder's own statement, from the delivery rows that statement has just updated
(`record_outcomes`' `ended`), so it cannot name a delivery that does not exist; and the only
deletes of deliveries — retention's bounded deletes and its month drops — take their attempts
with them explicitly.

The partition's indexes are named after the parent's (`<parent index>_<suffix>`), so a plan
reads `notification_delivery_due_idx_p2026_12` and a test looking for the parent's index name
finds it. Every partition is under the same row-level security as its parent
(herald.db.tenancy.protect): the parent's policies govern every statement Herald runs, the
partition's govern anyone who addresses a partition by name.

The statements are built here as text and run by `ensure` (sync: the migration) and
`ensure_async` (the maintenance tick), so both create exactly the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.db import tenancy

RECIPIENT = "notification_recipient"
DELIVERY = "notification_delivery"
ATTEMPT = "notification_delivery_attempt"
# Parents before children: a month's foreign keys need the referenced partition first.
TABLES = (RECIPIENT, DELIVERY, ATTEMPT)
# child → (its columns, the parent table it references by (id, occurred_at)).
MONTH_KEYS = {DELIVERY: ("recipient_id", RECIPIENT)}
KEY = "occurred_at"
DEFAULT = "default"
LEGACY = "legacy"
# This month and the next MONTHS_AHEAD are created ahead by every maintenance tick.
MONTHS_AHEAD = 2
# DDL on a partitioned table waits for the readers of the parent. The tick gives up after this,
# before PostgreSQL's deadlock check (deadlock_timeout, 1 s) could pick a reader as the victim,
# and tries again at the next tick.
LOCK_TIMEOUT = "500ms"
# Serialises partition DDL between a migration, ticks on several nodes and retention's drops.
ADVISORY_KEY = 0x48455244  # "HERD"
_MONTH_NAME = re.compile(r"_p(\d{4})_(\d{2})$")


@dataclass(frozen=True, order=True)
class Month:
    """A UTC calendar month: [start, end)."""

    year: int
    month: int

    @classmethod
    def of(cls, moment: datetime) -> Month:
        moment = moment.astimezone(UTC)
        return cls(moment.year, moment.month)

    @property
    def suffix(self) -> str:
        return f"p{self.year:04d}_{self.month:02d}"

    @property
    def start(self) -> datetime:
        return datetime(self.year, self.month, 1, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        return self.next().start

    def next(self) -> Month:
        return Month(self.year + self.month // 12, self.month % 12 + 1)

    def previous(self) -> Month:
        first = date(self.year, self.month, 1) - timedelta(days=1)
        return Month(first.year, first.month)


def name(table: str, suffix: str) -> str:
    return f"{table}_{suffix}"


def month_of(partition: str) -> Month | None:
    """The month a partition name holds, None for the default and legacy partitions."""
    found = _MONTH_NAME.search(partition)
    return Month(int(found[1]), int(found[2])) if found else None


def months_from(first: Month, count: int) -> list[Month]:
    months = [first]
    while len(months) < count:
        months.append(months[-1].next())
    return months


def ahead(now: datetime) -> list[Month]:
    """The months the maintenance tick keeps created: this one and MONTHS_AHEAD more."""
    return months_from(Month.of(now), MONTHS_AHEAD + 1)


def _bound(moment: datetime) -> str:
    return f"'{moment.isoformat(sep=' ')}'"


def rename_indexes_sql(part: str, suffix: str) -> str:
    """Each of a partition's indexes named after its parent index plus the suffix (<= 63 bytes:
    asserted by the tests), instead of PostgreSQL's names from the columns."""
    return (
        "DO $$ DECLARE r record; BEGIN "
        "FOR r IN SELECT c.relname AS child, p.relname AS parent "
        "FROM pg_index x JOIN pg_class c ON c.oid = x.indexrelid "
        "JOIN pg_inherits i ON i.inhrelid = c.oid JOIN pg_class p ON p.oid = i.inhparent "
        f"WHERE x.indrelid = '\"{part}\"'::regclass AND c.relname <> p.relname || '_{suffix}' "
        "LOOP EXECUTE 'ALTER INDEX ' || quote_ident(r.child) || ' RENAME TO ' "
        f"|| quote_ident(r.parent || '_{suffix}'); "
        "END LOOP; END $$"
    )


def create_sql(table: str, suffix: str, month: Month | None, *, protect: bool) -> list[str]:
    """One partition of `table`: the partition, its indexes renamed after the parent's, its
    month's foreign key, and (when `protect`) row-level security."""
    part = name(table, suffix)
    values = "DEFAULT" if month is None else (
        f"FOR VALUES FROM ({_bound(month.start)}) TO ({_bound(month.end)})"
    )  # fmt: skip
    statements = [
        f'CREATE TABLE "{part}" PARTITION OF "{table}" {values}',
        rename_indexes_sql(part, suffix),
    ]
    if table in MONTH_KEYS:
        column, referenced = MONTH_KEYS[table]
        statements.append(
            f'ALTER TABLE "{part}" ADD CONSTRAINT "{part}_{column}_fkey" '
            f"FOREIGN KEY ({column}, {KEY}) "
            f'REFERENCES "{name(referenced, suffix)}" (id, {KEY}) ON DELETE CASCADE'
        )
    if protect:
        statements += tenancy.protect(part)
    # Statistics of an empty table, so the planner knows it is empty: never analyzed, it would
    # be assumed ten pages long (and autovacuum never analyzes a table nothing was written to),
    # enough to prefer a Sort over an ordered walk of the month that does hold the rows.
    statements.append(f'ANALYZE "{part}"')
    return statements


def plan(existing: Iterable[str], months: Sequence[Month], *, protect: bool) -> list[str]:
    """What creates every missing partition among the default and `months`, parents first."""
    have = set(existing)
    statements: list[str] = []
    for table in TABLES:
        for suffix, month in [(DEFAULT, None), *((m.suffix, m) for m in months)]:
            if name(table, suffix) not in have:
                statements += create_sql(table, suffix, month, protect=protect)
    return statements


_EXISTING = text(
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent IN (SELECT to_regclass(t) FROM unnest(CAST(:tables AS text[])) t)"
)
# The legacy partition's upper bound (a populated database's first month), if there is one.
_LEGACY_END = text(
    "SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \\(''([^'']+)''\\)') "
    "FROM pg_class c WHERE c.oid = to_regclass(:legacy)"
)
_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
_LOCK_TIMEOUT = text(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")


def ensure(conn: Connection, months: Sequence[Month], *, protect: bool = True) -> list[str]:
    """Create the missing partitions (sync: the migration and the schema test). Returns the
    statements run. The caller owns the transaction."""
    conn.execute(_LOCK, {"key": ADVISORY_KEY})
    existing = conn.execute(_EXISTING, {"tables": list(TABLES)}).scalars().all()
    statements = plan(existing, months, protect=protect)
    for statement in statements:
        conn.exec_driver_sql(statement)
    return statements


def _in_default_sql(month: Month) -> str:
    """Whether any default partition holds a row of `month` (then the month cannot be created:
    PostgreSQL refuses a partition whose rows the default already holds)."""
    probes = " OR ".join(
        f'EXISTS (SELECT 1 FROM "{name(table, DEFAULT)}" WHERE {KEY} >= {_bound(month.start)} '
        f"AND {KEY} < {_bound(month.end)})"
        for table in TABLES
    )
    return f"SELECT {probes}"


@dataclass
class Ensured:
    statements: list[str]
    # Months left uncreated because the default partition already holds some of their rows:
    # they stay in the default (kept and aged by the bounded deletes), and the tick says so.
    blocked: list[Month]


async def ensure_async(conn: AsyncConnection, now: datetime) -> Ensured:
    """The maintenance tick's step: create this month and the next MONTHS_AHEAD (and the
    default) where missing, under a lock timeout. The caller owns the transaction."""
    await _lock_for_ddl(conn)
    existing = set((await conn.execute(_EXISTING, {"tables": list(TABLES)})).scalars().all())
    months: list[Month] = []
    blocked: list[Month] = []
    has_default = all(name(t, DEFAULT) in existing for t in TABLES)
    legacy_end = (
        await conn.execute(_LEGACY_END, {"legacy": name(RECIPIENT, LEGACY)})
    ).scalar_one_or_none()
    for month in ahead(now):
        if all(name(t, month.suffix) in existing for t in TABLES):
            continue
        if legacy_end is not None and month.start < datetime.fromisoformat(legacy_end):
            continue  # the legacy partition holds this month
        if has_default and (await conn.execute(text(_in_default_sql(month)))).scalar():
            blocked.append(month)
        else:
            months.append(month)
    statements = plan(existing, months, protect=True)
    for statement in statements:
        await conn.exec_driver_sql(statement)
    return Ensured(statements, blocked)


# ---------------------------------------------------------------------------------------------
# Retention by month (herald.maintenance.retention).

_NOW_AND_MONTHS = text(
    "SELECT now() AS now, array_agg(c.relname ORDER BY c.relname) AS partitions "
    "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent IN (SELECT to_regclass(t) FROM unnest(CAST(:tables AS text[])) t) "
    "AND c.relkind = 'r'"
)


@dataclass(frozen=True)
class Window:
    """A stretch [after, before) of occurred_at (after None: from the beginning) and, for each of
    the three tables, the one partition that holds it."""

    after: datetime | None
    before: datetime
    parts: dict[str, str]


@dataclass(frozen=True)
class Layout:
    """The database's clock and the three tables' partitions, read once per retention run."""

    now: datetime
    months: list[Month]
    legacy: bool
    names: frozenset[str] = frozenset()

    def aged_before(self, days: int) -> datetime:
        """Where the bounded deletes stop: the retention cutoff, or the start of the cutoff's
        month when that month is a partition of its own. A month partition is dropped whole once
        all of it has aged; deleting its first weeks row by row meanwhile would be the very work
        the partition exists to save. So a row lives between `days` and `days` plus one month."""
        cutoff = self.now - timedelta(days=days)
        month = Month.of(cutoff)
        return month.start if month in self.months else cutoff

    def windows(self, before: datetime) -> list[Window]:
        """The stretches of occurred_at up to `before`, oldest first, each held by one partition
        of each table: a month; a stretch between months, or before the first, that no month
        holds (the default partition); everything before the first month on a migrated database
        (a table's legacy partition, where it has one). A statement naming that partition reads
        it alone, with its own statistics, as the unpartitioned table was read."""
        points = sorted({p for m in self.months for p in (m.start, m.end) if p < before} | {before})
        months = {m.start: m for m in self.months}
        windows = []
        for after, end in zip([None, *points[:-1]], points, strict=True):
            month = months.get(after) if after is not None else None
            parts = {}
            for table in TABLES:
                if month is not None and month.end == end:
                    parts[table] = name(table, month.suffix)
                elif after is None and name(table, LEGACY) in self.names:
                    parts[table] = name(table, LEGACY)
                else:
                    parts[table] = name(table, DEFAULT)
            windows.append(Window(after, end, parts))
        return windows


async def layout(conn: AsyncConnection) -> Layout:
    row = (await conn.execute(_NOW_AND_MONTHS, {"tables": list(TABLES)})).one()
    names = frozenset(row.partitions or [])
    months = sorted(
        {m for n in names if n.startswith(RECIPIENT + "_p") for m in [month_of(n)] if m}
    )
    return Layout(now=row.now, months=months, legacy=name(RECIPIENT, LEGACY) in names, names=names)


# A month whose kept rows are more than this many deliveries is left to the bounded deletes
# rather than copied out under the drop's locks (an outage month of unreplayed dead letters).
MOVE_LIMIT = 50_000


def _kept_sql(month: Month) -> str:
    """The month's events retention must keep (R-RETENTION-3, R-RETENTION-4, R-RETENTION-7):
    an unfinished fan-out (it may still write rows into the month), a delivery queued,
    processing or failed, a delivery named by an unreplayed dead letter (matched as
    delete_aged_deliveries matches it)."""
    deliveries = name(DELIVERY, month.suffix)
    return (
        "SELECT e.id FROM notification_event e "
        f"WHERE e.occurred_at >= {_bound(month.start)} AND e.occurred_at < {_bound(month.end)} "
        "AND e.fanout_completed_at IS NULL AND e.cancelled_at IS NULL "
        f'UNION SELECT d.event_id FROM "{deliveries}" d '
        "WHERE d.status = ANY(CAST(:in_flight AS text[])) "
        f'UNION SELECT d.event_id FROM "{deliveries}" d WHERE d.public_id IN ('
        "SELECT CAST(dl.payload_ref ->> 'notificationDeliveryPublicId' AS uuid) FROM dead_letter dl "
        "WHERE dl.replayed_at IS NULL "
        "AND (dl.payload_ref ->> 'notificationDeliveryPublicId') ~* :uuid_pattern)"
    )


def _lock_sql(parts: Sequence[str]) -> str:
    # The parents first, ONLY (not their other months), then the month's own tables: the order
    # every statement through a parent takes its locks in, so the drop does not deadlock a reader.
    parents = ", ".join(f'ONLY "{t}"' for t in TABLES)
    months = ", ".join(f'"{p}"' for p in parts)
    return f"LOCK TABLE {parents}, {months} IN ACCESS EXCLUSIVE MODE"


async def _lock_for_ddl(conn: AsyncConnection, parts: Sequence[str] = ()) -> None:
    """The preamble of every partition change the tick makes: the partitions' advisory lock (one
    change at a time, across processes), LOCK_TIMEOUT for every lock after it, and — for a drop —
    the parents and `parts` in ACCESS EXCLUSIVE mode (`_lock_sql`'s order)."""
    await conn.execute(_LOCK, {"key": ADVISORY_KEY})
    await conn.execute(_LOCK_TIMEOUT)
    if parts:
        await conn.exec_driver_sql(_lock_sql(parts))


@dataclass(frozen=True)
class MonthDrop:
    dropped: bool
    # Events whose rows were kept: copied into the default partition before the drop.
    kept_events: int = 0


async def drop_month(
    conn: AsyncConnection, month: Month, *, in_flight: Sequence[str], uuid_pattern: str
) -> MonthDrop:
    """Drop `month`'s three partitions (attempts, deliveries, recipients) whole. The events
    retention must keep (`_kept_sql`) are first copied, every row as it was, into the default
    partitions: the month is detached, so its range has no partition and the parent routes them
    there, where the bounded deletes age them once they may go. It all runs under the locks the
    drop takes, so no replay, recorder or late fan-out writes into the month between the check
    and the drop. Not dropped (the bounded deletes take the month instead) when the kept rows
    exceed MOVE_LIMIT deliveries. A lock not granted within LOCK_TIMEOUT raises (the tick tries
    again next time). The caller owns the transaction."""
    parts = [name(t, month.suffix) for t in reversed(TABLES)]
    await _lock_for_ddl(conn, parts)
    params = {"in_flight": list(in_flight), "uuid_pattern": uuid_pattern}
    kept = list((await conn.execute(text(_kept_sql(month)), params)).scalars())
    if kept:
        deliveries = name(DELIVERY, month.suffix)
        count = (
            await conn.execute(
                text(
                    f'SELECT count(*) FROM (SELECT 1 FROM "{deliveries}" '
                    "WHERE event_id = ANY(CAST(:kept AS bigint[])) LIMIT :cap) c"
                ),
                {"kept": kept, "cap": MOVE_LIMIT + 1},
            )
        ).scalar_one()
        if count > MOVE_LIMIT:
            return MonthDrop(dropped=False, kept_events=len(kept))
        for table in TABLES:
            await conn.exec_driver_sql(
                f'ALTER TABLE "{table}" DETACH PARTITION "{name(table, month.suffix)}"'
            )
        # Parents before children: the default partitions' own keys check each copied row.
        r, d, a = (f'"{name(t, month.suffix)}"' for t in TABLES)
        copies = (
            f"INSERT INTO {RECIPIENT} SELECT * FROM {r} WHERE event_id = ANY(CAST(:kept AS bigint[]))",
            f"INSERT INTO {DELIVERY} SELECT * FROM {d} WHERE event_id = ANY(CAST(:kept AS bigint[]))",
            f"INSERT INTO {ATTEMPT} SELECT a.* FROM {a} a JOIN {d} d ON d.id = a.delivery_id "
            "WHERE d.event_id = ANY(CAST(:kept AS bigint[]))",
        )  # fmt: skip
        for copy in copies:
            await conn.execute(text(copy), {"kept": kept})
    await conn.exec_driver_sql("DROP TABLE " + ", ".join(f'"{p}"' for p in parts))
    return MonthDrop(dropped=True, kept_events=len(kept))


async def drop_legacy_if_empty(conn: AsyncConnection) -> bool:
    """Drop the legacy partitions once the bounded deletes have emptied them (the migration
    attached only the tables that held rows)."""
    wanted = [name(t, LEGACY) for t in reversed(TABLES)]
    found = set(
        (
            await conn.execute(
                text(
                    "SELECT t FROM unnest(CAST(:names AS text[])) t WHERE to_regclass(t) IS NOT NULL"
                ),
                {"names": wanted},
            )
        ).scalars()
    )
    parts = [p for p in wanted if p in found]
    if not parts:
        return False
    await _lock_for_ddl(conn, parts)
    probes = " AND ".join(f'NOT EXISTS (SELECT 1 FROM "{p}")' for p in parts)
    if not (await conn.exec_driver_sql(f"SELECT {probes}")).scalar_one():
        return False
    await conn.exec_driver_sql("DROP TABLE " + ", ".join(f'"{p}"' for p in parts))
    return True
