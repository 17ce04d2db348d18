-- include: ../webhooks/payloads.sql
-- include: ../db/queue.sql

-- fragment: ended_outbox
-- The outbox of a statement whose CTE `ended` returns (id, public_id, tenant_id, channel, status,
-- attempts, last_error, event_id) of deliveries it just ended: delivery.sent / delivery.dead to
-- the host's subscribed webhook endpoints (herald.webhooks; nothing for a tenant without one) and
-- a dead row's dead letter, in the same statement. record_outcomes and reclaim_expired_leases.
hooks AS (
    INSERT INTO webhook_message (tenant_id, endpoint_id, event_type, payload)
    SELECT dv.tenant_id, w.id, 'delivery.' || dv.status,
           {{delivery_payload}}
      FROM ended dv
      JOIN webhook_endpoint w ON w.tenant_id = dv.tenant_id AND w.enabled
                             AND ('delivery.' || dv.status) = ANY(w.event_types)
      JOIN notification_event ev ON ev.id = dv.event_id
     WHERE dv.status IN ('sent', 'dead')
), letters AS (
    INSERT INTO dead_letter (tenant_id, queue_name, job_name, job_id, payload_ref, attempts, last_error)
    SELECT ended.tenant_id, 'notification.' || ended.channel, 'channel_send', ended.public_id::text,
           jsonb_build_object('notificationDeliveryPublicId', ended.public_id::text, 'channel', ended.channel),
           ended.attempts, ended.last_error
      FROM ended
     WHERE ended.status = 'dead'

-- name: claim_due_deliveries
-- Claim due, unclaimed queue rows of one channel (R-STATE-1, R-STATE-8, R-STATE-16): one
-- conditional UPDATE of the narrow queue rows (herald.db.queue) that stamps the claim and its
-- lease together (R-STATE-6); the deliveries themselves are not written, and read `processing`
-- from here on. SKIP LOCKED keeps concurrent workers disjoint (R-STATE-17). claimed_at doubles
-- as the lease token: the recorder only writes an outcome while the queue row still carries it.
-- This is cross-tenant work (it runs as the schema owner), so it returns ids, tenant ids and
-- months only; each tenant's send contexts are then read under that tenant (load_send_contexts).
-- The plan is a range scan of notification_delivery_queue_due_idx (channel, next_attempt_at,
-- delivery_id) WHERE claimed_at IS NULL that stops after :limit rows, with no sort, at any queue
-- depth (docs/scaling.md; tests/integration/test_plans_claim.py). Two rules keep it so once
-- psycopg prepares the statement and the server may pick a generic plan: `claimed_at IS NULL` is
-- written here, never bound (a bound value cannot prove the partial index's predicate), and the
-- ORDER BY is exactly the index's order after the channel. The ids go to the UPDATE as one array
-- (`= ANY(ARRAY(…))`) rather than `IN (…)`: a generic plan guesses a bound LIMIT at a tenth of
-- the table and would hash-join the subquery against a sequential scan; an array is probed
-- through the primary key. The sweeps below use the same form.
-- Each row's occurred_at (its delivery's month) comes back with it, and every later statement
-- of the batch (send contexts, record) carries the batch's least and greatest as bounds.
UPDATE notification_delivery_queue q
   SET claimed_at = clock_timestamp(),
       lease_expires_at = clock_timestamp() + make_interval(secs => :lease_seconds)
 WHERE q.delivery_id = ANY(ARRAY(
        SELECT c.delivery_id
          FROM notification_delivery_queue c
         WHERE c.claimed_at IS NULL
           AND c.channel = :channel
           AND c.next_attempt_at <= now()
         ORDER BY c.next_attempt_at, c.delivery_id
         LIMIT :limit
           FOR UPDATE SKIP LOCKED))
RETURNING q.delivery_id, q.tenant_id, q.occurred_at;

-- name: claim_due_deliveries_of_tenant
-- The same claim limited to one tenant (tests and single-tenant drains). A statement of its own
-- rather than `:tenant_id IS NULL OR tenant_id = :tenant_id` in the one above: that disjunction
-- is opaque to a generic plan and cost the shared claim its index. It walks the same index and
-- filters by tenant.
UPDATE notification_delivery_queue q
   SET claimed_at = clock_timestamp(),
       lease_expires_at = clock_timestamp() + make_interval(secs => :lease_seconds)
 WHERE q.delivery_id = ANY(ARRAY(
        SELECT c.delivery_id
          FROM notification_delivery_queue c
         WHERE c.claimed_at IS NULL
           AND c.channel = :channel
           AND c.next_attempt_at <= now()
           AND c.tenant_id = :tenant_id
         ORDER BY c.next_attempt_at, c.delivery_id
         LIMIT :limit
           FOR UPDATE SKIP LOCKED))
RETURNING q.delivery_id, q.tenant_id, q.occurred_at;

-- name: load_send_contexts
-- Everything the send of each claimed row needs but its event's columns (load_send_events: read
-- once per event in the batch, not once per row — every row of a broadcast carried the same
-- kind, variables document, action URL, priority and ids, decoded again on every row), read
-- under the row's tenant (row-level security). person is LEFT JOINed so an erased recipient
-- (user_id NULL) still loads and is recorded as gone instead of vanishing (R-CHAN-5); the push
-- token row is read now, at send time, not at fan-out (R-CHAN-13). Public ids come as text and
-- the recipient's variables as JSON text: the worker only ever prints the one, and decodes the
-- other faster than the driver's loader (load_send_contexts).
-- The claimed rows are read first, on their own, by primary key (MATERIALIZED: planned apart
-- from the joins). Planned together, a tenant with one event — one row to the planner — was read
-- event first, and the claimed ids ANDed with that event's (event_id, status) index: every entry
-- of a 1,000,000-person broadcast, 3,363,800 of them (134 ms), for each batch of 200.
-- Each row's claim (the lease token) is its queue row's, one probe of the queue's primary key
-- a row. As a join, a generic plan estimating a row or two on each side nested the two lists of
-- ids against each other: 640,000 comparisons, 77 ms, for a batch of 800.
WITH d AS MATERIALIZED (
    SELECT d.id, d.public_id, d.tenant_id, d.channel, d.provider_target_id, d.attempts,
           d.failure_count,
           (SELECT q.claimed_at FROM notification_delivery_queue q WHERE q.delivery_id = d.id)
               AS claimed_at,
           d.recipient_id, d.event_id, d.occurred_at, d.next_attempt_at
      FROM notification_delivery d
     WHERE d.id = ANY(CAST(:ids AS bigint[]))
       AND d.occurred_at BETWEEN :first_at AND :last_at
)
SELECT d.id, CAST(d.public_id AS text) AS public_id, d.tenant_id, d.channel, d.provider_target_id,
       d.attempts, d.failure_count, d.claimed_at, d.occurred_at, d.event_id,
       r.user_id, CAST(r.variables AS text) AS recipient_variables_json, r.locale,
       p.id AS person_id, p.deleted_at AS person_deleted_at, p.status AS person_status,
       p.email, p.phone, p.telegram_chat_id, p.telegram_can_write,
       p.slack_id, p.slack_can_write, p.teams_webhook_url, p.teams_can_write,
       t.token AS push_token, t.platform AS push_platform, t.is_active AS push_active,
       t.webpush_p256dh AS push_p256dh, t.webpush_auth AS push_auth,
       -- Quiet hours (issue 45): the row's due time, the person's window and zones; one probe of
       -- the preference set's key a row (herald.delivery.quiet).
       d.next_attempt_at AS due_at, p.timezone AS person_timezone,
       ps.quiet_hours_start, ps.quiet_hours_end, ps.quiet_hours_timezone,
       -- A hard bounce marked this email address or phone number undeliverable
       -- (herald.receipts, which hashes them the same way): one probe of the
       -- (tenant, channel, hash) key, for email, SMS and WhatsApp rows only.
       (d.channel IN ('email', 'sms', 'whatsapp') AND EXISTS (
            SELECT 1 FROM undeliverable_address u
             WHERE u.tenant_id = d.tenant_id AND u.channel = d.channel
               AND u.address_hash = encode(sha256(convert_to(
                   CASE d.channel WHEN 'email' THEN lower(btrim(p.email))
                        ELSE regexp_replace(p.phone, '[^0-9+]', '', 'g') END, 'UTF8')), 'hex')))
           AS address_undeliverable
  FROM d
  -- Each row's recipient, probed in that row's month (LATERAL … LIMIT 1 keeps it a probe a
  -- row). As a plain join, a generic plan estimating the claimed rows at 200 per month partition
  -- hash-joined a sequential scan of every month's recipients instead: with six months of
  -- 100,000 behind the queue, 340 ms for each batch of 200 (bench/delivery.py --history).
  CROSS JOIN LATERAL (
        SELECT r.user_id, r.variables, r.locale
          FROM notification_recipient r
         WHERE r.id = d.recipient_id AND r.occurred_at = d.occurred_at
         LIMIT 1) r
  LEFT JOIN person p ON p.id = r.user_id
  LEFT JOIN notification_preference_set ps ON ps.person_id = p.id
  LEFT JOIN notification_push_token t ON t.id = d.provider_target_id AND d.channel = 'push'
 ORDER BY d.id;

