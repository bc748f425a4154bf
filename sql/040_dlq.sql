--
-- The dead letter queue: requeue (as is and with a corrected payload), requeue_all and
-- its filters, discard, dlq.summary; and the refusals: unknown ids, rows that are not
-- open any more, endpoints that are gone, a webhook-id still in use.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters
    RESTART IDENTITY;
DELETE FROM outbox.endpoints;

SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing');
SELECT outbox.create_endpoint('shipping', url => 'http://127.0.0.1:8080/hooks/shipping');
-- Message ids start above the dead letters' message_ids, so the two are not confused.
ALTER TABLE outbox.messages ALTER COLUMN id RESTART WITH 1001;
-- The instance id in webhook-ids is random; a fixed one keeps this file's output
-- stable.  The dead letters below are 0.3.0's (legacy_below 0).
UPDATE outbox.instance SET id = '0123456789abcdef', legacy_below = 0;
SELECT outbox._webhook_id(7, NULL) AS webhook_id, outbox._webhook_id(7, 'order-7') AS with_key;
-- A dead letter of a message enqueued before 0.3.0 keeps its msg_<id> when requeued.
UPDATE outbox.instance SET legacy_below = 100;
SELECT outbox._webhook_id(99, NULL) AS enqueued_before_0_3, outbox._webhook_id(100, NULL) AS after;
UPDATE outbox.instance SET legacy_below = 0;

-- Dead letters as the worker writes them, at fixed times (superuser only).
INSERT INTO dlq.dead_letters (message_id, endpoint, event_type, payload, headers, ordering_key,
                              idempotency_key, reason_code, error_message, http_status,
                              response_body, attempts, first_failed_at, last_failed_at,
                              message_created_at, dead_at)
VALUES
  (101, 'billing', 'order.created', '{"order_id": 1}', NULL, NULL, NULL,
   'HTTP_CLIENT_ERROR', 'HTTP 400 Bad Request', 400, '{"error": "missing field"}', 1,
   '2024-01-10 10:00:00+00', '2024-01-10 10:00:00+00', '2024-01-10 09:59:59+00', '2024-01-10 10:00:00+00'),
  (102, 'billing', 'order.created', '{"order_id": 2}', '{"X-Trace": "t-2"}', 'cust-1', 'order-2',
   'RETRY_EXHAUSTED', 'HTTP 503 Service Unavailable', 503, 'busy', 10,
   '2024-02-01 00:00:00+00', '2024-02-02 00:00:00+00', '2024-01-31 23:59:00+00', '2024-02-02 00:00:00+00'),
  (103, 'billing', 'order.paid', '{"order_id": 3}', NULL, NULL, NULL,
   'RETRY_EXHAUSTED', 'connection refused', NULL, NULL, 10,
   '2024-03-01 00:00:00+00', '2024-03-02 00:00:00+00', '2024-03-01 00:00:00+00', '2024-03-02 00:00:00+00'),
  (104, 'shipping', 'parcel.sent', '{"parcel": 4}', NULL, NULL, NULL,
   'PAYLOAD_TOO_LARGE', 'HTTP 413 Payload Too Large', 413, NULL, 1,
   '2024-03-05 00:00:00+00', '2024-03-05 00:00:00+00', '2024-03-05 00:00:00+00', '2024-03-05 00:00:00+00'),
  (105, 'shipping', 'parcel.sent', '{"parcel": 5}', NULL, NULL, NULL,
   'RETRY_EXHAUSTED', 'timeout', NULL, NULL, 10,
   '2024-04-01 00:00:00+00', '2024-04-02 00:00:00+00', '2024-04-01 00:00:00+00', '2024-04-02 00:00:00+00'),
  (106, 'shipping', 'parcel.lost', '{"parcel": 6}', '{"X-A": 1}', NULL, NULL,
   'INVALID_MESSAGE', 'header "X-A" must have a string value', NULL, NULL, 0,
   NULL, NULL, '2024-04-03 00:00:00+00', '2024-04-03 00:00:00+00'),
  (107, 'gone', 'order.created', '{"order_id": 7}', NULL, NULL, NULL,
   'ENDPOINT_DROPPED', 'endpoint dropped', NULL, NULL, 0,
   NULL, NULL, '2024-04-04 00:00:00+00', '2024-04-04 00:00:00+00'),
  (108, 'billing', 'order.refunded', '{"order_id": 8}', NULL, NULL, 'refund-8',
   'HTTP_CLIENT_ERROR', 'HTTP 404 Not Found', 404, 'not found', 1,
   '2024-05-01 00:00:00+00', '2024-05-01 00:00:00+00', '2024-05-01 00:00:00+00', '2024-05-01 00:00:00+00'),
  (109, 'shipping', 'parcel.sent', '{"parcel": 9}', NULL, NULL, NULL,
   'RETRY_EXHAUSTED', 'timeout', NULL, NULL, 10,
   '2024-06-01 00:00:00+00', '2024-06-02 00:00:00+00', '2024-06-01 00:00:00+00', '2024-06-02 00:00:00+00');

