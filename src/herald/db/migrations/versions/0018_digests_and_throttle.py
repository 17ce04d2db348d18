"""Digests and the throttle (issue 16): the statuses held, digested and skipped_throttled, the
digest a digested row was carried by, and the index the digest sweeper reads.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-01 17:30:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SKIPPED_BEFORE = [
    "skipped_preference",
    "skipped_no_template",
    "skipped_no_destination",
    "skipped_unconfigured",
    "skipped_recipient_gone",
]
_SKIPPED_AFTER = [*_SKIPPED_BEFORE, "skipped_throttled"]
_BEFORE = [
    "queued",
    "processing",
    "sent",
    "delivered",
    "bounced",
    "failed",
    "dead",
    "cancelled",
    *_SKIPPED_BEFORE,
]
_AFTER = [*_BEFORE, "held", "digested", "skipped_throttled"]
_TABLE = "notification_delivery"


def _listed(values: list[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _checks(statuses: list[str], skipped: list[str]) -> None:
    for name in ("status", "skipped_pair"):
        op.drop_constraint(op.f(f"{_TABLE}_{name}_check"), _TABLE, type_="check")
    op.create_check_constraint(
        op.f(f"{_TABLE}_status_check"), _TABLE, f"status IN ({_listed(statuses)})"
    )
    op.create_check_constraint(
        op.f(f"{_TABLE}_skipped_pair_check"),
        _TABLE,
        f"(status IN ({_listed(skipped)})) = (skipped_at IS NOT NULL)",
    )


def upgrade() -> None:
    _checks(_AFTER, _SKIPPED_AFTER)
    op.add_column(_TABLE, sa.Column("digest_delivery_id", sa.BigInteger(), nullable=True))
    op.create_check_constraint(
        op.f(f"{_TABLE}_digested_pair_check"),
        _TABLE,
        "(status = 'digested') = (digest_delivery_id IS NOT NULL)",
    )
    op.create_index(
        "notification_delivery_held_idx",
        _TABLE,
        ["queued_at"],
        postgresql_where=sa.text("status = 'held'"),
    )


def downgrade() -> None:
    op.drop_index("notification_delivery_held_idx", table_name=_TABLE)
    # Held rows go out on their own; digested ones were carried, and count as sent by their
    # digest; throttled ones were skipped.
    op.execute(f"UPDATE {_TABLE} SET status = 'queued' WHERE status = 'held'")
    op.execute(
        f"UPDATE {_TABLE} SET status = 'sent', sent_at = coalesce(sent_at, now()) "
        "WHERE status = 'digested'"
    )
    op.execute(
        f"UPDATE {_TABLE} SET status = 'skipped_preference' WHERE status = 'skipped_throttled'"
    )
    op.drop_constraint(op.f(f"{_TABLE}_digested_pair_check"), _TABLE, type_="check")
    op.drop_column(_TABLE, "digest_delivery_id")
    _checks(_BEFORE, _SKIPPED_BEFORE)
