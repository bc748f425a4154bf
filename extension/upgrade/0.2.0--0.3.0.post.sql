-- Sent messages move to the history's default partition, where the worker's retention
-- deletes them once pg_outbox.sent_retention has passed.  Messages in flight under a
-- 0.2.0 worker are pending again: their attempt was counted when they were claimed.
INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                            attempts, last_http_status, created_at, sent_at)
SELECT m.id, m.endpoint, m.event_type, m.payload, m.headers, m.ordering_key, m.idempotency_key,
       m.attempts, m.last_http_status, m.created_at, coalesce(m.sent_at, now())
  FROM outbox.messages m
 WHERE m.status = 'sent';
DELETE FROM outbox.messages m WHERE m.status = 'sent';

DROP INDEX outbox.messages_claim_idx, outbox.messages_lease_idx, outbox.messages_ordering_idx,
           outbox.messages_endpoint_status_idx, outbox.messages_sent_at_idx;
ALTER TABLE outbox.messages DROP COLUMN status, DROP COLUMN lease_until, DROP COLUMN sent_at;
-- Messages enqueued before the update keep the webhook-id they were sent with (msg_<id>);
-- the ones after carry the instance id (outbox.instance, created above).
UPDATE outbox.instance SET legacy_below = coalesce(pg_catalog.pg_sequence_last_value(
    pg_catalog.pg_get_serial_sequence('outbox.messages', 'id')::regclass), 0) + 1;
-- A request's timeout is bounded (5 minutes): a claim lasts as long as its request can.
UPDATE outbox.endpoints SET timeout_ms = 300000 WHERE timeout_ms > 300000;
ALTER TABLE outbox.endpoints DROP CONSTRAINT endpoints_timeout_ms_check,
    ADD CONSTRAINT endpoints_timeout_ms_check CHECK (timeout_ms > 0 AND timeout_ms <= 300000);
ALTER TABLE outbox.endpoints ADD COLUMN concurrency int CHECK (concurrency > 0),
                             ADD COLUMN rate_limit int CHECK (rate_limit > 0);
COMMENT ON TABLE outbox.messages IS
    'pg_outbox messages waiting for delivery (the backlog); outbox.message(id) finds any message';
-- Per-key commit order: a message waiting behind its key's head has a place in the
-- key's commit order and is not in the claim index (outbox._order_queued, called for
-- every ordered endpoint at the end of the update, numbers them).
ALTER TABLE outbox.messages
    ADD COLUMN ordering_seq bigint CHECK (ordering_seq IS NULL OR ordering_key IS NOT NULL);
CREATE SEQUENCE outbox.commit_order;
CREATE INDEX messages_claim_idx ON outbox.messages (endpoint, next_attempt_at) WHERE ordering_seq IS NULL;
CREATE INDEX messages_ordering_idx ON outbox.messages (endpoint, ordering_key, ordering_seq NULLS FIRST)
    WHERE ordering_key IS NOT NULL;

-- outbox.enqueue does its work in C now (src/pg/producer/enqueue.cpp).
DROP FUNCTION outbox._enqueue(text, jsonb, text, jsonb, text, text, timestamptz, regrole, boolean);
