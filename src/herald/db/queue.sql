-- The delivery queue's shared pieces (herald.db.queue): every statement that makes a delivery
-- queued enters its queue row with one of these, and every reader of `processing` derives it so.

-- fragment: enter_queue
-- The queue rows of the deliveries a statement just made queued: its CTE `entered` returns (id,
-- tenant_id, channel, occurred_at, next_attempt_at, status) of the rows it wrote. In the same
-- statement as the write, so a queued delivery without its queue row is never visible.
-- ON CONFLICT: a row already queued (retention's copy of a kept month) keeps its queue state.
INSERT INTO notification_delivery_queue (delivery_id, tenant_id, channel, occurred_at, next_attempt_at)
SELECT entered.id, entered.tenant_id, entered.channel, entered.occurred_at, entered.next_attempt_at
  FROM entered
 WHERE entered.status = 'queued'
    ON CONFLICT (delivery_id) DO NOTHING

-- fragment: published_status
-- The delivery `d`'s status as every reader publishes it: `processing` while a worker holds a
-- queued row (its queue row carries a claim; the record itself stays `queued`), its own status
-- otherwise. Uncorrelated: the claimed ids are hashed once (the lease index), a probe a row.
CASE WHEN d.status = 'queued' AND d.id IN (
          SELECT dq.delivery_id FROM notification_delivery_queue dq WHERE dq.claimed_at IS NOT NULL)
     THEN 'processing' ELSE d.status END