-- name: hold_until
-- Quiet hours (herald.delivery.quiet): claimed rows due inside the person's quiet hours go back
-- on the queue unclaimed, due when the hours end, in the claim's own transaction (so they never
-- read `processing` and no attempt is counted); the delivery's next_attempt_at says the same
-- (the trace's "waiting until"). Each queue row keeps the claim check: only a row this claim
-- still holds is moved.
WITH u AS (
    SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:claims AS timestamptz[]),
                         CAST(:untils AS timestamptz[])) AS u(id, claimed_at, until)
), moved AS (
    UPDATE notification_delivery_queue q
       SET claimed_at = NULL, lease_expires_at = NULL, next_attempt_at = u.until
      FROM u
     WHERE q.delivery_id = ANY(CAST(:ids AS bigint[])) AND q.delivery_id = u.id
       AND q.claimed_at IS NOT DISTINCT FROM u.claimed_at
    RETURNING q.delivery_id, q.occurred_at, u.until
)
UPDATE notification_delivery d
   SET next_attempt_at = moved.until
  FROM moved
 WHERE d.id = ANY(CAST(:ids AS bigint[])) AND d.id = moved.delivery_id
   AND d.occurred_at BETWEEN :first_at AND :last_at AND d.occurred_at = moved.occurred_at