-- The state of every dead letter, without the times requeue/discard set.
CREATE TEMP VIEW dl AS
SELECT id, message_id, endpoint, reason_code, requeued_at IS NOT NULL AS requeued, requeued_as,
       discarded_at IS NOT NULL AS discarded, note
  FROM dlq.dead_letters;

SELECT * FROM dlq.summary ORDER BY endpoint, reason_code, event_type;

------------------------------------------------------------------------------------------
-- requeue
------------------------------------------------------------------------------------------
-- As it is: a new message, fresh attempts, due now, and the original webhook-id
-- (msg_<instance>_<original id>, outbox._webhook_id) as its idempotency key.
BEGIN;
SELECT dlq.requeue(1);
SELECT m.id, m.endpoint, m.event_type, m.payload, m.headers, m.ordering_key, m.idempotency_key,
       s.status, m.attempts, m.next_attempt_at = now() AS due_now, m.created_at = now() AS created_now,
       m.last_error, m.last_http_status
  FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s WHERE m.id = 1001;
SELECT requeued_at = now() AS requeued_now FROM dlq.dead_letters WHERE id = 1;
COMMIT;
SELECT * FROM dl WHERE id = 1;
-- An idempotency key of its own is kept as it is; headers and ordering key too.
SELECT dlq.requeue(2);
SELECT m.id, m.endpoint, m.event_type, m.payload, m.headers, m.ordering_key, m.idempotency_key,
       s.status, m.attempts
  FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s WHERE m.id = 1002;
-- With a corrected payload.
SELECT dlq.requeue(4, '{"parcel": 4, "slimmed": true}');
SELECT id, endpoint, payload, idempotency_key FROM outbox.messages WHERE id = 1003;
SELECT payload AS dead_letter_payload_kept FROM dlq.dead_letters WHERE id = 4;

-- Refused: twice, unknown, NULL.
SELECT dlq.requeue(1);
\echo :SQLSTATE
SELECT dlq.requeue(1, '{"order_id": 1, "fixed": true}');
\echo :SQLSTATE
SELECT dlq.requeue(999);
\echo :SQLSTATE
SELECT dlq.requeue(NULL);
\echo :SQLSTATE
-- The endpoint is gone: refused, the dead letter stays open.
SELECT dlq.requeue(7);
\echo :SQLSTATE
-- The webhook-id is still in use by a message in the outbox: refused.
SELECT outbox.enqueue('billing', '{"order_id": 8, "again": true}', idempotency_key => 'refund-8');
SELECT dlq.requeue(8);
\echo :SQLSTATE
SELECT * FROM dl ORDER BY id;
SELECT id, endpoint, idempotency_key FROM outbox.messages ORDER BY id;
-- Once that message is delivered it leaves the queue, and its hold on the key with it:
-- now the requeue goes through.
WITH moved AS (DELETE FROM outbox.messages m WHERE m.idempotency_key = 'refund-8' RETURNING m.*)
INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                            attempts, last_http_status, created_at, sent_at)
SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key, 1, 200, created_at, now()
  FROM moved;
SELECT dlq.requeue(8) AS requeued_as \gset
SELECT m.id = :requeued_as AS same_id, m.payload, m.idempotency_key, s.status
  FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s WHERE m.idempotency_key = 'refund-8';
SELECT * FROM dl WHERE id = 8;

