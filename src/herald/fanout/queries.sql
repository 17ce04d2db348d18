-- include: ../db/queue.sql
-- name: claim_event
-- Claim the oldest due event nobody has claimed. Due means immediate (scheduled_for IS NULL) or
-- scheduled_for <= now(): coalesce keeps NULL from hiding most events (R-PLAT-3). No watermark.
-- The claim is stamped before any work (R-FANOUT-4) with a token only this worker knows, and
-- SKIP LOCKED keeps two workers off one event (R-PLAT-2). The claim names its holder's presence
-- key (herald.db.presence), so a holder that died can be told from one that is slow.
UPDATE notification_event e
   SET fanout_claimed_at = now(), fanout_claim_token = :token, fanout_claimed_by = :holder,
       fanout_attempts = e.fanout_attempts + 1
 WHERE e.id = (
        SELECT c.id
          FROM notification_event c
         WHERE c.fanout_claimed_at IS NULL
           AND c.fanout_completed_at IS NULL
           AND c.cancelled_at IS NULL
           AND coalesce(c.scheduled_for, c.created_at) <= now()
           AND (CAST(:tenant_id AS text) IS NULL OR c.tenant_id = :tenant_id)
         ORDER BY coalesce(c.scheduled_for, c.created_at), c.id
         LIMIT 1
           FOR UPDATE SKIP LOCKED)
RETURNING e.id, e.tenant_id;

-- name: load_claimed_event
-- The claimed event's content, read under its tenant (the claim above is cross-tenant work and
-- returns ids only).
SELECT id, tenant_id, public_id, kind, category, priority, audience, channels, variables,
       action_url, occurred_at, fanout_cursor, fanout_attempts, audience_frozen_at,
       origin_request_id, traceparent, deliver_local_time, deliver_local_date
  FROM notification_event
 WHERE id = :event_id;

-- name: lock_claimed_event
-- Re-check, under the row lock, that this worker still owns the claim: if the reaper released it
-- and another worker took it, the token differs and this worker stops without writing.
SELECT fanout_cursor
  FROM notification_event
 WHERE id = :event_id AND fanout_claim_token = :token AND fanout_completed_at IS NULL
   FOR UPDATE;

-- name: insert_recipients
-- One row per (event, person). The conflict target is named (R-FANOUT-10), so a redelivered page
-- is a no-op for rows already written instead of a unique violation that fails the batch.
INSERT INTO notification_recipient
       (tenant_id, event_id, user_id, user_public_id_snapshot, audience_role_id, audience_scope_kind,
        variables, locale, occurred_at)
SELECT :tenant_id, :event_id, m.person_id, m.public_id, m.role_id,
       (SELECT ro.scope_kind FROM role ro WHERE ro.id = m.role_id),
       jsonb_build_object('name', m.name), m.locale, :occurred_at
  FROM unnest(CAST(:person_ids AS bigint[]), CAST(:public_ids AS uuid[]), CAST(:role_ids AS bigint[]),
              CAST(:names AS text[]), CAST(:locales AS text[]))
       AS m(person_id, public_id, role_id, name, locale)
    ON CONFLICT (event_id, user_public_id_snapshot, occurred_at) DO NOTHING
RETURNING id, user_id, public_id;

