"""Follow-ups (issue 10, DESIGN.md §5.2, seed 004) and the API key scope followups:write.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-02 09:00:00.000000

The table is under forced row-level security from its first statement (herald.db.tenancy).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from herald.db import tenancy

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The api_key scopes CHECK as 0009 left it, and with followups:write (vocabulary order).
_SCOPES_BEFORE = [
    "events:write",
    "events:read",
    "directory:write",
    "secrets:write",
    "feed:write",
    "admin",
    "metrics:read",
]
_SCOPES_AFTER = [*_SCOPES_BEFORE[:5], "followups:write", *_SCOPES_BEFORE[5:]]


def _scopes_check(scopes: list[str]) -> str:
    listed = ", ".join(f"'{s}'" for s in [*scopes, "*"])
    return f"scopes <@ ARRAY[{listed}]::text[]"


def upgrade() -> None:
    op.drop_constraint(op.f("api_key_scopes_check"), "api_key", type_="check")
    op.create_check_constraint(
        op.f("api_key_scopes_check"), "api_key", _scopes_check(_SCOPES_AFTER)
    )
    op.create_table(
        "followup",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("reminder_kind", sa.Text(), nullable=False),
        sa.Column("audience", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "variables",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("grace_seconds", sa.Integer(), nullable=False),
        sa.Column("reminder_delay_seconds", sa.Integer(), nullable=False),
        sa.Column("state", sa.Text(), nullable=False),
        sa.Column("cycle", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("arm_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("notified_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("escalate_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("reminded_at", postgresql.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("notify_event_id", sa.UUID(), nullable=True),
        sa.Column("reminder_event_id", sa.UUID(), nullable=True),
        sa.Column(
            "created_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            postgresql.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "state IN ('armed', 'notified', 'follow_up', 'acknowledged', 'not_required')",
            name=op.f("followup_state_check"),
        ),
        sa.CheckConstraint(
            "audience->>'kind' IN ('users', 'role', 'group', 'guardians_of_group', "
            "'guardians_of_users', 'all_users', 'segment', 'compound')",
            name=op.f("followup_audience_kind_check"),
        ),
        sa.CheckConstraint(
            "jsonb_typeof(variables) = 'object'", name=op.f("followup_variables_object_check")
        ),
        sa.CheckConstraint(
            "btrim(key) <> '' AND length(key) <= 200", name=op.f("followup_key_shape_check")
        ),
        sa.CheckConstraint(
            "grace_seconds >= 0 AND reminder_delay_seconds >= 0",
            name=op.f("followup_delays_not_negative_check"),
        ),
        sa.CheckConstraint("cycle >= 1", name=op.f("followup_cycle_positive_check")),
        sa.CheckConstraint(
            "state <> 'armed' OR arm_at IS NOT NULL", name=op.f("followup_armed_has_arm_at_check")
        ),
        sa.CheckConstraint(
            "state <> 'notified' OR (notified_at IS NOT NULL AND escalate_at IS NOT NULL)",
            name=op.f("followup_notified_has_escalate_at_check"),
        ),
        sa.CheckConstraint(
            "state <> 'follow_up' OR reminded_at IS NOT NULL",
            name=op.f("followup_follow_up_reminded_check"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("followup_pkey")),
        sa.UniqueConstraint("tenant_id", "key", name=op.f("followup_tenant_id_key_key")),
    )
    op.create_index(
        "followup_notify_due_idx", "followup", ["tenant_id", "state", "arm_at"], unique=False
    )
    op.create_index(
        "followup_remind_due_idx", "followup", ["tenant_id", "state", "escalate_at"], unique=False
    )
    op.create_index("followup_updated_at_idx", "followup", ["updated_at"], unique=False)
    for statement in tenancy.protect("followup"):
        op.execute(statement)


def downgrade() -> None:
    for statement in tenancy.unprotect("followup"):
        op.execute(statement)
    op.drop_index("followup_updated_at_idx", table_name="followup")
    op.drop_index("followup_remind_due_idx", table_name="followup")
    op.drop_index("followup_notify_due_idx", table_name="followup")
    op.drop_table("followup")
    # Keys keep their other scopes; only the one this revision introduced goes.
    op.execute("UPDATE api_key SET scopes = array_remove(scopes, 'followups:write')")
    op.drop_constraint(op.f("api_key_scopes_check"), "api_key", type_="check")
    op.create_check_constraint(
        op.f("api_key_scopes_check"), "api_key", _scopes_check(_SCOPES_BEFORE)
    )
