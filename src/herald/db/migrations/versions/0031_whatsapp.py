"""WhatsApp Business Cloud API as a channel (issue 46): the channel checks take `whatsapp`, and a
WhatsApp number can be marked undeliverable on its own channel.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-07 16:00:00.000000

Every CHECK that lists the channels is dropped and added again with the new name, as 0030 did:
added NOT VALID and validated after (the checks only widen, so no row can fail them). The
undeliverable_address channel check takes `whatsapp` too: WhatsApp's 131026 ("this number cannot
take WhatsApp messages") marks the number for WhatsApp alone, not for SMS. No column is added: a
WhatsApp delivery goes to the person's phone. The down migration deletes what only the new
channel could hold first (its deliveries and their attempts, preferences, templates, marks),
then narrows the checks again.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = ("in_app", "email", "sms", "push", "telegram", "slack", "teams")
NEW = (*OLD, "whatsapp")
ADDED = ("whatsapp",)
UNDELIVERABLE_OLD = ("email", "sms")
UNDELIVERABLE_NEW = (*UNDELIVERABLE_OLD, "whatsapp")

# (table, constraint) whose column `channel` is one of the channels.
COLUMN_CHECKS = (
    ("notification_delivery", "notification_delivery_channel_check"),
    ("notification_channel_preference", "notification_channel_preference_channel_check"),
    ("notification_preference", "notification_preference_channel_check"),
    ("notification_template", "notification_template_channel_check"),
    ("notification_template_version", "notification_template_version_channel_check"),
)
# (table, constraint, nullable) whose array `channels` holds channels only.
ARRAY_CHECKS = (
    ("notification_event", "notification_event_channels_check", False),
    ("reminder_schedule", "reminder_schedule_channels_check", True),
    ("broadcast", "broadcast_channels_check", True),
)
UNDELIVERABLE_CHECK = ("undeliverable_address", "undeliverable_address_channel_check")


def _list(values: Sequence[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _replace(table: str, name: str, predicate: str) -> None:
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({predicate}) NOT VALID")
    op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")


def _checks(channels: Sequence[str], undeliverable: Sequence[str]) -> None:
    for table, name in COLUMN_CHECKS:
        _replace(table, name, f"channel IN ({_list(channels)})")
    array = f"ARRAY[{_list(channels)}]::text[]"
    for table, name, nullable in ARRAY_CHECKS:
        predicate = f"cardinality(channels) > 0 AND channels <@ {array}"
        if nullable:
            predicate = f"channels IS NULL OR ({predicate})"
        _replace(table, name, predicate)
    table, name = UNDELIVERABLE_CHECK
    _replace(table, name, f"channel IN ({_list(undeliverable)})")


def upgrade() -> None:
    _checks(NEW, UNDELIVERABLE_NEW)


def downgrade() -> None:
    added = f"ARRAY[{_list(ADDED)}]::text[]"
    # Versions before their templates, attempts before their deliveries.
    for table, _ in reversed(COLUMN_CHECKS):
        if table == "notification_delivery":
            op.execute(
                "DELETE FROM notification_delivery_attempt a USING notification_delivery d "
                f"WHERE a.delivery_id = d.id AND d.channel = ANY({added})"
            )
        op.execute(f"DELETE FROM {table} WHERE channel = ANY({added})")
    op.execute(f"DELETE FROM undeliverable_address WHERE channel = ANY({added})")
    for table, _, nullable in ARRAY_CHECKS:
        # An event, broadcast or schedule that named only WhatsApp keeps the inbox (a schedule
        # or broadcast: its kind's channels, NULL), so every row passes the old check.
        rest = f"array(SELECT c FROM unnest(channels) c WHERE NOT c = ANY({added}))"
        empty = "NULL" if nullable else "ARRAY['in_app']::text[]"
        op.execute(
            f"UPDATE {table} SET channels = CASE WHEN cardinality({rest}) = 0 THEN {empty} "
            f"ELSE {rest} END WHERE channels && {added}"
        )
    _checks(OLD, UNDELIVERABLE_OLD)
