"""Tenants kept apart by PostgreSQL itself: row-level security on every tenant table.

Every table with a `tenant_id` has RLS enabled and forced, with one policy for the role
`herald_app` (NOLOGIN, no BYPASSRLS): a row is visible and writable only while the transaction's
`herald.tenant_id` setting names its tenant. API requests and per-tenant worker work run
`SET LOCAL ROLE herald_app` and `SET LOCAL herald.tenant_id` (both transaction-scoped, so a
pooled connection never carries one tenant to the next); with no tenant set, herald_app sees
nothing at all.

The connecting user (the schema owner) keeps a policy of its own that sees every row: it is what
the small, named cross-tenant code runs as — claiming due work by id, the maintenance sweeps,
authentication by key hash — and what a host's own `send()` runs as, inside the host's
transaction. FORCE makes even the owner go through a policy, so the owner's access is a written
rule rather than an implicit bypass.

Migrations call `protect()` for each new tenant table; a test fails when a table carrying
`tenant_id` is not protected.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import ColumnElement, func, literal_column, text, true
from sqlalchemy.ext.asyncio import AsyncConnection

from herald.errors import ConfigurationError

APP_ROLE = "herald_app"
TENANT_SETTING = "herald.tenant_id"
TENANT_POLICY = "herald_tenant_isolation"
OWNER_POLICY = "herald_owner_all_tenants"

# The tenant of the current transaction; NULL (no row matches) when none was set.
_CURRENT_TENANT = f"current_setting('{TENANT_SETTING}', true)"

# Tables whose rows belong to a tenant only through a parent row (no tenant_id column of their
# own): visible to herald_app exactly when the parent is.
PARENT_SCOPED = {
    "feed_notification_read": "EXISTS (SELECT 1 FROM feed_notification f "
    "WHERE f.id = feed_notification_read.notification_id)",
    # A receipt kept until its send is recorded (herald.receipts): the tenant's once one of its
    # deliveries carries the message id, nobody's before (only the owner's cross-tenant code).
    "pending_receipt": "EXISTS (SELECT 1 FROM notification_delivery d "
    "WHERE d.provider_message_id = pending_receipt.provider_message_id "
    "AND d.channel = pending_receipt.channel)",
}


class RoleSetupRefused(ConfigurationError):
    """The migrating user may not create the herald_app role or join it."""

    code = "DATABASE_ROLE_SETUP_REFUSED"


def role_sql(user: str) -> list[str]:
    """What a database administrator runs when the migrating user may not create roles."""
    return [f"CREATE ROLE {APP_ROLE} NOLOGIN", f'GRANT {APP_ROLE} TO "{user}"']


def protect(table: str, *, rule: str | None = None) -> list[str]:
    """The statements that put `table` under row-level security (idempotent apart from the
    policies, which a migration creates once). `rule` replaces the tenant_id comparison."""
    condition = rule or f"tenant_id = {_CURRENT_TENANT}"
    return [
        f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO {APP_ROLE}',
        f'ALTER TABLE "{table}" ENABLE ROW LEVEL SECURITY',
        f'ALTER TABLE "{table}" FORCE ROW LEVEL SECURITY',
        f'CREATE POLICY {TENANT_POLICY} ON "{table}" TO {APP_ROLE} '
        f"USING ({condition}) WITH CHECK ({condition})",
        f'CREATE POLICY {OWNER_POLICY} ON "{table}" TO CURRENT_USER USING (true) WITH CHECK (true)',
    ]


def unprotect(table: str) -> list[str]:
    return [
        f'DROP POLICY IF EXISTS {OWNER_POLICY} ON "{table}"',
        f'DROP POLICY IF EXISTS {TENANT_POLICY} ON "{table}"',
        f'ALTER TABLE "{table}" NO FORCE ROW LEVEL SECURITY',
        f'ALTER TABLE "{table}" DISABLE ROW LEVEL SECURITY',
        f'REVOKE ALL ON "{table}" FROM {APP_ROLE}',
    ]


async def enter_tenant(
    conn: AsyncConnection, tenant_id: str, *, generic_plans: bool = False
) -> None:
    """From here to the end of the transaction: role herald_app, tenant `tenant_id`. One round
    trip; `set_config(..., true)` is SET LOCAL. Calling it again switches the tenant.
    `generic_plans`: the same round trip also sets QUEUE_PLANNER_SETTINGS (plan_generically)."""
    await conn.execute(_ENTER_GENERIC if generic_plans else _ENTER, {"tenant": tenant_id})


# The delivery queue's statements (the claim, the send contexts, the recorder's write, the lease
# renewal) under their generic plans, always. Each is written for its generic plan — the claim's
# `status = 'queued'` literal and `= ANY(ARRAY(…))`, the send contexts' and the recorder's probes
# by primary key within the batch's months — and tests/integration/test_plans_claim.py asserts
# those plans. Left to PostgreSQL's choice, the server kept re-planning: a custom plan, pruned to
# the months its values name, always looks cheaper than the generic plan over every month, so
# after psycopg prepared the claim the server still planned it on every execution (150 custom
# plans of 150 claims, pg_prepared_statements), and planning a statement over ten month
# partitions costs more than running it: 6.3-7.1 ms of server CPU a claim of 100, against
# 3.4-3.9 ms under the generic plan (docs/scaling.md, generic plans). Transaction-local, like the tenant:
# the fan-out's audience pages, which want a custom plan for their values (compiled.unprepared),
# never run under it.
QUEUE_PLANNER_SETTINGS = (("plan_cache_mode", "force_generic_plan"),)

_GENERIC = ", ".join(
    f"set_config('{name}', '{value}', true)" for name, value in QUEUE_PLANNER_SETTINGS
)
_PLAN_GENERICALLY = text(f"SELECT {_GENERIC}")


async def plan_generically(conn: AsyncConnection) -> None:
    """QUEUE_PLANNER_SETTINGS from here to the end of the transaction (one round trip)."""
    await conn.execute(_PLAN_GENERICALLY)


# Planner settings of a request that reads a person's inbox (SET LOCAL, like the tenant). A
# generic plan (psycopg prepares a statement after five executions) estimates `user_id = $1` from
# the average person; when the average inbox is shorter than a page, a bitmap scan of the
# person's rows plus a Sort looks cheapest, which for a person with thousands of rows reads and
# sorts them all. Without bitmap scans the plan walks notification_recipient_centre_idx in order
# and stops at the page, whatever the estimate (tests/integration/test_plans_inbox.py).
# Sorts are off for the same reason since the inbox is partitioned by month (0021): the months'
# index walks are merged in the page's order (Merge Append), and under a generic estimate of one
# row a month, gathering the person's rows from every month and sorting them looks as cheap; for
# a person with thousands of rows it reads them all. No statement of an end user's request needs
# a sort an index cannot give (the content probe reads notification_delivery_inbox_idx, which
# ends in the id it orders by; a device list, the one other ORDER BY, sorts a capped handful
# either way: with no index in its order a disabled sort is still the plan).
#
# And the plan is the generic one, always: planning a statement over every month costs ~3 ms
# (2.86 ms for the first page over ten partitions, 1 ms to run it), and PostgreSQL's choice
# between a generic and a custom plan keeps re-planning when the custom plan, pruned to the
# months its values name, looks cheaper. The generic plan is the one the plan tests assert.
INBOX_PLANNER_SETTINGS = (
    ("enable_bitmapscan", "off"),
    ("enable_sort", "off"),
    ("plan_cache_mode", "force_generic_plan"),
)


# Planner settings of a read that pages one person's history in an index's order, from a request
# other than the inbox's (the admin list of a person's deliveries, tests/integration/
# test_plans_history.py). The inbox's reason holds: an estimate of `user_id = $1` is the average
# person's, under which gathering the person's rows from every month (bitmap scans) and sorting
# them looks as cheap as merging the months' index walks, and for a person with a million
# deliveries it reads and sorts them all. And no JIT: the join to the recipient on its two-column
# key (id, occurred_at) is estimated at a few dozen rows of the person's million, so in a custom
# plan the LIMIT looks like most of a 300,000-cost walk, past jit_above_cost; compiling the plan
# took 80 ms at 300,000 rows and 1.4 s at 1,000,000 for a page that runs in a millisecond
# (bench/person_reads.py). Held only around that statement (in_index_order).
INDEX_ORDER_PLANNER_SETTINGS = (
    ("enable_bitmapscan", "off"),
    ("enable_sort", "off"),
    ("jit", "off"),
)

_INDEX_ORDER_ON = text(
    "SELECT "
    + ", ".join(
        f"current_setting('{name}'), set_config('{name}', '{value}', true)"
        for name, value in INDEX_ORDER_PLANNER_SETTINGS
    )
)
_INDEX_ORDER_OFF = text(
    "SELECT "
    + ", ".join(f"set_config('{name}', :{name}, true)" for name, _ in INDEX_ORDER_PLANNER_SETTINGS)
)


@asynccontextmanager
async def in_index_order(conn: AsyncConnection) -> AsyncIterator[None]:
    """INDEX_ORDER_PLANNER_SETTINGS for the statements inside the block (one round trip each
    way), the transaction's own values put back after it, so the statements after the block
    plan as they would have. Not on an error: the transaction is then rolled back, and SET
    LOCAL with it (a statement in a failed transaction would only hide the error)."""
    row = (await conn.execute(_INDEX_ORDER_ON)).one()
    before = {name: row[2 * i] for i, (name, _) in enumerate(INDEX_ORDER_PLANNER_SETTINGS)}
    yield
    await conn.execute(_INDEX_ORDER_OFF, before)


def enter_columns(
    tenant: ColumnElement[Any], settings: Sequence[tuple[str, str]] = ()
) -> list[ColumnElement[Any]]:
    """enter_tenant's two set_config calls as select-list columns, for a statement that enters
    the tenant on its way (saving the round trip of a statement of its own). They take effect for
    the statements after it, never for the statement itself: its row-level security was decided
    when it was planned."""
    return [
        func.set_config(literal_column("'role'"), literal_column(f"'{APP_ROLE}'"), true()).label(
            "entered_role"
        ),
        func.set_config(literal_column(f"'{TENANT_SETTING}'"), tenant, true()).label(
            "entered_tenant"
        ),
        *(
            func.set_config(literal_column(f"'{name}'"), literal_column(f"'{value}'"), true())
            for name, value in settings
        ),
    ]


_ENTER = text(
    f"SELECT set_config('role', '{APP_ROLE}', true), set_config('{TENANT_SETTING}', :tenant, true)"
)
_ENTER_GENERIC = text(
    f"SELECT set_config('role', '{APP_ROLE}', true), "
    f"set_config('{TENANT_SETTING}', :tenant, true), {_GENERIC}"
)


def tenant_tables_sql() -> str:
    """Every table of the current schema with a tenant_id column."""
    return (
        "SELECT table_name FROM information_schema.columns "
        "WHERE table_schema = current_schema() AND column_name = 'tenant_id' "
        "AND table_name IN (SELECT table_name FROM information_schema.tables "
        "WHERE table_schema = current_schema() AND table_type = 'BASE TABLE') ORDER BY 1"
    )


def protected_tables(names: Sequence[str]) -> list[str]:
    return sorted({*names, *PARENT_SCOPED})