RETURNING d.id;

-- name: record_outcomes
-- The recorder's one write for a batch of outcomes. Each row moves out of processing and clears
-- its claim and lease together (R-STATE-5, R-STATE-6); skips set skipped_at in the same UPDATE
-- (R-STATE-7); a row reaching dead writes its dead letter in the same statement (R-DLQ-17) with a
-- reference-only payload_ref (R-SCHEMA-52); each provider call leaves an attempt row with only
-- outcome, number, provider status, delay, code and message id (R-STATE-21), and the provider that
-- answered with the ones a failover passed over (herald.channels.failover).
-- Every outcome ends the delivery's time on the queue (a failed row waiting for its retry is
-- entered again by the reaper's re-queue), so the write starts by deleting the queue rows still
-- holding this batch's claim (`q.claimed_at = u.claimed_at`): the lease check, under the queue
-- row's lock. If the reaper reclaimed a row meanwhile, its queue row carries another claim (or
-- none), nothing is deleted for it, and its outcome is not written over the newer state.
WITH u AS (
    -- One JSON document for the batch, a row an array in OutcomeRows.COLUMNS' order: psycopg
    -- dumps sixteen Python lists element by element in Python (a tenth of the worker's CPU per
    -- delivery), json.dumps is one C call. As jsonb, parsed once and read by position: 0.62 ms
    -- for 200 email outcomes, against 1.34 ms as json (each ->> parses its element again) and
    -- 1.01 ms for keyed objects through json_to_recordset, whose dicts also cost 2.6x the Python.
    SELECT CAST(e->>0 AS bigint) AS id, CAST(e->>1 AS timestamptz) AS claimed_at,
           e->>2 AS status, CAST(e->>3 AS integer) AS attempt_inc,
           CAST(e->>4 AS integer) AS failure_inc, CAST(e->>5 AS integer) AS delay,
           e->>6 AS error, e->>7 AS message_id, e->>8 AS hint, e->>9 AS title, e->>10 AS body,
           e->>11 AS hash, CAST(e->>12 AS integer) AS template_version,
           CAST(e->>13 AS boolean) AS called, e->>14 AS provider_status, e->>15 AS outcome,
           e->>16 AS provider, e->>17 AS passed_over
      FROM jsonb_array_elements(CAST(:rows AS jsonb)) AS e
), held AS (
    DELETE FROM notification_delivery_queue q
     USING u
     WHERE q.delivery_id = ANY(ARRAY(SELECT u.id FROM u)) AND q.delivery_id = u.id
       -- Not `=`: it would prove the lease index's `claimed_at IS NOT NULL`, and the planner
       -- then read every entry that index holds (an entry for each claim since the last
       -- vacuum) instead of probing the batch's keys. u.claimed_at is never NULL.
       AND q.claimed_at IS NOT DISTINCT FROM u.claimed_at
    RETURNING q.delivery_id
), ended AS (
    UPDATE notification_delivery d
       SET status = u.status,
           attempts = d.attempts + u.attempt_inc,
           failure_count = d.failure_count + u.failure_inc,
           sent_at = CASE WHEN u.status = 'sent' THEN now() ELSE d.sent_at END,
           failed_at = CASE WHEN u.status IN ('failed', 'dead') THEN now() ELSE NULL END,
           dead_at = CASE WHEN u.status = 'dead' THEN now() ELSE NULL END,
           skipped_at = CASE WHEN u.status = ANY(CAST(:skipped_statuses AS text[])) THEN now() ELSE NULL END,
           next_attempt_at = CASE WHEN u.delay IS NULL THEN d.next_attempt_at
                                  ELSE now() + make_interval(secs => u.delay) END,
           last_error = u.error,
           provider_message_id = coalesce(u.message_id, d.provider_message_id),
           -- A person erased while this send was in flight keeps no hint or content (R-ERASE-*):
           -- erasure nulled them, and this late write must not put them back.
           destination_hint = CASE WHEN r.user_id IS NULL THEN NULL ELSE coalesce(u.hint, d.destination_hint) END,
           rendered_title = CASE WHEN r.user_id IS NULL THEN NULL ELSE coalesce(u.title, d.rendered_title) END,
           rendered_body = CASE WHEN r.user_id IS NULL THEN NULL ELSE coalesce(u.body, d.rendered_body) END,
           rendered_hash = CASE WHEN r.user_id IS NULL THEN NULL ELSE coalesce(u.hash, d.rendered_hash) END,
           template_version = coalesce(u.template_version, d.template_version)
      FROM u, notification_recipient r
     -- Each row is reached by its primary key, whatever the statistics say: the ids the lease
     -- check kept, as an array from a sub-select, probed through the key (the claim's form). A
     -- partial index of a state once drove this join instead and read every entry a
     -- broadcast's drain had left in it (327,200 entries for 200 outcomes, 140 ms a write).
     WHERE d.id = ANY(ARRAY(SELECT held.delivery_id FROM held)) AND d.id = u.id
       AND r.id = d.recipient_id
       -- The batch's months (the claim's bounds): each id probed in its month, not in all.
       AND d.occurred_at BETWEEN :first_at AND :last_at
       AND r.occurred_at = d.occurred_at AND r.occurred_at BETWEEN :first_at AND :last_at
    RETURNING d.id, d.public_id, d.tenant_id, d.channel, d.status, d.attempts, d.last_error,
              d.event_id, d.occurred_at
), {{ended_outbox}}
), evidence AS (
    INSERT INTO notification_delivery_attempt
           (tenant_id, delivery_id, outcome, attempt_number, provider_status, retry_delay_seconds,
            error_code, provider_message_id, occurred_at, provider, passed_over)
    SELECT ended.tenant_id, ended.id, u.outcome, ended.attempts, u.provider_status, u.delay, u.error, u.message_id,
           ended.occurred_at, u.provider, u.passed_over
      FROM ended JOIN u ON u.id = ended.id
     WHERE u.called
)
-- The transaction's id comes back with the rows: if the connection is lost while COMMIT is in
-- flight, the recorder asks pg_xact_status() whether this write landed (transaction_status).
SELECT id, CAST(pg_current_xact_id() AS text) AS xid FROM ended;

