--
-- drop_endpoint of an endpoint with messages: refused while any is undelivered, unless
-- force => true, which moves them to the DLQ (ENDPOINT_DROPPED) with every field.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;

SELECT outbox.create_endpoint('legacy', url => 'http://127.0.0.1:8080/hooks/legacy',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.create_endpoint('keeper', channel => 'keeper');

-- legacy: two pending, one in flight after two failed attempts, one sent (retained).
SELECT outbox.enqueue('legacy', '{"n": 1}'::jsonb);
SELECT outbox.enqueue('legacy', '{"n": 2}'::jsonb, event_type => 'order.paid',
                      headers => '{"X-Trace": "t-2"}', ordering_key => 'cust-9',
                      idempotency_key => 'order-2-paid');
SELECT outbox.enqueue('legacy', '{"n": 3}'::jsonb, event_type => 'order.shipped');
SELECT outbox.enqueue('legacy', '{"n": 4}'::jsonb, event_type => 'order.created');
UPDATE outbox.messages
   SET status = 'in_flight', attempts = 2, lease_until = now() + interval '5 min',
       last_error = 'HTTP 503 Service Unavailable', last_http_status = 503,
       first_failed_at = now() - interval '1 min'
 WHERE id = 3;
UPDATE outbox.messages SET status = 'sent', attempts = 1, sent_at = now() WHERE id = 4;
-- keeper: one pending message that must not be touched.
SELECT outbox.enqueue('keeper', '{"keep": true}'::jsonb);

-- What the outbox held, to compare the dead letters with.
CREATE TEMP TABLE before_drop AS SELECT * FROM outbox.messages;

------------------------------------------------------------------------------------------
-- Refused without force, and nothing changes.
------------------------------------------------------------------------------------------
SELECT outbox.drop_endpoint('legacy');
\echo :SQLSTATE
SELECT outbox.drop_endpoint('legacy', force => false);
\echo :SQLSTATE
SELECT outbox.drop_endpoint('legacy', force => NULL);
\echo :SQLSTATE
SELECT endpoint, status, count(*) FROM outbox.messages GROUP BY 1, 2 ORDER BY 1, 2;
SELECT name FROM outbox.endpoints ORDER BY name;
SELECT endpoint FROM outbox.endpoint_secrets;
SELECT count(*) AS dead_letters FROM dlq.dead_letters;

-- Only sent messages left: no force needed, and they go with the endpoint.
SELECT outbox.create_endpoint('done', url => 'http://127.0.0.1:8080/hooks/done');
SELECT outbox.enqueue('done', '{"n": 5}'::jsonb) AS done_id \gset
UPDATE outbox.messages SET status = 'sent', attempts = 1, sent_at = now() WHERE id = :done_id;
SELECT outbox.drop_endpoint('done');
SELECT count(*) AS done_messages FROM outbox.messages WHERE endpoint = 'done';
SELECT count(*) AS dead_letters FROM dlq.dead_letters;

------------------------------------------------------------------------------------------
-- force => true
------------------------------------------------------------------------------------------
SELECT outbox.drop_endpoint('legacy', force => true);
-- The endpoint, its secret and all its messages are gone; keeper's is untouched.
SELECT name FROM outbox.endpoints ORDER BY name;
SELECT endpoint FROM outbox.endpoint_secrets;
SELECT id, endpoint, payload, status FROM outbox.messages ORDER BY id;
-- The undelivered ones are dead letters, in id order; the sent one is not.
SELECT id, message_id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
       reason_code, error_message, http_status, response_body, attempts,
       first_failed_at IS NOT NULL AS has_first_failed_at, last_failed_at,
       dead_at >= message_created_at AS dead_after_created, requeued_at, requeued_as, discarded_at, note
  FROM dlq.dead_letters ORDER BY id;
-- Every field of the message is kept.
SELECT d.message_id,
       d.endpoint = b.endpoint AS endpoint,
       d.event_type IS NOT DISTINCT FROM b.event_type AS event_type,
       d.payload = b.payload AS payload,
       d.headers IS NOT DISTINCT FROM b.headers AS headers,
       d.ordering_key IS NOT DISTINCT FROM b.ordering_key AS ordering_key,
       d.idempotency_key IS NOT DISTINCT FROM b.idempotency_key AS idempotency_key,
       d.attempts = b.attempts AS attempts,
       d.http_status IS NOT DISTINCT FROM b.last_http_status AS http_status,
       d.first_failed_at IS NOT DISTINCT FROM b.first_failed_at AS first_failed_at,
       d.message_created_at = b.created_at AS created_at
  FROM dlq.dead_letters d JOIN before_drop b ON b.id = d.message_id
 ORDER BY d.message_id;
SELECT endpoint, reason_code, event_type, count, oldest = newest AS same_time
  FROM dlq.summary ORDER BY endpoint, reason_code, event_type;

-- Dropped is dropped.
SELECT outbox.drop_endpoint('legacy', force => true);
\echo :SQLSTATE
SELECT outbox.enqueue('legacy', '{}'::jsonb);
\echo :SQLSTATE

-- Clean up for the next file.
SELECT outbox.drop_endpoint('keeper', force => true);
SELECT count(*) AS messages_left FROM outbox.messages;
