"""Observability: the request id and trace context an event was recorded under (issue 14).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01 15:00:00.000000

Both columns are nullable and written only when there is something to carry: the `X-Request-ID`
of the HTTP request that recorded the event, so the worker's log lines for its deliveries carry
it, and the W3C `traceparent` of that request's span when tracing is on, so the fan-out and the
provider calls join the same trace in other processes. Adding a nullable column without a
default rewrites nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("notification_event", sa.Column("origin_request_id", sa.Text(), nullable=True))
    op.add_column("notification_event", sa.Column("traceparent", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("notification_event", "traceparent")
    op.drop_column("notification_event", "origin_request_id")
