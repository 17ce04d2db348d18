-- name: find_by_provider_message_id
-- The delivery a provider's receipt names, across tenants (the callback carries no tenant): at
-- most two rows are read, so an id matching more than one delivery is seen as ambiguous and
-- changes nothing. Through notification_delivery_provider_message_idx.
SELECT id, tenant_id
  FROM notification_delivery
 WHERE provider_message_id = :provider_message_id AND channel = :channel
 LIMIT 2;

-- name: apply_receipt
-- sent → delivered or bounced, as a compare-and-set on `sent` (run under the delivery's tenant):
-- a duplicate, a receipt arriving after another final one, or one for a row not yet recorded as
-- sent updates nothing. A bounce keeps the provider's code in last_error.
UPDATE notification_delivery
   SET status = CAST(:status AS text),
       delivered_at = CASE WHEN CAST(:status AS text) = 'delivered' THEN now() ELSE delivered_at END,
       bounced_at = CASE WHEN CAST(:status AS text) = 'bounced' THEN now() ELSE bounced_at END,
       last_error = CASE WHEN CAST(:status AS text) = 'bounced' THEN :code ELSE last_error END
 WHERE id = :id AND status = 'sent'
RETURNING id, public_id, recipient_id;

-- name: mark_undeliverable
-- A hard bounce: the recipient's current address on the channel is undeliverable from now on,
-- hashed exactly as load_send_contexts hashes it — an email lower-cased and trimmed, a phone
-- number with everything but digits and '+' removed (the number as the directory stores it, so a
-- changed number is tried again). A person already erased has no address to mark.
INSERT INTO undeliverable_address (tenant_id, channel, address_hash, reason, delivery_public_id)
SELECT p.tenant_id, CAST(:channel AS text),
       encode(sha256(convert_to(
           CASE CAST(:channel AS text)
                WHEN 'email' THEN lower(btrim(p.email))
                ELSE regexp_replace(p.phone, '[^0-9+]', '', 'g') END, 'UTF8')), 'hex'),
       :reason, :delivery_public_id
  FROM notification_recipient r
  JOIN person p ON p.id = r.user_id
 WHERE r.id = :recipient_id
   AND CASE CAST(:channel AS text)
            WHEN 'email' THEN btrim(coalesce(p.email, '')) <> ''
            ELSE regexp_replace(coalesce(p.phone, ''), '[^0-9+]', '', 'g') <> '' END
ON CONFLICT (tenant_id, channel, address_hash) DO NOTHING;

-- name: park_receipt
-- A receipt whose message id no delivery carries yet (the recorder has not written it): kept
-- until it does. Run as the owner (the route's all-tenant transaction): the row belongs to no
-- tenant until then. A duplicate callback is the same (channel, id, status): nothing is added.
INSERT INTO pending_receipt
       (provider, channel, provider_message_id, status, code, hard, provider_status)
VALUES (:provider, :channel, :provider_message_id, :status, :code, :hard, :provider_status)
ON CONFLICT (channel, provider_message_id, status) DO NOTHING;

-- name: take_parked_receipts
-- The recorder's transaction, under the tenant whose sends it just recorded: the kept receipts
-- for those message ids, deleted as they are read (each applied once), oldest first. Row-level
-- security shows this tenant only the rows its own deliveries' message ids name.
DELETE FROM pending_receipt p
 WHERE p.channel = CAST(:channel AS text)
   AND p.provider_message_id = ANY(CAST(:provider_message_ids AS text[]))
RETURNING p.id, p.provider_message_id, p.status, p.code, p.hard;

-- name: lock_message_ids
-- A transaction-scoped advisory lock for each (channel, message id), in one order (no deadlock
-- between two callers): the receipt route takes it before looking for the delivery, the
-- recorder after writing the id and before taking the kept receipts. Whichever comes second sees
-- what the first committed, so a receipt is never kept after its send's recorder has looked.
-- (namespace "HRCP", the id's hash: a collision only makes two callers wait for each other).
SELECT pg_advisory_xact_lock(1213350736, hashtext(CAST(:channel AS text) || ':' || m))
  FROM (SELECT DISTINCT unnest(CAST(:provider_message_ids AS text[])) AS m ORDER BY 1) ids;

-- name: mark_person_undeliverable
-- A provider's answer to the send itself said the number (or address) can never take a message
-- (Aakash's data.invalid): the person's current one is marked, hashed exactly as
-- mark_undeliverable hashes it. Run under the delivery's tenant, in the recorder's transaction.
INSERT INTO undeliverable_address (tenant_id, channel, address_hash, reason, delivery_public_id)
SELECT p.tenant_id, CAST(:channel AS text),
       encode(sha256(convert_to(
           CASE CAST(:channel AS text)
                WHEN 'email' THEN lower(btrim(p.email))
                ELSE regexp_replace(p.phone, '[^0-9+]', '', 'g') END, 'UTF8')), 'hex'),
       :reason, :delivery_public_id
  FROM person p
 WHERE p.id = :person_id
   AND CASE CAST(:channel AS text)
            WHEN 'email' THEN btrim(coalesce(p.email, '')) <> ''
            ELSE regexp_replace(coalesce(p.phone, ''), '[^0-9+]', '', 'g') <> '' END
ON CONFLICT (tenant_id, channel, address_hash) DO NOTHING;
