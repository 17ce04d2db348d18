"""SQL of channel escalation (docs/escalation.md).

`DECIDE` is the whole decision for a batch of due steps in ONE statement, so in one transaction:

  due     the due pending steps, by the partial due index in its order, at most :limit, each
          the earliest pending step of its recipient (a later step waits for the one before it
          to be decided), locked FOR UPDATE SKIP LOCKED (a second scheduler takes others)
  judged  each step's verdict: stopped (the in-app copy was read, the recipient or person is
          gone or suspended, or the event was cancelled), skipped (the person's preference for the step's channel is off:
          the category override, then the channel switch, then the category's code default,
          unless the kind is unsuppressible), else send
  ins_d   the step's delivery, queued, with the fan-out's uniqueness (one delivery per recipient
          and channel, notification_delivery_single_target_key): ON CONFLICT DO NOTHING makes a
          repeat impossible
  ins_q   its narrow queue row (herald.db.queue's enter_queue, the same text)
  stop    a stopping verdict ends the recipient's whole remaining plan
  decide  every other claimed step: sent (with its delivery) or skipped, with the reason

A crash anywhere before COMMIT rolls all of it back: the step is pending again and no delivery
exists, so it is neither skipped nor doubled. Runs as the schema owner across tenants (like the
delivery claim); every row it writes carries the step's own tenant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

from herald import vocabulary
from herald.db import schema as s
from herald.delivery.queries import DELIVERY_CHANNEL
from herald.fanout.pagewrite.queries import GONE_STATUSES
from herald.preferences.service import category_default


def _code_default() -> str:
    """The category's code default for the step's channel, as a CASE of code constants."""
    arms = [
        f"WHEN st.category = '{category}' AND st.channel = '{channel}' THEN true"
        for category in vocabulary.CATEGORIES
        for channel in vocabulary.REMOTE_CHANNELS
        if category_default(category, channel)
    ]
    return "CASE " + " ".join(arms) + " ELSE false END"


_GONE = s.sql_list(GONE_STATUSES)

DECIDE_SQL = f"""
WITH due AS (
    SELECT st.id
      FROM notification_escalation_step st
     WHERE st.state = 'pending'
       AND st.due_at <= now()
       AND NOT EXISTS (
           SELECT 1 FROM notification_escalation_step e
            WHERE e.recipient_id = st.recipient_id
              AND e.step_index < st.step_index
              AND e.state = 'pending')
     ORDER BY st.due_at, st.id
     LIMIT :limit
       FOR UPDATE OF st SKIP LOCKED
), judged AS (
    SELECT st.id, st.tenant_id, st.event_id, st.recipient_id, st.occurred_at, st.channel,
           r.user_id,
           CASE
             WHEN r.id IS NULL OR r.user_id IS NULL OR p.id IS NULL OR p.deleted_at IS NOT NULL
               THEN 'stopped:recipient_gone'
             WHEN r.read_at IS NOT NULL THEN 'stopped:read'
             WHEN e.cancelled_at IS NOT NULL THEN 'stopped:event_cancelled'
             WHEN p.status IN {_GONE} THEN 'stopped:recipient_gone'
             WHEN st.suppressible AND NOT coalesce(np.enabled, cp.enabled, {_code_default()})
               THEN 'skipped:preference'
             ELSE 'send'
           END AS verdict
      FROM due
      JOIN notification_escalation_step st ON st.id = due.id
      LEFT JOIN notification_recipient r
             ON r.id = st.recipient_id AND r.occurred_at = st.occurred_at
      LEFT JOIN person p ON p.id = r.user_id
      LEFT JOIN notification_event e ON e.id = st.event_id AND e.occurred_at = st.occurred_at
      LEFT JOIN notification_preference np
             ON np.person_id = r.user_id AND np.category = st.category
            AND np.channel = st.channel
      LEFT JOIN notification_channel_preference cp
             ON cp.person_id = r.user_id AND cp.channel = st.channel
), ins_d AS (
    INSERT INTO notification_delivery (tenant_id, event_id, recipient_id, user_id, channel,
                                       status, queued_at, next_attempt_at, occurred_at)
    SELECT j.tenant_id, j.event_id, j.recipient_id, j.user_id, j.channel,
           'queued', now(), now(), j.occurred_at
      FROM judged j
     WHERE j.verdict = 'send'
        ON CONFLICT (recipient_id, channel, occurred_at)
     WHERE provider_target_id IS NULL AND replay_of_delivery_id IS NULL
        DO NOTHING
    RETURNING id, tenant_id, recipient_id, channel, occurred_at, next_attempt_at, status
), ins_q AS (
    INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, occurred_at,
                                             next_attempt_at)
    SELECT entered.id, entered.tenant_id, entered.channel, entered.occurred_at,
           entered.next_attempt_at
      FROM ins_d entered
     WHERE entered.status = 'queued'
        ON CONFLICT (delivery_id) DO NOTHING
    RETURNING delivery_id, channel
), stop AS (
    UPDATE notification_escalation_step st
       SET state = 'stopped', reason = split_part(j.verdict, ':', 2), decided_at = now()
      FROM judged j
     WHERE j.verdict LIKE 'stopped:%'
       AND st.recipient_id = j.recipient_id
       AND st.state = 'pending'
    RETURNING st.id
), decide AS (
    UPDATE notification_escalation_step st
       SET state = CASE WHEN j.verdict = 'send' THEN 'sent' ELSE 'skipped' END,
           reason = CASE
                      WHEN j.verdict = 'skipped:preference' THEN 'preference'
                      WHEN j.verdict = 'send' AND d.id IS NULL THEN 'already_sent'
                    END,
           delivery_id = d.id,
           decided_at = now()
      FROM judged j
      LEFT JOIN ins_d d ON d.recipient_id = j.recipient_id AND d.channel = j.channel
     WHERE st.id = j.id
       AND j.verdict NOT LIKE 'stopped:%'
    RETURNING st.state
), woke AS (
    SELECT string_agg(DISTINCT channel, ',' ORDER BY channel) AS channels FROM ins_q
)
SELECT (SELECT count(*) FROM due) AS claimed,
       (SELECT count(*) FROM decide WHERE state = 'sent') AS sent,
       (SELECT count(*) FROM decide WHERE state = 'skipped') AS skipped,
       (SELECT count(*) FROM stop) AS stopped,
       (SELECT CASE WHEN channels IS NOT NULL
                    THEN pg_notify('{DELIVERY_CHANNEL}', channels) END FROM woke) AS woke
"""

DECIDE = text(DECIDE_SQL)


@dataclass(frozen=True)
class Decided:
    claimed: int
    sent: int
    skipped: int
    stopped: int


async def decide_due(conn: AsyncConnection, limit: int) -> Decided:
    row = (await conn.execute(DECIDE, {"limit": limit})).one()
    return Decided(int(row.claimed), int(row.sent), int(row.skipped), int(row.stopped))


STEPS_OF_RECIPIENT = text(
    """
    SELECT step_index, channel, state, reason, due_at, decided_at, delivery_id
      FROM notification_escalation_step
     WHERE recipient_id = :recipient_id
     ORDER BY step_index
    """
)


async def steps_of_recipient(conn: AsyncConnection, recipient_id: int) -> list[Any]:
    return list((await conn.execute(STEPS_OF_RECIPIENT, {"recipient_id": recipient_id})).all())
