-- Fragments shared by the statements that write webhook messages (`-- include:` this file).

-- fragment: delivery_payload
-- A delivery.<status> message's payload (docs/webhooks.md), from the delivery `dv` (public_id,
-- channel, status, attempts, last_error) and its event `ev` (public_id, kind): one definition for
-- the worker's outcomes and lease reclaims (delivery/queries.sql) and for receipts
-- (emit_for_deliveries), so the published shape cannot drift between them.
jsonb_build_object(
    'type', 'delivery.' || dv.status,
    'timestamp', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
    'data', jsonb_strip_nulls(jsonb_build_object(
        'deliveryId', dv.public_id, 'eventId', ev.public_id, 'kind', ev.kind,
        'channel', dv.channel, 'status', dv.status, 'attempts', dv.attempts,
        'errorCode', split_part(dv.last_error, ' ', 1))))
