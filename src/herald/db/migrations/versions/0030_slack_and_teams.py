"""Slack and Microsoft Teams as channels for staff (issue 46): the channel checks take `slack` and
`teams`, and a person carries a Slack id and a Teams webhook URL with their reachability flags.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07 12:00:00.000000

Every CHECK that lists the channels is dropped and added again with the two new names: the
event's, broadcast's and reminder schedule's channel arrays, and the delivery's, preference
tables' and template tables' channel column. The checks only widen, so no row can fail them;
they are added NOT VALID and validated after, which on the partitioned delivery table scans
each month under a lock that lets reads and writes through. The person columns are nullable or
carry a default: catalog changes only. The down migration deletes what only the new channels
could hold first (their deliveries, preferences, templates), then narrows the checks again.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = ("in_app", "email", "sms", "push", "telegram")
NEW = (*OLD, "slack", "teams")
ADDED = ("slack", "teams")

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


def _list(values: Sequence[str]) -> str:
    return ", ".join(f"'{v}'" for v in values)


def _replace(table: str, name: str, predicate: str) -> None:
    op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")
    op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} CHECK ({predicate}) NOT VALID")
    op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}")


def _checks(channels: Sequence[str]) -> None:
    for table, name in COLUMN_CHECKS:
        _replace(table, name, f"channel IN ({_list(channels)})")
    array = f"ARRAY[{_list(channels)}]::text[]"
    for table, name, nullable in ARRAY_CHECKS:
        predicate = f"cardinality(channels) > 0 AND channels <@ {array}"
        if nullable:
            predicate = f"channels IS NULL OR ({predicate})"
        _replace(table, name, predicate)


def upgrade() -> None:
    op.execute("ALTER TABLE person ADD COLUMN IF NOT EXISTS slack_id text")
    op.execute(
        "ALTER TABLE person ADD COLUMN IF NOT EXISTS slack_can_write boolean NOT NULL DEFAULT true"
    )
    op.execute("ALTER TABLE person ADD COLUMN IF NOT EXISTS teams_webhook_url text")
    op.execute(
        "ALTER TABLE person ADD COLUMN IF NOT EXISTS teams_can_write boolean NOT NULL DEFAULT true"
    )
    _checks(NEW)


def downgrade() -> None:
    added = f"ARRAY[{_list(ADDED)}]::text[]"
    # Versions before their templates, attempts before their deliveries.
    for table, _ in reversed(COLUMN_CHECKS):
        if table == "notification_delivery":
            # Their attempts go with them (the attempt's delivery key cascades or is orphaned).
            op.execute(
                "DELETE FROM notification_delivery_attempt a USING notification_delivery d "
                f"WHERE a.delivery_id = d.id AND d.channel = ANY({added})"
            )
        op.execute(f"DELETE FROM {table} WHERE channel = ANY({added})")
    for table, _, nullable in ARRAY_CHECKS:
        # An event, broadcast or schedule that named only the new channels keeps the inbox (a
        # schedule or broadcast: its kind's channels, NULL), so every row passes the old check.
        rest = f"array(SELECT c FROM unnest(channels) c WHERE NOT c = ANY({added}))"
        empty = "NULL" if nullable else "ARRAY['in_app']::text[]"
        op.execute(
            f"UPDATE {table} SET channels = CASE WHEN cardinality({rest}) = 0 THEN {empty} "
            f"ELSE {rest} END WHERE channels && {added}"
        )
    _checks(OLD)
    for column in ("teams_can_write", "teams_webhook_url", "slack_can_write", "slack_id"):
        op.execute(f"ALTER TABLE person DROP COLUMN IF EXISTS {column}")
