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
