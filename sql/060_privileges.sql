--
-- Privileges: nothing for PUBLIC; the producer and operator grants that docs/operations.md
-- documents (the comment block at the end of the install script), applied exactly.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters
    RESTART IDENTITY;
DELETE FROM outbox.endpoints;

SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_producer;
DROP ROLE IF EXISTS regress_operator;
DROP ROLE IF EXISTS regress_nobody;
RESET client_min_messages;
CREATE ROLE regress_producer;
CREATE ROLE regress_operator;
CREATE ROLE regress_nobody;

-- producer
GRANT USAGE ON SCHEMA outbox TO regress_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz),
    outbox.publish(text, jsonb, jsonb, text, text, timestamptz) TO regress_producer;

-- operator
GRANT USAGE ON SCHEMA outbox, dlq TO regress_operator;
GRANT EXECUTE ON FUNCTION
    outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int, boolean, text, text, int),
    outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int, text, text, int),
    outbox.drop_endpoint(text, boolean),
    outbox.pause_endpoint(text),
    outbox.resume_endpoint(text),
    outbox.rotate_secret(text, text, interval),
    outbox.endpoint_public_key(text),
    outbox.purge(interval),
    outbox.metrics(),
    outbox.worker_status(),
    outbox.message(bigint),
    outbox.grant_send(text, name),
    outbox.revoke_send(text, name),
    outbox.subscribe(text, text[]),
    outbox.unsubscribe(text, text[]),
    outbox.replay(text, timestamptz, timestamptz, text),
    dlq.requeue(bigint, jsonb),
    dlq.requeue_all(text, text, timestamptz),
    dlq.discard(bigint, text)
  TO regress_operator;
GRANT SELECT ON outbox.endpoints, outbox.endpoint_senders, outbox.messages, outbox.history, outbox.attempts,
                outbox.subscriptions, outbox.endpoint_stats, dlq.dead_letters, dlq.summary
  TO regress_operator;

SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
-- producer, per endpoint
SELECT outbox.grant_send('billing', 'regress_producer');
SELECT outbox.create_endpoint('legacy', channel => 'legacy');
SELECT outbox.enqueue('legacy', '{"secret_payload": "only for operators"}'::jsonb);
SELECT outbox.drop_endpoint('legacy', force => true);
SELECT outbox.create_endpoint('legacy', channel => 'legacy');

------------------------------------------------------------------------------------------
-- A role with no grant: nothing at all.
------------------------------------------------------------------------------------------
SET ROLE regress_nobody;
SELECT outbox.enqueue('billing', '{}'::jsonb);
\echo :SQLSTATE
SELECT count(*) FROM outbox.endpoints;
\echo :SQLSTATE
SELECT count(*) FROM dlq.summary;
\echo :SQLSTATE
RESET ROLE;

