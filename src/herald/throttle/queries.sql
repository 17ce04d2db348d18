-- name: throttled_deliveries
-- Of the claimed deliveries (under their tenant), those whose person already has :cap
-- deliveries on the same channel in the same category within :window_seconds — sent, delivered
-- or bounced, or claimed (a queue row with a claim: processing) ahead of it (lower id), so two rows of one batch never
-- both slip under the cap. Counted through notification_recipient_centre_idx (the person's
-- recent recipients) and notification_delivery_recipient_idx. Categories in :exempt (security,
-- account: one-time codes, resets) are never throttled.
SELECT d.id, e.category
  FROM notification_delivery d
  JOIN notification_recipient r ON r.id = d.recipient_id
  JOIN notification_event e ON e.id = d.event_id
 WHERE d.id = ANY(CAST(:ids AS bigint[]))
   AND r.user_id IS NOT NULL
   AND NOT (e.category = ANY(CAST(:exempt AS text[])))
   AND (SELECT count(*)
          FROM notification_recipient r2
          JOIN notification_event e2 ON e2.id = r2.event_id
          JOIN notification_delivery d2 ON d2.recipient_id = r2.id
         WHERE r2.user_id = r.user_id
           AND r2.occurred_at > now() - make_interval(secs => :window_seconds)
           AND e2.category = e.category
           AND d2.channel = d.channel
           AND (d2.status IN ('sent', 'delivered', 'bounced')
                OR (d2.status = 'queued' AND d2.id < d.id
                    AND EXISTS (SELECT 1 FROM notification_delivery_queue dq
                                 WHERE dq.delivery_id = d2.id AND dq.claimed_at IS NOT NULL))))
       >= :cap;