-- name: insert_deliveries
-- Every delivery is born in its final fan-out state in this one INSERT: queued with queued_at
-- (R-FANOUT-1) and its queue row (herald.db.queue), in_app delivered with its rendered title and
-- body (R-FANOUT-12), or skipped_* with skipped_at (R-SCHEMA-49). Each carries its recipient's
-- person (the admin history's key).
WITH entered AS (
    INSERT INTO notification_delivery
           (tenant_id, event_id, recipient_id, user_id, channel, provider_target_id, status, queued_at,
            next_attempt_at, delivered_at, skipped_at, rendered_title, rendered_body, template_version,
            rendered_hash, occurred_at)
    SELECT :tenant_id, :event_id, d.recipient_id,
           (SELECT r.user_id FROM notification_recipient r
             WHERE r.id = d.recipient_id AND r.occurred_at = :occurred_at),
           d.channel, d.target_id, d.status, now(), now(),
           CASE WHEN d.status = 'delivered' THEN now() END,
           CASE WHEN d.skipped THEN now() END,
           d.title, d.body, d.template_version, d.rendered_hash, :occurred_at
      FROM unnest(CAST(:recipient_ids AS bigint[]), CAST(:channels AS text[]), CAST(:target_ids AS bigint[]),
                  CAST(:statuses AS text[]), CAST(:skipped AS boolean[]), CAST(:titles AS text[]),
                  CAST(:bodies AS text[]), CAST(:template_versions AS integer[]), CAST(:hashes AS text[]))
           AS d(recipient_id, channel, target_id, status, skipped, title, body, template_version, rendered_hash)
    RETURNING id, tenant_id, channel, occurred_at, next_attempt_at, status
)
{{enter_queue}};

-- name: advance_cursor
-- The cursor moves inside the batch transaction that wrote the page (R-FANOUT-7). The claim time
-- is refreshed with it, so the reaper measures time since the last progress, not since the
-- first claim: a long, healthy fan-out is never taken from the worker that is making progress.
UPDATE notification_event
   SET fanout_cursor = :cursor, fanout_claimed_at = now()
 WHERE id = :event_id AND fanout_claim_token = :token;

-- name: complete_fanout
-- Completion and its COUNT in one statement (R-FANOUT-8, R-FANOUT-9): the pair CHECK is checked at
-- statement end, and a COUNT cannot double on a resumed fan-out the way an accumulator would.
UPDATE notification_event
   SET fanout_cursor = :cursor,
       fanout_completed_at = now(),
       recipient_count = (SELECT count(*) FROM notification_recipient r WHERE r.event_id = :event_id)
 WHERE id = :event_id AND fanout_claim_token = :token
RETURNING recipient_count;

-- name: release_stale_fanout_claims
-- Reaper sweep 3: release claims older than ten delivery leases (R-REAPER-7) and never younger
-- ones (R-REAPER-8). The released event keeps its cursor and resumes from it (R-FANOUT-15).
-- Each released row leaves the candidate set; no watermark (R-REAPER-6).
UPDATE notification_event e
   SET fanout_claimed_at = NULL, fanout_claim_token = NULL, fanout_claimed_by = NULL
 WHERE e.id IN (
        SELECT c.id
          FROM notification_event c
         WHERE c.fanout_claimed_at IS NOT NULL
           AND c.fanout_completed_at IS NULL
           AND c.fanout_failed_at IS NULL
           AND c.fanout_claimed_at < now() - make_interval(secs => :older_than_seconds)
         ORDER BY c.fanout_claimed_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED)
RETURNING e.id;

-- name: release_orphaned_fanout_claims
-- A claim whose holder is known to be gone is released at once, not after ten leases: the holder's
-- presence lock (a session-level advisory lock) ended with its database session, so the worker
-- that claimed the event was killed or lost its connection. Only claimed, unfinished events are
-- looked at (the partial index on fanout_claimed_at), so on a healthy system this touches no row.
-- A live worker whose lock is briefly missing (its presence connection reconnecting) only loses
-- the claim: its next batch sees another token and stops without writing.
UPDATE notification_event e
   SET fanout_claimed_at = NULL, fanout_claim_token = NULL, fanout_claimed_by = NULL
 WHERE e.id IN (
        SELECT c.id
          FROM notification_event c
         WHERE c.fanout_claimed_at IS NOT NULL
           AND c.fanout_completed_at IS NULL
           AND c.fanout_failed_at IS NULL
           AND c.fanout_claimed_by IS NOT NULL
           AND NOT EXISTS (
                 SELECT 1
                   FROM pg_locks l
                  WHERE l.locktype = 'advisory'
                    AND l.database = (SELECT d.oid FROM pg_database d
                                       WHERE d.datname = current_database())
                    AND l.classid = CAST(:namespace AS oid)
                    AND l.objid = CAST(c.fanout_claimed_by AS oid)
                    AND l.objsubid = 2
                    AND l.granted)
         ORDER BY c.fanout_claimed_at
         LIMIT :limit
           FOR UPDATE SKIP LOCKED)
RETURNING e.id;

-- name: release_own_claim
-- A draining worker hands its unfinished event back at once instead of leaving it to the reaper;
-- the next claimant resumes from the cursor.
UPDATE notification_event
   SET fanout_claimed_at = NULL, fanout_claim_token = NULL, fanout_claimed_by = NULL
 WHERE id = :event_id AND fanout_claim_token = :token AND fanout_completed_at IS NULL;

-- name: wake_if_due
-- Reaper sweep 4: nudge the fan-out workers when a due, unclaimed event is waiting. The poller
-- finds every such event by itself (no relay to lose, R-PLAT-3); this only shortens the wait.
SELECT pg_notify('herald_fanout', '')
 WHERE EXISTS (
        SELECT 1 FROM notification_event
         WHERE fanout_claimed_at IS NULL AND fanout_completed_at IS NULL AND cancelled_at IS NULL
           AND coalesce(scheduled_for, created_at) <= now());

-- name: fail_fanout
-- A fan-out that failed on its last allowed attempt stops here: the event keeps its claim (so no
-- poller or reaper takes it again), is marked failed, and gets a dead letter an operator can see.
-- Nothing is retried forever in silence.
WITH failed AS (
    UPDATE notification_event
       SET fanout_failed_at = now()
     WHERE id = :event_id AND fanout_claim_token = :token
       AND fanout_completed_at IS NULL AND fanout_failed_at IS NULL
    RETURNING id, tenant_id, public_id, fanout_attempts
)
INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, last_error)
SELECT tenant_id, 'notification.fanout', 'fan_out', public_id::text,
       jsonb_build_object('notificationEventPublicId', public_id::text), fanout_attempts, :error
  FROM failed;

-- name: halt_fanout
-- A broadcast cancelled while sending (DESIGN.md §5.2): cut its event's fan-out short. Run after
-- lock_event_for_halt, so a batch in progress has committed and the COUNT sees its rows. The
-- event is completed and cancelled in one statement (the cancelled_before_fanout CHECK admits
-- exactly this pair); every later batch finds it completed under its row lock and writes
-- nothing. An event not yet claimed is simply cancelled, and no fan-out will ever claim it.
UPDATE notification_event
   SET cancelled_at = now(), cancelled_by = :actor,
       fanout_completed_at = CASE WHEN fanout_claimed_at IS NOT NULL THEN now() END,
       recipient_count = CASE WHEN fanout_claimed_at IS NOT NULL
                              THEN (SELECT count(*) FROM notification_recipient r
                                     WHERE r.event_id = :event_id) END
 WHERE id = :event_id AND fanout_completed_at IS NULL AND cancelled_at IS NULL
RETURNING recipient_count;