-- name: transaction_status
-- 'committed', 'aborted' or 'in progress'; NULL when the id is too old for the commit log.
SELECT pg_xact_status(CAST(:xid AS xid8)) AS status;

-- name: requeue_due_failures
-- Reaper sweep 2: a failed row whose backoff has elapsed goes back to queued, clearing failed_at
-- and last_error (R-STATE-10) so "failed once, then delivered" is not counted as a failure, and
-- enters the queue, due now, in the same statement. Every row it touches leaves its candidate
-- set; no watermark (R-REAPER-6).
WITH entered AS (
    UPDATE notification_delivery d
       SET status = 'queued', failed_at = NULL, last_error = NULL
     WHERE d.id = ANY(ARRAY(
            SELECT c.id
              FROM notification_delivery c
             WHERE c.status = 'failed' AND c.next_attempt_at <= now()
             ORDER BY c.next_attempt_at
             LIMIT :limit
               FOR UPDATE SKIP LOCKED))
    RETURNING d.id, d.tenant_id, d.channel, d.occurred_at, d.next_attempt_at, d.status
), queue_rows AS (
    {{enter_queue}}
)
SELECT channel FROM entered;

-- name: release_due_inbox
-- deliverAt's inbox rows (herald.fanout.pagewrite): an in-app delivery held on the queue until
-- its person's moment is delivered once it is due — it leaves the queue and becomes `delivered`
-- in one statement, so the inbox shows it from that commit on and never twice. Found through the
-- queue's due index (channel 'in_app', in due order), like a channel worker's claim.
WITH due AS (
    DELETE FROM notification_delivery_queue q
     WHERE q.delivery_id = ANY(ARRAY(
            SELECT c.delivery_id
              FROM notification_delivery_queue c
             WHERE c.claimed_at IS NULL
               AND c.channel = 'in_app'
               AND c.next_attempt_at <= now()
             ORDER BY c.next_attempt_at, c.delivery_id
             LIMIT :limit
               FOR UPDATE SKIP LOCKED))
    RETURNING q.delivery_id, q.occurred_at
)
UPDATE notification_delivery d
   SET status = 'delivered', delivered_at = now()
  FROM due, notification_recipient r, notification_event e
 WHERE d.id = ANY(ARRAY(SELECT due.delivery_id FROM due)) AND d.id = due.delivery_id
   AND d.occurred_at = due.occurred_at AND d.status = 'queued'
   AND r.id = d.recipient_id AND r.occurred_at = d.occurred_at AND e.id = d.event_id