------------------------------------------------------------------------------------------
-- producer: enqueue works without any table privilege; nothing else does.
------------------------------------------------------------------------------------------
SET ROLE regress_producer;
SELECT outbox.enqueue('billing', '{"from": "producer"}'::jsonb, event_type => 'order.created') > 0 AS enqueued;
BEGIN;
SELECT outbox.enqueue('billing', '{"from": "producer", "n": 2}'::jsonb, idempotency_key => 'p-2') AS p2 \gset
SELECT outbox.enqueue('billing', '{"from": "producer", "n": 2}'::jsonb, idempotency_key => 'p-2') = :p2 AS same_id;
COMMIT;
-- Its errors are the usual ones.
SELECT outbox.enqueue('nope', '{}'::jsonb);
\echo :SQLSTATE
-- No reading: messages (other producers' payloads, delivered ones too), where a
-- message stands, secrets, endpoints, stats, DLQ, the worker's claims.
SELECT payload FROM outbox.messages;
\echo :SQLSTATE
SELECT payload FROM outbox.history;
\echo :SQLSTATE
SELECT payload FROM outbox.history_default;
\echo :SQLSTATE
SELECT count(*) FROM outbox.history_counts;
\echo :SQLSTATE
SELECT count(*) FROM outbox.attempts;
\echo :SQLSTATE
SELECT count(*) FROM outbox.attempts_default;
\echo :SQLSTATE
SELECT count(*) FROM outbox.claims;
\echo :SQLSTATE
SELECT status FROM outbox.message(1);
\echo :SQLSTATE
SELECT secret FROM outbox.endpoint_secrets;
\echo :SQLSTATE
SELECT name FROM outbox.endpoints;
\echo :SQLSTATE
SELECT endpoint FROM outbox.endpoint_stats;
\echo :SQLSTATE
SELECT payload FROM dlq.dead_letters;
\echo :SQLSTATE
SELECT count(*) FROM dlq.summary;
\echo :SQLSTATE
-- No writing around enqueue.
INSERT INTO outbox.messages (endpoint, payload) VALUES ('billing', '{}');
\echo :SQLSTATE
UPDATE outbox.messages SET attempts = 0;
\echo :SQLSTATE
DELETE FROM outbox.messages;
\echo :SQLSTATE
INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
VALUES (1, 'billing', '{}', 1, now(), now());
\echo :SQLSTATE
INSERT INTO outbox.claims (message_ids, attempts) VALUES ('{1}', '{1}');
\echo :SQLSTATE
-- No endpoint administration, no DLQ, no metrics, no internals.
SELECT outbox.create_endpoint('evil', url => 'http://evil.example.com/');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', url => 'http://evil.example.com/');
\echo :SQLSTATE
SELECT outbox.drop_endpoint('billing', force => true);
\echo :SQLSTATE
SELECT outbox.pause_endpoint('billing');
\echo :SQLSTATE
SELECT dlq.requeue(1);
\echo :SQLSTATE
SELECT dlq.discard(1);
\echo :SQLSTATE
SELECT outbox.purge();
\echo :SQLSTATE
SELECT outbox.metrics();
\echo :SQLSTATE
SELECT outbox.worker_status();
\echo :SQLSTATE
SELECT outbox._check_url('http://example.com/');
\echo :SQLSTATE
SELECT outbox._request_wake();
\echo :SQLSTATE
SELECT outbox._boundary_selftest('ok');
\echo :SQLSTATE
SELECT * FROM outbox._message_counts;
\echo :SQLSTATE
SELECT outbox._payload_size('{}');
\echo :SQLSTATE
SELECT outbox._claimable('outbox.messages'::regclass, '(0,1)');
\echo :SQLSTATE
SELECT outbox._history_prepare(3600);
\echo :SQLSTATE
SELECT outbox._history_retire('infinity', true);
\echo :SQLSTATE
SELECT outbox._partitions_prepare('outbox.attempts', 3600);
\echo :SQLSTATE
SELECT outbox._partitions_retire('outbox.attempts', 'infinity', true);
\echo :SQLSTATE
RESET ROLE;
SELECT endpoint, payload, event_type, idempotency_key FROM outbox.messages ORDER BY id;
SELECT count(*) AS claims FROM outbox.claims;
SELECT count(*) AS time_partitions FROM outbox._history_partitions();

------------------------------------------------------------------------------------------
-- operator: endpoints, DLQ, stats, metrics; never the secrets; no enqueue.
------------------------------------------------------------------------------------------
SET ROLE regress_operator;
SELECT endpoint, pending, dead, paused FROM outbox.endpoint_stats ORDER BY endpoint;
SELECT name, url, channel FROM outbox.endpoints ORDER BY name;
-- SELECT * on the endpoints has no secret in it.
SELECT name, to_jsonb(e) ? 'secret' AS has_secret_column, to_jsonb(e)::text LIKE '%whsec_%' AS shows_secret
  FROM outbox.endpoints e ORDER BY name;
SELECT secret FROM outbox.endpoint_secrets;
\echo :SQLSTATE
SELECT count(*) AS secrets FROM outbox.endpoint_secrets;
\echo :SQLSTATE
SELECT endpoint, payload FROM outbox.messages ORDER BY id;
-- Where a message stands: pending, dead.
SELECT m.id, s.endpoint, s.status FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s ORDER BY m.id;
-- The history and the attempt log (docs/operations.md, The attempt log), read only.
SELECT count(*) AS attempts FROM outbox.attempts;
SELECT count(*) AS sent FROM outbox.history;
DELETE FROM outbox.attempts;
\echo :SQLSTATE
SELECT endpoint, status, dead_letter_id FROM outbox.message((SELECT message_id FROM dlq.dead_letters WHERE id = 1));
SELECT count(*) AS unknown FROM outbox.message(999999);
SELECT id, endpoint, reason_code, payload FROM dlq.dead_letters ORDER BY id;
SELECT endpoint, reason_code, count FROM dlq.summary ORDER BY endpoint;
-- Endpoint administration.
SELECT outbox.create_endpoint('ops', url => 'http://127.0.0.1:8080/hooks/ops');
SELECT outbox.alter_endpoint('ops', max_attempts => 3);
SELECT outbox.pause_endpoint('ops');
SELECT outbox.resume_endpoint('ops');
-- Setting a secret is allowed; reading it back is not.  A bad secret is not echoed.
SELECT outbox.alter_endpoint('ops', secret => 'whsec_c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0');
SELECT outbox.alter_endpoint('ops', secret => 'whsec_!!topsecret-value!!');
\echo :SQLSTATE
-- The DLQ.
SELECT dlq.requeue(1) > 0 AS requeued;
SELECT dlq.requeue(1);
\echo :SQLSTATE
SELECT dlq.requeue_all();
SELECT outbox.drop_endpoint('legacy', force => true);
SELECT dlq.discard(2, 'legacy retired');
-- Metrics, purge, the worker.
SELECT position('whsec_' IN outbox.metrics()) = 0 AS no_secret_in_metrics;
SELECT outbox.purge(interval '1 day');
SELECT count(*) AS worker_rows FROM outbox.worker_status();
-- Not a producer, and no writing around the functions.
SELECT outbox.enqueue('billing', '{}'::jsonb);
\echo :SQLSTATE
INSERT INTO outbox.messages (endpoint, payload) VALUES ('billing', '{}');
\echo :SQLSTATE
UPDATE outbox.endpoints SET paused = true;
\echo :SQLSTATE
UPDATE dlq.dead_letters SET requeued_at = NULL;
\echo :SQLSTATE
DELETE FROM dlq.dead_letters;
\echo :SQLSTATE
SELECT outbox._delivery_counters();
\echo :SQLSTATE
SELECT outbox._request_wake();
\echo :SQLSTATE
SELECT outbox._history_retire('infinity', true);
\echo :SQLSTATE
SELECT * FROM outbox._message_counts;
\echo :SQLSTATE
INSERT INTO outbox.claims (message_ids, attempts) VALUES ('{1}', '{1}');
\echo :SQLSTATE
RESET ROLE;
SELECT endpoint, left(secret, 10) || '...' AS secret_prefix FROM outbox.endpoint_secrets ORDER BY endpoint;
SELECT id, message_id, endpoint, requeued_as IS NOT NULL AS requeued, discarded_at IS NOT NULL AS discarded, note
  FROM dlq.dead_letters ORDER BY id;

-- Clean up: the roles, and the next file's tables.
DROP OWNED BY regress_producer, regress_operator, regress_nobody;
DROP ROLE regress_producer, regress_operator, regress_nobody;
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters;
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints ORDER BY name;
