-- name: open_deliveries
-- (channel, status, count) of deliveries in flight, one branch per state, each written here as a
-- constant. `status IN (…)` — bound, or even written inline — cannot prove any one partial
-- index's predicate, so it counted by a sequential scan of the whole table (500 ms at 1,000,000
-- rows, docs/scaling.md); each branch below reads only the rows in its state, not history:
-- queued and processing are the queue table's unclaimed and claimed rows (a queued delivery a
-- worker holds is `processing`, herald.db.queue; the table holds nothing but what is in
-- flight, so even a sequential read of it is bounded so), failed the delivery's failed_due_idx. Scraped every
-- few seconds, the statement is prepared and runs as a generic plan: no bound value decides it.
SELECT channel, 'queued' AS status, count(*) AS n
  FROM notification_delivery_queue WHERE claimed_at IS NULL GROUP BY channel
UNION ALL
SELECT channel, 'processing', count(*)
  FROM notification_delivery_queue WHERE claimed_at IS NOT NULL GROUP BY channel
UNION ALL
SELECT channel, 'failed', count(*)
  FROM notification_delivery WHERE status = 'failed' GROUP BY channel;

-- name: oldest_delivery_ages
-- (channel, status, seconds) of the oldest unfinished delivery of each channel and state: queued
-- rows once due, since they were due (the queue row's next_attempt_at: its queued_at for a first
-- try, the end of its backoff for a retry); processing rows since their delivery's queued_at
-- (the claimed rows are few: each probed by its delivery's key in its month); failed rows
-- (waiting for a retry) since queued_at. One branch per state, as above.
SELECT channel, 'queued' AS status, extract(epoch FROM now() - min(next_attempt_at)) AS age
  FROM notification_delivery_queue WHERE claimed_at IS NULL AND next_attempt_at <= now()
 GROUP BY channel
UNION ALL
SELECT q.channel, 'processing', extract(epoch FROM now() - min(d.queued_at))
  FROM notification_delivery_queue q
  -- A probe a claimed row (LATERAL … LIMIT 1): as a join, a generic plan hashed a sequential
  -- scan of every delivery.
  CROSS JOIN LATERAL (
        SELECT d.queued_at FROM notification_delivery d
         WHERE d.id = q.delivery_id AND d.occurred_at = q.occurred_at LIMIT 1) d
 WHERE q.claimed_at IS NOT NULL GROUP BY q.channel
UNION ALL
SELECT channel, 'failed', extract(epoch FROM now() - min(queued_at))
  FROM notification_delivery WHERE status = 'failed' GROUP BY channel;

-- name: webhook_messages_waiting
-- (state, count) of webhook messages not yet settled: queued for a first try, retrying (queued
-- again after a failed post) and processing (being posted). Each branch walks its status's partial
-- index (webhook_message_due_idx, webhook_message_lease_idx), bounded by what waits, not by the
-- sent history.
SELECT CASE WHEN attempts > 0 THEN 'retrying' ELSE 'queued' END AS state, count(*) AS n
  FROM webhook_message WHERE status = 'queued' GROUP BY 1
UNION ALL
SELECT 'processing', count(*)
  FROM webhook_message WHERE status = 'processing';

-- name: webhook_endpoint_health
-- Endpoints by health: failing (it holds a message queued again after a failed post), healthy
-- (enabled, nothing failing) and disabled; and how long the oldest failing message has waited
-- since it was written (0: none failing). The failing side walks webhook_message_due_idx.
WITH failing AS (
    SELECT endpoint_id, min(created_at) AS since
      FROM webhook_message
     WHERE status = 'queued' AND attempts > 0
     GROUP BY endpoint_id
)
SELECT count(*) FILTER (WHERE f.endpoint_id IS NOT NULL AND w.enabled) AS failing,
       count(*) FILTER (WHERE f.endpoint_id IS NULL AND w.enabled) AS healthy,
       count(*) FILTER (WHERE NOT w.enabled) AS disabled,
       coalesce(extract(epoch FROM now() - min(f.since) FILTER (WHERE w.enabled)), 0)
           AS failing_seconds
  FROM webhook_endpoint w
  LEFT JOIN failing f ON f.endpoint_id = w.id;

-- name: digest_groups
-- (channel, pending, due, overdue seconds) of the digest groups held for their window — one
-- tenant, person, channel and kind, as the sweeper groups them (herald.digests): pending groups,
-- those whose window has passed and the sweeper has not yet taken, and how far past its due time
-- the most overdue one is (0: none). The held rows come through notification_delivery_held_idx;
-- :kinds and :windows are the registry's digest windows.
SELECT channel,
       count(*) AS pending,
       count(*) FILTER (WHERE due_at <= now()) AS due,
       coalesce(extract(epoch FROM now() - min(due_at) FILTER (WHERE due_at <= now())), 0)
           AS overdue_seconds
  FROM (SELECT d.channel, min(d.queued_at) + make_interval(secs => k.window_seconds) AS due_at
          FROM notification_delivery d
          JOIN notification_event e ON e.id = d.event_id
          JOIN notification_recipient r ON r.id = d.recipient_id
          JOIN unnest(CAST(:kinds AS text[]), CAST(:windows AS integer[])) AS k(kind, window_seconds)
            ON k.kind = e.kind
         WHERE d.status = 'held'
         GROUP BY d.tenant_id, r.user_id, d.channel, e.kind, k.window_seconds) AS g
 GROUP BY channel;
