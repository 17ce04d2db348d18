-- name: upsert_people
-- Insert or update any number of people in one statement: each column travels as one array, so
-- 1,000 people are one round trip. Rows go in in external_id order, so two overlapping batches
-- lock their rows in the same order and cannot deadlock each other. An upsert revives a
-- soft-deleted person (deleted_at = NULL). A changed Telegram chat resets telegram_can_write,
-- because a block recorded against the old chat says nothing about the new one; the same for a
-- changed Slack id (slack_can_write) and Teams webhook (teams_can_write). In RETURNING,
-- xmax = 0 exactly for a freshly inserted row (an updated one carries this transaction's id).
INSERT INTO person AS p (tenant_id, external_id, full_name, email, phone, locale, timezone,
                         country, status, telegram_chat_id, slack_id, teams_webhook_url)
SELECT :tenant_id, r.external_id, r.full_name, r.email, r.phone, r.locale, r.timezone,
       r.country, r.status, r.telegram_chat_id, r.slack_id, r.teams_webhook_url
  FROM unnest(CAST(:external_id AS text[]), CAST(:full_name AS text[]), CAST(:email AS text[]),
              CAST(:phone AS text[]), CAST(:locale AS text[]), CAST(:timezone AS text[]),
              CAST(:country AS text[]), CAST(:status AS text[]),
              CAST(:telegram_chat_id AS text[]), CAST(:slack_id AS text[]),
              CAST(:teams_webhook_url AS text[]))
       AS r(external_id, full_name, email, phone, locale, timezone, country, status,
            telegram_chat_id, slack_id, teams_webhook_url)
 ORDER BY r.external_id
    ON CONFLICT (tenant_id, external_id) DO UPDATE SET
       full_name = excluded.full_name,
       email = excluded.email,
       phone = excluded.phone,
       locale = excluded.locale,
       timezone = excluded.timezone,
       country = excluded.country,
       status = excluded.status,
       telegram_chat_id = excluded.telegram_chat_id,
       telegram_can_write = CASE
           WHEN p.telegram_chat_id IS DISTINCT FROM excluded.telegram_chat_id THEN true
           ELSE p.telegram_can_write
       END,
       slack_id = excluded.slack_id,
       slack_can_write = CASE
           WHEN p.slack_id IS DISTINCT FROM excluded.slack_id THEN true
           ELSE p.slack_can_write
       END,
       teams_webhook_url = excluded.teams_webhook_url,
       teams_can_write = CASE
           WHEN p.teams_webhook_url IS DISTINCT FROM excluded.teams_webhook_url THEN true
           ELSE p.teams_can_write
       END,
       updated_at = now(),
       deleted_at = NULL
RETURNING p.id, p.public_id, p.external_id, (p.xmax = 0) AS created;

-- name: drop_other_roles
-- Remove every grant of the given people that is not in the wanted (person, role) pairs. Role
-- sets are replaced by difference, not delete-all-then-insert, so an unchanged grant keeps its
-- row and created_at, and re-sending a person costs no churn.
DELETE FROM person_role pr
 WHERE pr.tenant_id = :tenant_id
   AND pr.person_id = ANY(CAST(:person_ids AS bigint[]))
   AND NOT EXISTS (
       SELECT 1
         FROM unnest(CAST(:grant_person AS bigint[]), CAST(:grant_role AS bigint[]))
              AS g(person_id, role_id)
        WHERE g.person_id = pr.person_id AND g.role_id = pr.role_id);

-- name: grant_roles
-- Add the wanted (person, role) pairs that are missing; existing grants are left as they are.
INSERT INTO person_role (tenant_id, person_id, role_id)
SELECT :tenant_id, g.person_id, g.role_id
  FROM unnest(CAST(:grant_person AS bigint[]), CAST(:grant_role AS bigint[]))
       AS g(person_id, role_id)
 ORDER BY g.person_id, g.role_id
    ON CONFLICT (person_id, role_id) DO NOTHING;

-- name: stored_people
-- The live people among the given external ids, looked up one by one through the
-- (tenant_id, external_id) key: a plain `external_id = ANY(...)` lets a generic prepared plan walk
-- the whole tenant and test each row against the array, which grows with the directory.
SELECT p.id, p.external_id, p.full_name, p.email, p.phone, p.locale, p.timezone, p.country,
       p.status, p.telegram_chat_id, p.slack_id, p.teams_webhook_url
  FROM unnest(CAST(:external_ids AS text[])) AS wanted(external_id)
  JOIN person p ON p.tenant_id = :tenant_id AND p.external_id = wanted.external_id
 WHERE p.deleted_at IS NULL;

-- name: stored_person_roles
-- The role codes of the given people (one array parameter, however many people).
SELECT pr.person_id, r.code
  FROM person_role pr
  JOIN role r ON r.id = pr.role_id
 WHERE pr.tenant_id = :tenant_id
   AND pr.person_id = ANY(CAST(:person_ids AS bigint[]));