-- What the realtime notice of each may say (herald.fanout.service.InAppNotice): no title, no body.
RETURNING d.id, d.tenant_id, r.user_id AS person_id, r.public_id AS recipient_public_id, e.kind,
          e.category, e.priority, e.occurred_at, r.audience_role_id;

-- name: reclaim_expired_leases
-- Reaper sweep 1: a claimed queue row whose lease has passed is reclaimed, never left stranded
-- (R-REAPER-1). Every reclaim counts an attempt (R-REAPER-2) and a lease expiry on the delivery,
-- separately from provider failures (R-REAPER-3, R-OBS-5); a reclaim that reaches the maximum
-- ends the row as dead with its dead letter and leaves the queue instead of queueing it again
-- (R-REAPER-4). The expired rows are found through notification_delivery_queue_lease_idx and
-- locked first, and each delivery is reached by its primary key within their months (no state
-- in the statement: a partial index of one would drive the join). A queue row whose delivery is
-- gone (none of Herald's writers leave one) is deleted rather than retried for ever.
WITH expired AS MATERIALIZED (
    SELECT c.delivery_id, c.occurred_at
      FROM notification_delivery_queue c
     WHERE c.claimed_at IS NOT NULL AND c.lease_expires_at < now()
     ORDER BY c.lease_expires_at
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
), ended AS (
    UPDATE notification_delivery d
       SET status = CASE WHEN d.attempts + 1 >= :max_attempts THEN 'dead' ELSE 'queued' END,
           attempts = d.attempts + 1,
           lease_expiry_count = d.lease_expiry_count + 1,
           next_attempt_at = now(),
           dead_at = CASE WHEN d.attempts + 1 >= :max_attempts THEN now() END,
           failed_at = CASE WHEN d.attempts + 1 >= :max_attempts THEN now() END,
           last_error = CASE WHEN d.attempts + 1 >= :max_attempts THEN 'LEASE_EXPIRED' END
     WHERE d.id = ANY(ARRAY(SELECT expired.delivery_id FROM expired))
       AND d.occurred_at BETWEEN (SELECT min(occurred_at) FROM expired)
                             AND (SELECT max(occurred_at) FROM expired)
    RETURNING d.id, d.public_id, d.tenant_id, d.channel, d.status, d.attempts, d.last_error,
              d.event_id, d.occurred_at
), requeued AS (
    UPDATE notification_delivery_queue q
       SET claimed_at = NULL, lease_expires_at = NULL, next_attempt_at = now()
      FROM ended
     WHERE q.delivery_id = ended.id AND ended.status = 'queued'
), dropped AS (
    DELETE FROM notification_delivery_queue q
     WHERE q.delivery_id = ANY(ARRAY(SELECT expired.delivery_id FROM expired
                                     EXCEPT SELECT ended.id FROM ended WHERE ended.status = 'queued'))
), {{ended_outbox}}
)
SELECT id, status, channel FROM ended;

