--
-- drop_endpoint of an endpoint with messages: refused while any is undelivered, unless
-- force => true, which moves them to the DLQ (ENDPOINT_DROPPED) with every field.  Its
-- delivered messages stay in the history.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters
    RESTART IDENTITY;
DELETE FROM outbox.endpoints;

-- What the worker does when a delivery succeeds and pg_outbox.sent_retention > 0: in
-- one statement the rows leave the queue for the history (the worker does not serve
-- this database, so the tests deliver by hand).
CREATE FUNCTION pg_temp.deliver(ids bigint[]) RETURNS bigint LANGUAGE sql
AS $$
    WITH moved AS (DELETE FROM outbox.messages m WHERE m.id = ANY (ids) RETURNING m.*),
         kept AS (INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key,
                                              idempotency_key, attempts, last_http_status, created_at, sent_at)
                  SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                         attempts + 1, 200, created_at, now() FROM moved
                  RETURNING id)
    SELECT count(*) FROM kept
$$;
-- Every message, wherever it lives now (the queue, the history, the DLQ).
CREATE TEMP VIEW all_messages AS
SELECT s.*
  FROM (SELECT id FROM outbox.messages UNION SELECT id FROM outbox.history
        UNION SELECT message_id FROM dlq.dead_letters) i
 CROSS JOIN LATERAL outbox.message(i.id) s;

SELECT outbox.create_endpoint('legacy', url => 'http://127.0.0.1:8080/hooks/legacy',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.create_endpoint('keeper', channel => 'keeper');

-- legacy: two pending, one in flight after two failed attempts (the worker's claim
-- lists it, on its third), one sent (retained in the history).
SELECT outbox.enqueue('legacy', '{"n": 1}'::jsonb);
SELECT outbox.enqueue('legacy', '{"n": 2}'::jsonb, event_type => 'order.paid',
                      headers => '{"X-Trace": "t-2"}', ordering_key => 'cust-9',
                      idempotency_key => 'order-2-paid');
SELECT outbox.enqueue('legacy', '{"n": 3}'::jsonb, event_type => 'order.shipped');
SELECT outbox.enqueue('legacy', '{"n": 4}'::jsonb, event_type => 'order.created');
UPDATE outbox.messages
   SET attempts = 2, last_error = 'HTTP 503 Service Unavailable', last_http_status = 503,
       first_failed_at = now() - interval '1 min'
 WHERE id = 3;
INSERT INTO outbox.claims (message_ids, attempts) VALUES ('{3}', '{3}');
SELECT pg_temp.deliver('{4}') AS delivered;
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
SELECT endpoint, status, count(*) FROM all_messages GROUP BY 1, 2 ORDER BY 1, 2;
SELECT name FROM outbox.endpoints ORDER BY name;
SELECT endpoint FROM outbox.endpoint_secrets;
SELECT count(*) AS dead_letters FROM dlq.dead_letters;

-- Only delivered messages left: no force needed; the endpoint goes, and its delivered
-- messages stay in the history until retention.
SELECT outbox.create_endpoint('done', url => 'http://127.0.0.1:8080/hooks/done');
SELECT outbox.enqueue('done', '{"n": 5}'::jsonb) AS done_id \gset
SELECT pg_temp.deliver(ARRAY[:done_id]::bigint[]) AS delivered;
SELECT outbox.drop_endpoint('done');
SELECT count(*) AS done_messages FROM outbox.messages WHERE endpoint = 'done';
SELECT id = :done_id AS is_done_id, payload FROM outbox.history WHERE endpoint = 'done';
SELECT endpoint, status FROM outbox.message(:done_id);
SELECT count(*) AS dead_letters FROM dlq.dead_letters;

------------------------------------------------------------------------------------------
-- force => true
------------------------------------------------------------------------------------------
SELECT outbox.drop_endpoint('legacy', force => true);
-- The endpoint, its secret and all its undelivered messages are gone from the queue;
-- keeper's is untouched; the delivered ones (legacy's and done's) are still in the
-- history.
SELECT name FROM outbox.endpoints ORDER BY name;
SELECT endpoint FROM outbox.endpoint_secrets;
SELECT id, endpoint, payload FROM outbox.messages ORDER BY id;
SELECT id, endpoint, payload, attempts, last_http_status FROM outbox.history ORDER BY id;
SELECT id, endpoint, status, attempts, dead_letter_id FROM all_messages ORDER BY id;
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
TRUNCATE outbox.claims, outbox.history, outbox.history_counts;