------------------------------------------------------------------------------------------
-- discard
------------------------------------------------------------------------------------------
BEGIN;
SELECT dlq.discard(6, 'header fixed at the source; resent by hand');
SELECT dlq.discard(3);
SELECT id, discarded_at = now() AS discarded_now, note FROM dlq.dead_letters WHERE id IN (3, 6) ORDER BY id;
COMMIT;
-- Refused: discarding twice, requeueing a discarded row, discarding a requeued row,
-- unknown, NULL.
SELECT dlq.discard(6, 'again');
\echo :SQLSTATE
SELECT dlq.requeue(6);
\echo :SQLSTATE
SELECT dlq.discard(1);
\echo :SQLSTATE
SELECT dlq.discard(999);
\echo :SQLSTATE
SELECT dlq.discard(NULL);
\echo :SQLSTATE
SELECT * FROM dl ORDER BY id;
-- The summary counts open dead letters only.
SELECT * FROM dlq.summary ORDER BY endpoint, reason_code, event_type;

------------------------------------------------------------------------------------------
-- requeue_all
------------------------------------------------------------------------------------------
-- Put the dead letters back as they were (superuser), then filter one way at a time.
DELETE FROM outbox.messages;
UPDATE dlq.dead_letters SET requeued_at = NULL, requeued_as = NULL, discarded_at = NULL, note = NULL;

-- Bad reason code: refused.
SELECT dlq.requeue_all(reason_code => 'NOT_A_REASON');
\echo :SQLSTATE
-- One that cannot be requeued now does not stop the redrive: dead letter 7's endpoint
-- is gone, and an idempotency key of another is back in the outbox.  Both are skipped,
-- counted in a WARNING, and stay open; the rest are requeued.
SELECT id, endpoint, idempotency_key FROM dlq.dead_letters
 WHERE requeued_at IS NULL AND idempotency_key IS NOT NULL ORDER BY id LIMIT 1 \gset key_
SELECT outbox.enqueue(:'key_endpoint', '{"live": true}', idempotency_key => :'key_idempotency_key') > 0 AS key_taken;
SELECT dlq.requeue_all(reason_code => 'ENDPOINT_DROPPED');
SELECT dlq.requeue_all();
SELECT id FROM dlq.dead_letters WHERE requeued_at IS NULL AND discarded_at IS NULL ORDER BY id;
SELECT count(*) AS messages FROM outbox.messages;
-- Back to where it was for the filters below.
DELETE FROM outbox.messages;
UPDATE dlq.dead_letters SET requeued_at = NULL, requeued_as = NULL, discarded_at = NULL, note = NULL;
SELECT count(*) AS requeued FROM dlq.dead_letters WHERE requeued_at IS NOT NULL;
-- Nothing matches: 0.
SELECT dlq.requeue_all(endpoint => 'nope');
SELECT dlq.requeue_all(endpoint => 'billing', reason_code => 'PAYLOAD_TOO_LARGE');
SELECT dlq.requeue_all(since => '2030-01-01');
ALTER TABLE outbox.messages ALTER COLUMN id RESTART WITH 2001;

-- By endpoint (in id order).
SELECT dlq.requeue_all(endpoint => 'shipping', reason_code => 'RETRY_EXHAUSTED');
SELECT * FROM dl WHERE requeued ORDER BY id;
-- By reason code.
SELECT dlq.requeue_all(reason_code => 'HTTP_CLIENT_ERROR');
SELECT * FROM dl WHERE requeued ORDER BY id;
-- By time: dead since March 2024 (2 and 1 are earlier; 5 and 9 are requeued already).
SELECT dlq.discard(7, 'endpoint retired');
SELECT dlq.requeue_all(since => '2024-03-01 00:00:00+00');
SELECT * FROM dl ORDER BY id;
SELECT m.id, m.endpoint, m.payload, m.idempotency_key, s.status, m.attempts
  FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s ORDER BY m.id;
-- The last open one (billing's, from February), then nothing is left to do.
SELECT dlq.requeue_all(endpoint => 'billing');
SELECT dlq.requeue_all(endpoint => 'billing', reason_code => 'RETRY_EXHAUSTED', since => '2024-01-01');
SELECT * FROM dlq.summary ORDER BY endpoint, reason_code, event_type;

-- Clean up for the next file.
TRUNCATE outbox.messages, dlq.dead_letters;
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints ORDER BY name;