-- name: backfill_unconfigured
-- Re-drive skipped_unconfigured rows of channels configured now (R-BACKFILL-1..3) and younger than
-- the backfill window (R-BACKFILL-6), by compare-and-set on the status (R-BACKFILL-4), clearing
-- skipped_at in the same statement (R-BACKFILL-5) and making the row due (R-PLAT-4): it enters
-- the queue in the same statement.
-- One channel per statement: with `channel = ANY(…)` the (channel, queued_at) index cannot give
-- the order across channels, and every skipped row in the window would be sorted each batch.
WITH entered AS (
    UPDATE notification_delivery d
       SET status = 'queued', skipped_at = NULL, next_attempt_at = now()
     WHERE d.id = ANY(ARRAY(
            SELECT c.id
              FROM notification_delivery c
             WHERE c.status = 'skipped_unconfigured'
               AND c.channel = :channel
               AND c.queued_at > now() - make_interval(hours => :max_age_hours)
             ORDER BY c.queued_at
             LIMIT :limit
               FOR UPDATE SKIP LOCKED))
       AND d.status = 'skipped_unconfigured'
    RETURNING d.id, d.tenant_id, d.channel, d.occurred_at, d.next_attempt_at, d.status
), queue_rows AS (
    {{enter_queue}}
)
SELECT channel FROM entered;

