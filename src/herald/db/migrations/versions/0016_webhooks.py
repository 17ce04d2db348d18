"""Outbound webhooks to the host (issue 16): endpoints and their messages.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01 16:40:00.000000

Both tables are under forced row-level security from their first statement (herald.db.tenancy).
The event types and statuses are written out as they stand today (a later vocabulary change
writes its own migration).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from herald.db import tenancy

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_EVENT_TYPES = [
    "delivery.sent",
    "delivery.delivered",
    "delivery.bounced",
    "delivery.dead",
    "event.completed",
    "broadcast.completed",
    "followup.reminded",
]
_TZ = postgresql.TIMESTAMP(timezone=True)


def _in(values: Sequence[str]) -> str:
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


def upgrade() -> None:
    op.create_table(
        "webhook_endpoint",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column(
            "public_id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("event_types", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("enabled", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        sa.Column("secret_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", _TZ, server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", _TZ, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            f"event_types <@ ARRAY{_EVENT_TYPES}::text[]",
            name=op.f("webhook_endpoint_event_types_check"),
        ),
        sa.CheckConstraint("length(url) <= 2000", name=op.f("webhook_endpoint_url_length_check")),
        sa.PrimaryKeyConstraint("id", name=op.f("webhook_endpoint_pkey")),
        sa.UniqueConstraint("public_id", name=op.f("webhook_endpoint_public_id_key")),
    )
    op.create_index("webhook_endpoint_tenant_id_idx", "webhook_endpoint", ["tenant_id"])
    op.create_table(
        "webhook_message",
        sa.Column("id", sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column(
            "public_id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False
        ),
        sa.Column("endpoint_id", sa.BigInteger(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), server_default="queued", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("next_attempt_at", _TZ, server_default=sa.text("now()"), nullable=False),
        sa.Column("claimed_at", _TZ, nullable=True),
        sa.Column("lease_expires_at", _TZ, nullable=True),
        sa.Column("sent_at", _TZ, nullable=True),
        sa.Column("dead_at", _TZ, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("created_at", _TZ, server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint(
            "status IN ('queued', 'processing', 'sent', 'dead')",
            name=op.f("webhook_message_status_check"),
        ),
        sa.CheckConstraint(
            f"event_type IN {_in([*_EVENT_TYPES, 'webhook.test'])}",
            name=op.f("webhook_message_event_type_check"),
        ),
        sa.CheckConstraint(
            "(claimed_at IS NULL) = (lease_expires_at IS NULL)",
            name=op.f("webhook_message_lease_pair_check"),
        ),
        sa.CheckConstraint(
            "(status = 'processing') = (claimed_at IS NOT NULL)",
            name=op.f("webhook_message_claim_while_processing_check"),
        ),
        sa.CheckConstraint(
            "status <> 'sent' OR sent_at IS NOT NULL",
            name=op.f("webhook_message_sent_at_when_sent_check"),
        ),
        sa.CheckConstraint(
            "status <> 'dead' OR dead_at IS NOT NULL",
            name=op.f("webhook_message_dead_at_when_dead_check"),
        ),
        sa.CheckConstraint(
            "jsonb_typeof(payload) = 'object'", name=op.f("webhook_message_payload_object_check")
        ),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["webhook_endpoint.id"],
            name=op.f("webhook_message_endpoint_id_fkey"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("webhook_message_pkey")),
        sa.UniqueConstraint("public_id", name=op.f("webhook_message_public_id_key")),
    )
    op.create_index("webhook_message_endpoint_id_idx", "webhook_message", ["endpoint_id"])
    op.create_index(
        "webhook_message_due_idx",
        "webhook_message",
        ["next_attempt_at"],
        postgresql_where=sa.text("status = 'queued'"),
    )
    op.create_index(
        "webhook_message_lease_idx",
        "webhook_message",
        ["lease_expires_at"],
        postgresql_where=sa.text("status = 'processing'"),
    )
    op.create_index(
        "webhook_message_sent_idx",
        "webhook_message",
        ["created_at"],
        postgresql_where=sa.text("status = 'sent'"),
    )
    for table in ("webhook_endpoint", "webhook_message"):
        for statement in tenancy.protect(table):
            op.execute(statement)


def downgrade() -> None:
    for table in ("webhook_message", "webhook_endpoint"):
        for statement in tenancy.unprotect(table):
            op.execute(statement)
    op.drop_table("webhook_message")
    op.drop_table("webhook_endpoint")
