-- include: payloads.sql

-- name: emit
-- The transactional outbox: one message per enabled endpoint of the tenant subscribed to the
-- event type, written in the caller's transaction, so the message exists exactly when the state
-- change it reports committed. One statement; a tenant with no endpoint inserts nothing (an
-- index probe on webhook_endpoint_tenant_id_idx).
INSERT INTO webhook_message (tenant_id, endpoint_id, event_type, payload)
SELECT w.tenant_id, w.id, CAST(:event_type AS text),
       jsonb_build_object(
           'type', CAST(:event_type AS text),
           'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
           'data', jsonb_strip_nulls(CAST(:data AS jsonb)))
  FROM webhook_endpoint w
 WHERE w.tenant_id = :tenant_id AND w.enabled AND CAST(:event_type AS text) = ANY(w.event_types);

-- name: emit_for_deliveries
-- delivery.<status> for the given deliveries of one tenant (a receipt moving them to delivered
-- or bounced): the same outbox as `emit`, one statement for the whole batch.
INSERT INTO webhook_message (tenant_id, endpoint_id, event_type, payload)
SELECT dv.tenant_id, w.id, 'delivery.' || dv.status,
       {{delivery_payload}}
  FROM notification_delivery dv
  JOIN notification_event ev ON ev.id = dv.event_id
  JOIN webhook_endpoint w ON w.tenant_id = dv.tenant_id AND w.enabled
                         AND ('delivery.' || dv.status) = ANY(w.event_types)
 WHERE dv.tenant_id = :tenant_id AND dv.id = ANY(CAST(:ids AS bigint[]));

-- name: claim_due_messages
-- Claim due queued messages (every tenant; ids and tenants only, as the delivery claim does):
-- queued → processing with a lease, counting the attempt at the claim. SKIP LOCKED keeps
-- concurrent senders disjoint; a message of a disabled endpoint waits until it is enabled.
UPDATE webhook_message m
   SET status = 'processing',
       attempts = m.attempts + 1,
       claimed_at = clock_timestamp(),
       lease_expires_at = clock_timestamp() + make_interval(secs => :lease_seconds)
 WHERE m.id IN (
        SELECT c.id
          FROM webhook_message c
          JOIN webhook_endpoint w ON w.id = c.endpoint_id
         WHERE c.status = 'queued' AND c.next_attempt_at <= now() AND w.enabled
           AND (CAST(:tenant_id AS text) IS NULL OR c.tenant_id = :tenant_id)
         ORDER BY c.next_attempt_at, c.id
         LIMIT :limit
           FOR UPDATE OF c SKIP LOCKED)
RETURNING m.id, m.tenant_id;

-- name: reclaim_expired_messages
-- A sender that died holding messages: their leases pass and they go back to queued (the claim
-- already counted the attempt), or to dead with their dead letter once the attempts are spent.
WITH expired AS (
    UPDATE webhook_message m
       SET status = CASE WHEN m.attempts >= :max_attempts THEN 'dead' ELSE 'queued' END,
           claimed_at = NULL,
           lease_expires_at = NULL,
           next_attempt_at = now(),
           dead_at = CASE WHEN m.attempts >= :max_attempts THEN now() END,
           last_error = 'LEASE_EXPIRED'
     WHERE m.id IN (
            SELECT c.id
              FROM webhook_message c
             WHERE c.status = 'processing' AND c.lease_expires_at < now()
             ORDER BY c.lease_expires_at
             LIMIT :limit
               FOR UPDATE SKIP LOCKED)
    RETURNING m.id, m.public_id, m.tenant_id, m.status, m.attempts, m.last_error
), letters AS (
    INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, last_error)
    SELECT tenant_id, 'webhook', 'webhook_send', public_id::text,
           jsonb_build_object('webhookMessagePublicId', public_id::text),
           attempts, last_error
      FROM expired
     WHERE status = 'dead'
)
SELECT id, status FROM expired;

-- name: load_message_contexts
-- What each claimed message's send needs, read under the message's tenant.
SELECT m.id, m.public_id, m.tenant_id, m.event_type, m.payload, m.attempts, m.claimed_at,
       w.url, w.secret_ciphertext
  FROM webhook_message m
  JOIN webhook_endpoint w ON w.id = m.endpoint_id
 WHERE m.id = ANY(CAST(:ids AS bigint[]))
 ORDER BY m.id;

-- name: record_message_outcomes
-- One write for a batch of outcomes, conditional on still holding the claim (claimed_at): sent,
-- back to queued with its backoff, or dead with its dead letter in the same statement.
WITH u AS (
    SELECT *
      FROM unnest(CAST(:ids AS bigint[]), CAST(:claimed_ats AS timestamptz[]),
                  CAST(:statuses AS text[]), CAST(:delays AS integer[]), CAST(:errors AS text[]),
                  CAST(:response_statuses AS integer[]))
           AS u(id, claimed_at, status, delay, error, response_status)
), done AS (
    UPDATE webhook_message m
       SET status = u.status,
           claimed_at = NULL,
           lease_expires_at = NULL,
           sent_at = CASE WHEN u.status = 'sent' THEN now() END,
           dead_at = CASE WHEN u.status = 'dead' THEN now() END,
           next_attempt_at = CASE WHEN u.delay IS NULL THEN m.next_attempt_at
                                  ELSE now() + make_interval(secs => u.delay) END,
           last_error = u.error,
           response_status = u.response_status
      FROM u
     WHERE m.id = u.id AND m.status = 'processing' AND m.claimed_at = u.claimed_at
    RETURNING m.id, m.public_id, m.tenant_id, m.status, m.attempts, m.last_error
), letters AS (
    INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, last_error)
    SELECT tenant_id, 'webhook', 'webhook_send', public_id::text,
           jsonb_build_object('webhookMessagePublicId', public_id::text),
           attempts, last_error
      FROM done
     WHERE status = 'dead'
)
SELECT id FROM done;

-- name: requeue_dead_message
-- A replay: the dead message goes back to queued with a fresh attempt budget, keeping its id
-- (the `webhook-id` the host deduplicates on). Compare-and-set on dead.
UPDATE webhook_message
   SET status = 'queued', attempts = 0, dead_at = NULL, next_attempt_at = now()
 WHERE tenant_id = :tenant_id AND public_id = :public_id AND status = 'dead'
RETURNING public_id;
