"""A hard SMS bounce marks the number undeliverable, as a hard email bounce marks the address.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-01 20:45:00.000000

undeliverable_address took only `email`. Twilio's status callback says when a number cannot take
SMS at all (30005 unknown or out of service, 30006 a landline, 21610 opted out: herald.receipts),
and sending to it again costs money and fails the same way; the channel's check now allows `sms`.
The down migration deletes the SMS marks first (they could not exist before).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CHECK = "undeliverable_address_channel_check"


def upgrade() -> None:
    op.drop_constraint(op.f(CHECK), "undeliverable_address", type_="check")
    op.create_check_constraint(op.f(CHECK), "undeliverable_address", "channel IN ('email', 'sms')")


def downgrade() -> None:
    op.execute("DELETE FROM undeliverable_address WHERE channel = 'sms'")
    op.drop_constraint(op.f(CHECK), "undeliverable_address", type_="check")
    op.create_check_constraint(op.f(CHECK), "undeliverable_address", "channel IN ('email')")
