-- name: open_deliveries
-- (channel, status, count) of deliveries in flight, one branch per status, each status written
-- here as a constant. `status IN (…)` — bound, or even written inline — cannot prove any one
-- partial index's predicate, so it counted by a sequential scan of the whole table (500 ms at
-- 1,000,000 rows, docs/scaling.md); each branch below is answered by its status's partial index
-- (due, lease, failed_due), bounded by the rows in that state, not by history. Scraped every
-- few seconds, the statement is prepared and runs as a generic plan: no bound value decides it.
SELECT channel, 'queued' AS status, count(*) AS n
  FROM notification_delivery WHERE status = 'queued' GROUP BY channel
UNION ALL
SELECT channel, 'processing', count(*)
  FROM notification_delivery WHERE status = 'processing' GROUP BY channel
UNION ALL
SELECT channel, 'failed', count(*)
  FROM notification_delivery WHERE status = 'failed' GROUP BY channel;

-- name: oldest_delivery_ages
-- (channel, status, seconds) since `queued_at` of the oldest unfinished delivery of each channel
-- and status: queued rows once due, failed (waiting for a retry) and processing rows always. One
-- branch per status, as above, so each walks its partial index.
SELECT channel, 'queued' AS status, extract(epoch FROM now() - min(queued_at)) AS age
  FROM notification_delivery WHERE status = 'queued' AND next_attempt_at <= now() GROUP BY channel
UNION ALL
SELECT channel, 'processing', extract(epoch FROM now() - min(queued_at))
  FROM notification_delivery WHERE status = 'processing' GROUP BY channel
UNION ALL
SELECT channel, 'failed', extract(epoch FROM now() - min(queued_at))
  FROM notification_delivery WHERE status = 'failed' GROUP BY channel;
