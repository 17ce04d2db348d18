-- name: delete_aged_deliveries
-- Retention, level 1 of 3 (R-RETENTION-5): the deliveries of aged events, and the attempt rows
-- beneath them, at most :limit deliveries per statement, the bound a subquery (R-RETENTION-6).
-- Attempts go in the same statement by name, not by the foreign key's cascade, so the statement
-- deletes exactly what it says (at most :limit × the attempt budget rows).
-- Aged means occurred_at (R-RETENTION-8; notification_event_occurred_at_idx) before :before, and
-- the statement takes one window [:after, :before) of occurred_at at a time
-- (herald.db.partitions.Layout.windows: a month partition, or a stretch the default or legacy
-- partition holds). `<table>__part` is replaced by the window's partition of that table
-- (herald.maintenance.queries.windowed): each statement reads one partition of each, as the
-- unpartitioned table was read, with its own statistics, the events chosen by the window and
-- their rows reached by event id (an event's rows are all in its month). Through the parents, a
-- generic plan costs an index probe per month for every event and hashes a whole month instead
-- (110 ms against 8.6 ms for a month of 220,000 deliveries, 2026-12-03); so would a range on
-- the partition's own occurred_at, which is why only the event carries the window. An event is touched
-- only when it is finished (fanned out or cancelled), has no queued/processing/failed delivery
-- (R-RETENTION-3) and no delivery named by an unreplayed dead letter (R-RETENTION-4): payload_ref
-- is not a foreign key, so this predicate is the only thing keeping the row an operator will
-- replay. Protection is per event, so an event is either emptied or left whole, never half
-- deleted under a replay. The reference is matched through the delivery's unique public_id
-- index: only well-formed uuids are cast (a malformed reference protects nothing it could name),
-- and a cast uuid matches regardless of letter case, so this keeps at least every delivery
-- `payload_ref->>'notificationDeliveryPublicId' = public_id::text` names.
-- SKIP LOCKED: retention never waits on a row somebody else holds; it is taken next time.
-- Only unreplayed dead letters are read, through dead_letter_unreplayed_delivery_idx (a partial
-- index on the reference), so the cost follows the replay backlog, not the table's history.
WITH dead_lettered AS MATERIALIZED (
    SELECT dl.payload_ref ->> 'notificationDeliveryPublicId' AS ref
      FROM dead_letter dl
     WHERE dl.replayed_at IS NULL
       AND (dl.payload_ref ->> 'notificationDeliveryPublicId') IS NOT NULL
), protected AS MATERIALIZED (
    SELECT x.event_id
      FROM notification_delivery__part x
     WHERE x.public_id IN (SELECT CAST(ref AS uuid) FROM dead_lettered WHERE ref ~* :uuid_pattern)
), doomed AS (
    SELECT d.id
      FROM notification_event e
      JOIN notification_delivery__part d ON d.event_id = e.id
     WHERE e.occurred_at >= CAST(:after AS timestamptz) AND e.occurred_at < CAST(:before AS timestamptz)
       AND (e.fanout_completed_at IS NOT NULL OR e.cancelled_at IS NOT NULL)
       AND NOT EXISTS (SELECT 1
                         FROM notification_delivery__part f
                        WHERE f.event_id = e.id
                          AND f.status = ANY(CAST(:in_flight AS text[])))
       AND e.id NOT IN (SELECT p.event_id FROM protected p)
     ORDER BY e.occurred_at, d.id
     LIMIT :limit
       FOR UPDATE OF d SKIP LOCKED
), attempts AS (
    DELETE FROM notification_delivery_attempt__part a
     WHERE a.delivery_id IN (SELECT doomed.id FROM doomed)
    RETURNING 1
), deliveries AS (
    DELETE FROM notification_delivery__part d
     WHERE d.id IN (SELECT doomed.id FROM doomed)
    RETURNING 1
)
SELECT (SELECT count(*) FROM deliveries) AS deliveries, (SELECT count(*) FROM attempts) AS attempts;

-- name: delete_aged_recipients
-- Retention, level 2 of 3: recipients of aged, finished events once every delivery of the event
-- is gone (level 1 empties only unprotected events, so a protected event keeps its recipients),
-- at most :limit per statement, in the window [:after, :before) as above (an event's rows all
-- share its occurred_at, so a window holds whole events). The recipient's own NOT EXISTS keeps
-- the delivery foreign key's cascade from ever having anything to do (R-RETENTION-5). SKIP
-- LOCKED also skips a recipient a concurrent insert is referencing (it holds a key-share lock),
-- so nothing new is cascaded away.
DELETE FROM notification_recipient__part r
 WHERE r.id IN (
        SELECT c.id
          FROM notification_event e
          JOIN notification_recipient__part c ON c.event_id = e.id
         WHERE e.occurred_at >= CAST(:after AS timestamptz) AND e.occurred_at < CAST(:before AS timestamptz)
           AND (e.fanout_completed_at IS NOT NULL OR e.cancelled_at IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM notification_delivery__part d
                            WHERE d.event_id = e.id)
           AND NOT EXISTS (SELECT 1 FROM notification_delivery__part d
                            WHERE d.recipient_id = c.id)
         ORDER BY e.occurred_at
         LIMIT :limit
           FOR UPDATE OF c SKIP LOCKED);

-- name: delete_aged_events
-- Retention, level 3 of 3: aged, finished events whose children are all gone (R-RETENTION-7); an
-- event still holding a recipient or a delivery survives to a later tick. At most :limit, in the
-- window [:after, :before) as above.
DELETE FROM notification_event e
 WHERE e.id IN (
        SELECT c.id
          FROM notification_event c
         WHERE c.occurred_at >= CAST(:after AS timestamptz) AND c.occurred_at < CAST(:before AS timestamptz)
           AND (c.fanout_completed_at IS NOT NULL OR c.cancelled_at IS NOT NULL)
           AND NOT EXISTS (SELECT 1 FROM notification_recipient__part r
                            WHERE r.event_id = c.id)
           AND NOT EXISTS (SELECT 1 FROM notification_delivery__part d
                            WHERE d.event_id = c.id)
         ORDER BY c.occurred_at
         LIMIT :limit
           FOR UPDATE OF c SKIP LOCKED);

-- name: delete_invalidated_push_tokens
-- Push tokens invalidated more than :days ago (R-RETENTION-10), at most :limit, through
-- notification_push_token_invalidated_idx. Deliveries keep their provider_target_id: it is a
-- reference, not a key, so pruning a token never rewrites delivery history.
DELETE FROM notification_push_token t
 WHERE t.id IN (
        SELECT c.id
          FROM notification_push_token c
         WHERE NOT c.is_active
           AND c.invalidated_at < now() - make_interval(days => :days)
         ORDER BY c.invalidated_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_aged_feed_notifications
-- The operations feed's only deleting statement (R-RETENTION-2, R-RETENTION-11): rows older than
-- :days by occurred_at, at most :limit, through feed_notification_occurred_at_idx. Their read
-- receipts go with them by the foreign key's cascade (bounded by the readers of :limit rows).
DELETE FROM feed_notification f
 WHERE f.id IN (
        SELECT c.id
          FROM feed_notification c
         WHERE c.occurred_at < now() - make_interval(days => :days)
         ORDER BY c.occurred_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_aged_reminder_runs
-- Reminder runs (the record of each occurrence a schedule fired, missed or failed) older than
-- :days by created_at, at most :limit, through reminder_run_created_at_idx. The schedule itself
-- stays; only its history ages out, like the events the runs point at.
DELETE FROM reminder_run r
 WHERE r.id IN (
        SELECT c.id
          FROM reminder_run c
         WHERE c.created_at < now() - make_interval(days => :days)
         ORDER BY c.created_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_settled_broadcasts
-- Broadcasts settled (completed, or cancelled with nothing left in flight) more than :days ago,
-- through broadcast_settled_at_idx; the same age at which their event's rows go. A broadcast
-- still in draft, approved or sending is never touched.
DELETE FROM broadcast b
 WHERE b.id IN (
        SELECT c.id
          FROM broadcast c
         WHERE c.settled_at < now() - make_interval(days => :days)
         ORDER BY c.settled_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_resolved_followups
-- Follow-ups that will never send again on their own (acknowledged, not required, or reminded:
-- follow_up is final) and have not changed for :days, at most :limit, through
-- followup_updated_at_idx. Armed and notified ones still have a transition ahead and stay.
DELETE FROM followup f
 WHERE f.id IN (
        SELECT c.id
          FROM followup c
         WHERE c.updated_at < now() - make_interval(days => :days)
           AND c.state IN ('acknowledged', 'not_required', 'follow_up')
         ORDER BY c.updated_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_decided_escalation_steps
-- Escalation steps decided (sent, skipped, stopped) more than :days ago, at most :limit, through
-- notification_escalation_step_decided_idx. Pending ones have their decision ahead and stay.
DELETE FROM notification_escalation_step x
 WHERE x.id IN (
        SELECT c.id
          FROM notification_escalation_step c
         WHERE c.state <> 'pending' AND c.decided_at < now() - make_interval(days => :days)
         ORDER BY c.decided_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_sent_webhook_messages
-- Webhook messages the host received more than :days ago, at most :limit, through
-- webhook_message_sent_idx. Queued and processing ones have work ahead; dead ones are named by
-- their dead letter and stay with it.
DELETE FROM webhook_message m
 WHERE m.id IN (
        SELECT c.id
          FROM webhook_message c
         WHERE c.status = 'sent' AND c.created_at < now() - make_interval(days => :days)
         ORDER BY c.created_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_aged_undeliverable_addresses
-- Undeliverable marks older than :days, at most :limit, through
-- undeliverable_address_created_at_idx: after that long the address is tried again.
DELETE FROM undeliverable_address a
 WHERE a.id IN (
        SELECT c.id
          FROM undeliverable_address c
         WHERE c.created_at < now() - make_interval(days => :days)
         ORDER BY c.created_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_expired_console_sessions
-- Console sessions past their expiry, at most :limit, through console_session_expires_at_idx.
-- An expired session is useless at once, so :days keeps none of them.
DELETE FROM console_session a
 WHERE a.id IN (
        SELECT c.id
          FROM console_session c
         WHERE c.expires_at < now()
         ORDER BY c.expires_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: delete_finished_operational_emails
-- Operational emails that are done (sent or skipped) and older than :days. A dead one stays: its
-- dead letter names it by job_id, and dead letters are never trimmed by age (R-DLQ-18).
DELETE FROM operational_email o
 WHERE o.id IN (
        SELECT c.id
          FROM operational_email c
         WHERE c.status IN ('sent', 'skipped')
           AND c.created_at < now() - make_interval(days => :days)
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);

-- name: claim_period
-- A once-per-period task's compare-and-set (R-CREDIT-1): the first caller with a newer period key
-- wins; every other caller, on any worker, gets no row. `<`, not `<>`: a worker whose clock is a
-- little behind cannot win yesterday back and run the task twice around midnight.
INSERT INTO maintenance_run AS m (task, period_key, ran_at)
VALUES (:task, :period_key, now())
ON CONFLICT (task) DO UPDATE
   SET period_key = EXCLUDED.period_key, ran_at = EXCLUDED.ran_at
 WHERE m.period_key < EXCLUDED.period_key
RETURNING m.task;

-- name: claim_due_operational_emails
-- Claim due operational emails (R-OPMAIL-1: their own work type, claimed only by their sender,
-- R-PLAT-10): queued → processing with the claim and its lease in one UPDATE; SKIP LOCKED keeps
-- concurrent workers disjoint. claimed_at is the lease token every later write checks.
-- Written as the delivery claim is (delivery/queries.sql), for the same reasons once psycopg
-- prepares it and the server runs a generic plan: operational_email_due_idx is in the ORDER BY's
-- order (0013), `status = 'queued'` is a constant, the ids reach the UPDATE as an array
-- (`IN (subquery)` hash-joined a guessed tenth of the table against a scan of all of it), and the
-- one-tenant form is a statement of its own (tests/integration/test_plans_maintenance.py).
UPDATE operational_email o
   SET status = 'processing',
       claimed_at = clock_timestamp(),
       lease_expires_at = clock_timestamp() + make_interval(secs => :lease_seconds)
 WHERE o.id = ANY(ARRAY(
        SELECT c.id
          FROM operational_email c
         WHERE c.status = 'queued'
           AND c.next_attempt_at <= now()
         ORDER BY c.next_attempt_at, c.id
         LIMIT :limit
           FOR UPDATE SKIP LOCKED))
RETURNING o.id, o.public_id, o.tenant_id, o.event_type, o.aggregate_type, o.aggregate_id,
          o.subject, o.body_text, o.body_html, o.attempts, o.claimed_at;

-- name: claim_due_operational_emails_of_tenant
-- The same claim limited to one tenant (tests and single-tenant drains).
UPDATE operational_email o
   SET status = 'processing',
       claimed_at = clock_timestamp(),
       lease_expires_at = clock_timestamp() + make_interval(secs => :lease_seconds)
 WHERE o.id = ANY(ARRAY(
        SELECT c.id
          FROM operational_email c
         WHERE c.status = 'queued'
           AND c.next_attempt_at <= now()
           AND c.tenant_id = :tenant_id
         ORDER BY c.next_attempt_at, c.id
         LIMIT :limit
           FOR UPDATE SKIP LOCKED))
RETURNING o.id, o.public_id, o.tenant_id, o.event_type, o.aggregate_type, o.aggregate_id,
          o.subject, o.body_text, o.body_html, o.attempts, o.claimed_at;

-- name: finish_operational_email
-- Record one send's outcome while the row still carries our claim (a reclaimed row is not
-- overwritten): sent, skipped, queued again after :delay seconds, or dead. A row reaching dead
-- writes its dead letter in the same statement, with payload_ref = {aggregateType, aggregateId,
-- eventType} and absent keys omitted, never written as nulls (R-DLQ-2, R-SCHEMA-53); a skipped row
-- writes none (R-OPMAIL-7).
WITH done AS (
    UPDATE operational_email o
       SET status = CAST(:status AS text),
           attempts = o.attempts + CAST(:attempt_inc AS integer),
           claimed_at = NULL,
           lease_expires_at = NULL,
           sent_at = CASE WHEN CAST(:status AS text) = 'sent' THEN now() ELSE o.sent_at END,
           next_attempt_at = CASE WHEN CAST(:delay AS integer) IS NULL THEN o.next_attempt_at
                                  ELSE now() + make_interval(secs => :delay) END,
           last_error = CAST(:error AS text)
     WHERE o.id = :id AND o.status = 'processing' AND o.claimed_at = :claimed_at
    RETURNING o.id, o.public_id, o.tenant_id, o.event_type, o.aggregate_type, o.aggregate_id,
              o.status, o.attempts, o.last_error
), letter AS (
    INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, last_error)
    SELECT done.tenant_id, CAST(:queue_name AS text), CAST(:job_name AS text), done.public_id::text,
           jsonb_strip_nulls(jsonb_build_object('aggregateType', done.aggregate_type,
                                                'aggregateId', done.aggregate_id,
                                                'eventType', done.event_type)),
           done.attempts, done.last_error
      FROM done
     WHERE done.status = 'dead'
)
SELECT id, status FROM done;

-- name: reclaim_operational_email_leases
-- A worker that died mid-send leaves its row processing; once the lease has passed the row is
-- queued again, counting the attempt, or dead (with its dead letter) when that was the last one.
WITH expired AS (
    UPDATE operational_email o
       SET status = CASE WHEN o.attempts + 1 >= :max_attempts THEN 'dead' ELSE 'queued' END,
           attempts = o.attempts + 1,
           claimed_at = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now(),
           last_error = CASE WHEN o.attempts + 1 >= :max_attempts THEN 'LEASE_EXPIRED'
                             ELSE o.last_error END
     WHERE o.id IN (
            SELECT c.id
              FROM operational_email c
             WHERE c.status = 'processing' AND c.lease_expires_at < now()
             ORDER BY c.lease_expires_at
             LIMIT :limit
               FOR UPDATE SKIP LOCKED)
    RETURNING o.id, o.public_id, o.tenant_id, o.event_type, o.aggregate_type, o.aggregate_id,
              o.status, o.attempts, o.last_error
), letter AS (
    INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, last_error)
    SELECT expired.tenant_id, CAST(:queue_name AS text), CAST(:job_name AS text), expired.public_id::text,
           jsonb_strip_nulls(jsonb_build_object('aggregateType', expired.aggregate_type,
                                                'aggregateId', expired.aggregate_id,
                                                'eventType', expired.event_type)),
           expired.attempts, expired.last_error
      FROM expired
     WHERE expired.status = 'dead'
)
SELECT id, status FROM expired;

-- name: delete_aged_pending_receipts
-- Receipts kept for a send (pending_receipt) that no recorded send claimed within :days, at most
-- :limit, through pending_receipt_received_at_idx: their message id will not be written now.
DELETE FROM pending_receipt a
 WHERE a.id IN (
        SELECT c.id
          FROM pending_receipt c
         WHERE c.received_at < now() - make_interval(days => :days)
         ORDER BY c.received_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED);
