"""EXPLAIN plans read in parent-table terms: a partition's relation and index names carry the
month (`notification_delivery_p2026_12`, `notification_delivery_due_idx_p2026_12`, …_default,
…_legacy: herald.db.partitions), which a plan test names by the parent's."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from typing import Any

import psycopg
from psycopg import sql

_PARTITION = re.compile(r"_(p\d{4}_\d{2}|default|legacy)$")


def parent_name(name: str) -> str:
    return _PARTITION.sub("", name)


def by_parent(plan: Any, empty: Collection[str] = ()) -> Any:
    """The plan (a node, or a list of them) with every partition named by its parent, in place.
    A scan of a partition in `empty` (see empty_partitions) is marked "Empty Partition": what it
    reads costs nothing whatever the node, so a test asserting how rows are reached skips it."""
    if isinstance(plan, list):
        for node in plan:
            by_parent(node, empty)
        return plan
    if plan.get("Relation Name") in empty:
        plan["Empty Partition"] = True
    relation = plan.get("Relation Name")
    if isinstance(relation, str) and parent_name(relation) != relation:
        plan["Partition"] = relation
    if isinstance(relation, str) and parent_name(relation) != relation and "Alias" in plan:
        plan["Alias"] = re.sub(r"_\d+$", "", plan["Alias"])  # d_1, d_2, …: the parent's d
    for key in ("Relation Name", "Index Name"):
        if isinstance(plan.get(key), str):
            plan[key] = parent_name(plan[key])
    if "Plan" in plan:
        by_parent(plan["Plan"], empty)
    for child in plan.get("Plans", []):
        by_parent(child, empty)
    return plan


def empty_partitions(conn: psycopg.Connection[Any]) -> set[str]:
    """The partitions of Herald's partitioned tables that hold no row."""
    names = [
        row[0]
        for row in conn.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE c.relkind = 'r' AND i.inhparent::regclass::text = ANY(%s)",
            (["notification_recipient", "notification_delivery", "notification_delivery_attempt"],),
            prepare=False,
        )
    ]
    return {
        name
        for name in names
        if not conn.execute(f'SELECT EXISTS (SELECT 1 FROM "{name}")', prepare=False).fetchone()[0]  # type: ignore[index]
    }


def generic_plans_as_app(
    conn: psycopg.Connection[Any], tenant: str, analyse: Sequence[str]
) -> None:
    """Commits what the test seeded, ANALYZEs `analyse` so the planner sees its numbers, and
    leaves `conn` as herald_app under `tenant` (row-level security on, as the API runs) with
    every statement planned generically, as a prepared one is after a few executions."""
    conn.commit()
    conn.autocommit = True
    for table in analyse:
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))
    conn.autocommit = False
    conn.execute(
        "SELECT set_config('role', 'herald_app', false), set_config('herald.tenant_id', %s, false)",
        (tenant,),
    )
    conn.execute("SET plan_cache_mode = force_generic_plan")
