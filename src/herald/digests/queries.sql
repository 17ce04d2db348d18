-- include: ../db/queue.sql
-- name: due_digest_groups
-- Groups of held deliveries (one tenant, person, channel and kind) whose oldest row has waited
-- its kind's whole window, through notification_delivery_held_idx. Every held row of a due group
-- goes into its digest, the newer ones too. Cross-tenant (ids only): each group is then locked
-- under its tenant.
SELECT d.tenant_id, r.user_id AS person_id, d.channel, e.kind
  FROM notification_delivery d
  JOIN notification_event e ON e.id = d.event_id
  JOIN notification_recipient r ON r.id = d.recipient_id
  JOIN unnest(CAST(:kinds AS text[]), CAST(:windows AS integer[])) AS k(kind, window_seconds)
    ON k.kind = e.kind
 WHERE d.status = 'held'
 GROUP BY d.tenant_id, r.user_id, d.channel, e.kind, k.window_seconds
HAVING min(d.queued_at) <= now() - make_interval(secs => k.window_seconds)
 LIMIT :limit;

-- name: lock_held_group
-- One group's held rows, oldest first, locked; SKIP LOCKED leaves a row another sweeper holds.
SELECT d.id, d.public_id, r.variables AS recipient_variables, r.locale,
       e.variables AS event_variables, e.category, e.priority,
       p.external_id, p.public_id AS person_public_id, p.full_name
  FROM notification_delivery d
  JOIN notification_recipient r ON r.id = d.recipient_id
  JOIN notification_event e ON e.id = d.event_id
  LEFT JOIN person p ON p.id = r.user_id
 WHERE d.status = 'held' AND d.channel = :channel AND e.kind = :kind
   AND r.user_id IS NOT DISTINCT FROM CAST(:person_id AS bigint)
 ORDER BY e.occurred_at, d.id
 LIMIT :limit
   FOR UPDATE OF d SKIP LOCKED;

-- name: release_held
-- Rows that go out on their own (a group of one, or a recipient erased while held): queued now,
-- with their queue rows (herald.db.queue).
WITH entered AS (
    UPDATE notification_delivery
       SET status = 'queued', next_attempt_at = now()
     WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'held'
    RETURNING id, tenant_id, channel, occurred_at, next_attempt_at, status
), queue_rows AS (
    {{enter_queue}}
)
SELECT count(*) AS released FROM entered;

-- name: mark_digested
-- The items the digest carries: final, each naming the digest delivery (the trace stays exact).
UPDATE notification_delivery
   SET status = 'digested', digest_delivery_id = :digest_id
 WHERE id = ANY(CAST(:ids AS bigint[])) AND status = 'held';
