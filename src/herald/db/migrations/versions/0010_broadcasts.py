"""Broadcasts: the broadcast table, an event's frozen audience, and a cut-short fan-out

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01 15:00:00.000000

- `broadcast` (issue 11, DESIGN.md §5.2), under row-level security, with the CHECK that refuses
  a row approved by its creator (R-BCAST-5) and one that refuses an approver who is not a person.
- `notification_event.audience_frozen_at`: the fan-out leaves out people created after it
  (R-BCAST-8).
- `notification_event_cancelled_before_fanout_check` also admits an event whose fan-out was cut
  short and completed in the same statement (a broadcast cancelled while sending).
- `audit_record_action_check` gains approve, release and complete.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from herald.db import tenancy

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHANNELS = "ARRAY['in_app', 'email', 'sms', 'push', 'telegram']::text[]"
_AUDIENCE_KINDS = (
    "('users', 'role', 'group', 'guardians_of_group', 'guardians_of_users', 'all_users', "
    "'segment', 'compound')"
)
_ACTIONS_BEFORE = (
    "('create', 'update', 'delete', 'publish', 'archive', 'restore', 'replay', 'cancel', 'erase')"
)
_ACTIONS_AFTER = (
    "('create', 'update', 'delete', 'publish', 'archive', 'restore', 'replay', 'cancel', 'erase', "
    "'approve', 'release', 'complete')"
)


def upgrade() -> None:
    op.add_column(
        "notification_event",
        sa.Column("audience_frozen_at", sa.TIMESTAMP(timezone=True), nullable=True),
    )
    op.drop_constraint(
        op.f("notification_event_cancelled_before_fanout_check"),
        "notification_event",
        type_="check",
    )
    op.create_check_constraint(
        op.f("notification_event_cancelled_before_fanout_check"),
        "notification_event",
        "cancelled_at IS NULL OR fanout_claimed_at IS NULL OR fanout_completed_at IS NOT NULL",
    )
    op.drop_constraint(op.f("audit_record_action_check"), "audit_record", type_="check")
    op.create_check_constraint(
        op.f("audit_record_action_check"), "audit_record", f"action IN {_ACTIONS_AFTER}"
    )
    op.create_table(
        "broadcast",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column(
            "public_id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column(
            "variables",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default=sa.text("'{}'::jsonb"),
            nullable=False,
        ),
        sa.Column("channels", postgresql.ARRAY(sa.Text()), nullable=True),
        sa.Column("audience", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("scheduled_for", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("state", sa.Text(), server_default="draft", nullable=False),
        sa.Column("version", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column("updated_by", sa.Text(), nullable=True),
        sa.Column("approved_by", sa.Text(), nullable=True),
        sa.Column("approved_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("audience_frozen_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("event_id", sa.BigInteger(), nullable=True),
        sa.Column("event_public_id", sa.UUID(), nullable=True),
        sa.Column("cancelled_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("cancelled_by", sa.Text(), nullable=True),
        sa.Column("completed_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column("settled_at", sa.TIMESTAMP(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.TIMESTAMP(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "state IN ('draft', 'approved', 'sending', 'completed', 'cancelled')",
            name=op.f("broadcast_state_check"),
        ),
        sa.CheckConstraint(
            "approved_by IS NULL OR approved_by <> created_by",
            name=op.f("broadcast_approver_not_creator_check"),
        ),
        sa.CheckConstraint(
            "approved_by IS NULL OR starts_with(approved_by, 'person:')",
            name=op.f("broadcast_approver_is_person_check"),
        ),
        sa.CheckConstraint(
            "(approved_by IS NULL) = (approved_at IS NULL)",
            name=op.f("broadcast_approval_pair_check"),
        ),
        sa.CheckConstraint(
            "state IN ('draft', 'cancelled') OR approved_by IS NOT NULL",
            name=op.f("broadcast_approved_to_release_check"),
        ),
        sa.CheckConstraint(
            "state NOT IN ('sending', 'completed') OR audience_frozen_at IS NOT NULL",
            name=op.f("broadcast_frozen_when_released_check"),
        ),
        sa.CheckConstraint(
            "(state = 'cancelled') = (cancelled_at IS NOT NULL)",
            name=op.f("broadcast_cancel_pair_check"),
        ),
        sa.CheckConstraint(
            "(state = 'completed') = (completed_at IS NOT NULL)",
            name=op.f("broadcast_completion_pair_check"),
        ),
        sa.CheckConstraint("btrim(title) <> ''", name=op.f("broadcast_title_not_blank_check")),
        sa.CheckConstraint(
            f"channels IS NULL OR (cardinality(channels) > 0 AND channels <@ {_CHANNELS})",
            name=op.f("broadcast_channels_check"),
        ),
        sa.CheckConstraint(
            f"audience->>'kind' IN {_AUDIENCE_KINDS}", name=op.f("broadcast_audience_kind_check")
        ),
        sa.CheckConstraint(
            "jsonb_typeof(variables) = 'object'", name=op.f("broadcast_variables_object_check")
        ),
        sa.CheckConstraint("version >= 1", name=op.f("broadcast_version_positive_check")),
        sa.ForeignKeyConstraint(
            ["event_id"],
            ["notification_event.id"],
            name=op.f("broadcast_event_id_fkey"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("broadcast_pkey")),
        sa.UniqueConstraint("public_id", name=op.f("broadcast_public_id_key")),
    )
    op.create_index("broadcast_tenant_idx", "broadcast", ["tenant_id", "id"])
    op.create_index(
        "broadcast_due_idx",
        "broadcast",
        [sa.text("coalesce(scheduled_for, approved_at)")],
        postgresql_where=sa.text("state = 'approved'"),
    )
    op.create_index(
        "broadcast_unsettled_idx",
        "broadcast",
        ["id"],
        postgresql_where=sa.text("state IN ('sending', 'cancelled') AND settled_at IS NULL"),
    )
    op.create_index("broadcast_settled_at_idx", "broadcast", ["settled_at"])
    op.create_index("broadcast_event_id_idx", "broadcast", ["event_id"])
    for statement in tenancy.protect("broadcast"):
        op.execute(statement)


def downgrade() -> None:
    for statement in tenancy.unprotect("broadcast"):
        op.execute(statement)
    op.drop_table("broadcast")
    op.drop_constraint(op.f("audit_record_action_check"), "audit_record", type_="check")
    op.create_check_constraint(
        op.f("audit_record_action_check"), "audit_record", f"action IN {_ACTIONS_BEFORE}"
    )
    # A cut-short broadcast event would break the narrower rule: its fan-out is complete, so it
    # reads as completed once the broadcast table that explained it is gone.
    op.execute(
        "UPDATE notification_event SET cancelled_at = NULL, cancelled_by = NULL "
        "WHERE cancelled_at IS NOT NULL AND fanout_claimed_at IS NOT NULL"
    )
    op.drop_constraint(
        op.f("notification_event_cancelled_before_fanout_check"),
        "notification_event",
        type_="check",
    )
    op.create_check_constraint(
        op.f("notification_event_cancelled_before_fanout_check"),
        "notification_event",
        "cancelled_at IS NULL OR fanout_claimed_at IS NULL",
    )
    op.drop_column("notification_event", "audience_frozen_at")
