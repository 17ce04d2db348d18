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
-- A hard bounce: the recipient's current email address, hashed exactly as load_send_contexts
-- hashes it, is undeliverable from now on. A person already erased has no address to mark.
INSERT INTO undeliverable_address (tenant_id, channel, address_hash, reason, delivery_public_id)
SELECT p.tenant_id, 'email',
       encode(sha256(convert_to(lower(btrim(p.email)), 'UTF8')), 'hex'),
       :reason, :delivery_public_id
  FROM notification_recipient r
  JOIN person p ON p.id = r.user_id
 WHERE r.id = :recipient_id AND p.email IS NOT NULL AND btrim(p.email) <> ''
ON CONFLICT (tenant_id, channel, address_hash) DO NOTHING;