-- name: backfill_unconfigured_of_tenant
-- The same for one tenant whose own provider account configures a channel the deployment leaves
-- unconfigured (herald.delivery.accounts): its rows, and no other tenant's, are re-driven.
-- Re-drive skipped_unconfigured rows of channels configured now (R-BACKFILL-1..3) and younger than
-- the backfill window (R-BACKFILL-6), by compare-and-set on the status (R-BACKFILL-4), clearing
-- skipped_at in the same statement (R-BACKFILL-5) and making the row due (R-PLAT-4): it enters
-- the queue in the same statement.
-- One channel per statement: with `channel = ANY(…)` the (channel, queued_at) index cannot give
-- the order across channels, and every skipped row in the window would be sorted each batch.
WITH entered AS (
    UPDATE notification_delivery d
       SET status = 'queued', skipped_at = NULL, next_attempt_at = now()
     WHERE d.id = ANY(ARRAY(
            SELECT c.id
              FROM notification_delivery c
             WHERE c.status = 'skipped_unconfigured'
               AND c.channel = :channel
               AND c.tenant_id = :tenant_id
               AND c.queued_at > now() - make_interval(hours => :max_age_hours)
             ORDER BY c.queued_at
             LIMIT :limit
               FOR UPDATE SKIP LOCKED))
       AND d.status = 'skipped_unconfigured'
    RETURNING d.id, d.tenant_id, d.channel, d.occurred_at, d.next_attempt_at, d.status
), queue_rows AS (
    {{enter_queue}}
)
SELECT channel FROM entered;

-- name: insert_replay
-- Replay inserts a new queued row pointing at the original (R-DLQ-5, R-DLQ-12, R-DLQ-14), and
-- its queue row in the same statement; the original keeps its failed_at, last_error and
-- provider_message_id (R-DLQ-13). The new row is itself the channel work (R-PLAT-6).
WITH entered AS (
    INSERT INTO notification_delivery
           (tenant_id, event_id, recipient_id, user_id, channel, provider_target_id, replay_of_delivery_id,
            status, queued_at, next_attempt_at, occurred_at)
    SELECT o.tenant_id, o.event_id, o.recipient_id, o.user_id, o.channel, o.provider_target_id, o.id, 'queued', now(), now(),
           o.occurred_at
      FROM notification_delivery o
     WHERE o.tenant_id = :tenant_id AND o.public_id = :delivery_public_id AND o.channel <> 'in_app'
    RETURNING id, public_id, tenant_id, channel, occurred_at, next_attempt_at, status
), queue_rows AS (
    {{enter_queue}}
)
SELECT id, public_id, channel FROM entered;

-- name: mark_dead_letter_replayed
-- The replay's compare-and-set, the last statement of its transaction (R-DLQ-4, R-DLQ-15): a
-- concurrent second replay updates nothing and rolls back its own insert with it.
UPDATE dead_letter
   SET replayed_at = now(), replayed_by = :actor, replay_job_id = :replay_job_id
 WHERE id = :id AND replayed_at IS NULL;

-- name: load_send_events
-- The columns of a claimed batch's events, once per event (load_send_contexts' rows carry only the
-- event's id), under the tenant. The variables come as text, decoded once per event.
SELECT id, kind, CAST(variables AS text) AS variables_json, action_url, priority,
       CAST(public_id AS text) AS event_public_id, origin_request_id, traceparent
  FROM notification_event
 WHERE id = ANY(CAST(:ids AS bigint[]));

-- name: published_overrides
-- The published operator overrides of the kinds in a claimed batch, read once per batch.
SELECT tenant_id, kind, channel, locale, title, body, version
  FROM notification_template
 WHERE status = 'published'
   AND (tenant_id, kind) IN (SELECT * FROM unnest(CAST(:tenants AS text[]), CAST(:kinds AS text[])));

-- name: extend_leases
-- The batch's heartbeat: queue rows still held by this claim (same claimed_at) get a fresh
-- lease, so a slow provider never lets a live worker's rows expire under it. Only the narrow
-- queue row is written. A row missing from the answer was reclaimed meanwhile and is no longer
-- this worker's to send.
UPDATE notification_delivery_queue q
   SET lease_expires_at = clock_timestamp() + make_interval(secs => :lease_seconds)
  FROM unnest(CAST(:ids AS bigint[]), CAST(:claimed_ats AS timestamptz[])) AS h(id, claimed_at)
 WHERE q.delivery_id = h.id AND q.claimed_at = h.claimed_at
RETURNING q.delivery_id AS id;

-- name: cancel_unclaimed_deliveries
-- A cancelled broadcast (DESIGN.md §5.2, §7): at most :limit of its event's deliveries that no
-- worker holds — queued and unclaimed, held for a digest, or failed and waiting for a retry —
-- become `cancelled`, through the (event_id, status) index, and their queue rows go with them.
-- A claimed row (processing: a call in flight) is left to finish and be recorded; SKIP LOCKED
-- leaves a queue row a worker is claiming at this instant to that worker (if its claim rolls
-- back, the next statement takes it), and never waits, so it cannot deadlock with the recorder,
-- which locks the queue row and then the delivery. `cancelled` is final: the claim takes only queue rows, and the
-- recorder and the reaper only ever move claimed or failed ones.
WITH candidates AS MATERIALIZED (
    SELECT c.id, c.status
      FROM notification_delivery c
     WHERE c.event_id = :event_id AND c.status IN ('queued', 'failed', 'held')
       AND NOT EXISTS (SELECT 1 FROM notification_delivery_queue dq
                        WHERE dq.delivery_id = c.id AND dq.claimed_at IS NOT NULL)
     LIMIT :limit
       FOR UPDATE SKIP LOCKED
), unclaimed AS MATERIALIZED (
    SELECT q.delivery_id
      FROM notification_delivery_queue q
     WHERE q.delivery_id = ANY(ARRAY(SELECT id FROM candidates WHERE status = 'queued'))
       AND q.claimed_at IS NULL
       FOR UPDATE SKIP LOCKED
), dequeued AS (
    DELETE FROM notification_delivery_queue q
     WHERE q.delivery_id = ANY(ARRAY(SELECT delivery_id FROM unclaimed))
)
UPDATE notification_delivery d
   SET status = 'cancelled'
 WHERE d.id = ANY(ARRAY(SELECT delivery_id FROM unclaimed
                        UNION ALL
                        SELECT id FROM candidates WHERE status <> 'queued'))
   AND d.event_id = :event_id;

-- name: index_scans_only
-- For the per-event statements (queries._through_an_index): sequential and bitmap scans off for
-- the rest of the transaction; returns the values to put back.
WITH was AS MATERIALIZED (
    SELECT current_setting('enable_seqscan') AS seqscan,
           current_setting('enable_bitmapscan') AS bitmapscan)
SELECT seqscan, bitmapscan, set_config('enable_seqscan', 'off', true),
       set_config('enable_bitmapscan', 'off', true)
  FROM was;

-- name: index_scans_restore
SELECT set_config('enable_seqscan', :seqscan, true), set_config('enable_bitmapscan', :bitmapscan, true);

-- name: deliveries_in_flight
-- Whether any delivery of the event still has work ahead of it (queued — claimed or not —,
-- failed or held), through the (event_id, status) index: four short range probes, never a scan of the
-- event. Run with sequential and bitmap scans off (queries._through_an_index): stale statistics
-- of one dominant event once made this a sequential scan of the table's growing finished
-- prefix, and then a bitmap scan of every entry the event's drain had left in the index.
SELECT EXISTS (
        SELECT 1 FROM notification_delivery
         WHERE event_id = :event_id AND status IN ('queued', 'failed', 'held')) AS busy;
