--
-- outbox.message(id): where a message stands, wherever its row lives now: the queue
-- (pending; in_flight while a claim of the worker lists it), the history (sent) or the
-- DLQ (dead).  No row for an id that is in none of them (never existed, or its history
-- was purged).
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters
    RESTART IDENTITY;
DELETE FROM outbox.endpoints;

-- Its result columns, in order.
SELECT parameter_name, data_type, parameter_mode
  FROM information_schema.parameters
 WHERE specific_schema = 'outbox'
   AND specific_name = (SELECT specific_name FROM information_schema.routines
                         WHERE routine_schema = 'outbox' AND routine_name = 'message')
 ORDER BY ordinal_position;

-- What the worker does when a delivery succeeds and pg_outbox.sent_retention > 0 (the
-- worker does not serve this database, so the tests deliver by hand).
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
-- ... and when a message dies (here: a 400 answer on its first attempt).
CREATE FUNCTION pg_temp.kill(ids bigint[]) RETURNS bigint LANGUAGE sql
AS $$
    WITH moved AS (DELETE FROM outbox.messages m WHERE m.id = ANY (ids) RETURNING m.*),
         dead AS (INSERT INTO dlq.dead_letters (message_id, endpoint, event_type, payload, headers,
                                                ordering_key, idempotency_key, reason_code, error_message,
                                                http_status, response_body, attempts, first_failed_at,
                                                last_failed_at, message_created_at)
                  SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                         'HTTP_CLIENT_ERROR', 'HTTP 400 Bad Request', 400, 'missing field', attempts + 1,
                         coalesce(first_failed_at, now()), now(), created_at FROM moved
                  RETURNING id)
    SELECT count(*) FROM dead
$$;

SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing');
SELECT outbox.create_endpoint('legacy', url => 'http://127.0.0.1:8080/hooks/legacy');

------------------------------------------------------------------------------------------
-- pending
------------------------------------------------------------------------------------------
SELECT outbox.enqueue('billing', '{"n": 1}', event_type => 'order.created') AS pending_id \gset
SELECT id = :pending_id AS same_id, endpoint, status, attempts, last_error, last_http_status,
       created_at = (SELECT m.created_at FROM outbox.messages m WHERE m.id = :pending_id) AS its_created_at,
       sent_at, dead_letter_id
  FROM outbox.message(:pending_id);
-- Scheduled for later: pending too.
SELECT outbox.enqueue('billing', '{"n": 2}', deliver_at => now() + interval '1 day') AS later_id \gset
SELECT status, attempts FROM outbox.message(:later_id);
-- Waiting for a retry after a failed attempt: pending, with the failure.
SELECT outbox.enqueue('billing', '{"n": 3}') AS retried_id \gset
UPDATE outbox.messages
   SET attempts = 1, last_error = 'HTTP 503 Service Unavailable', last_http_status = 503,
       first_failed_at = now(), next_attempt_at = now() + interval '1 minute'
 WHERE id = :retried_id;
SELECT status, attempts, last_error, last_http_status, sent_at, dead_letter_id
  FROM outbox.message(:retried_id);

------------------------------------------------------------------------------------------
-- in_flight: while a claim of the worker lists it, and no longer
------------------------------------------------------------------------------------------
INSERT INTO outbox.claims (message_ids, attempts) VALUES (ARRAY[:retried_id, :pending_id]::bigint[], '{2,1}');
SELECT id = :retried_id AS is_retried, status, attempts, last_error, last_http_status
  FROM outbox.message(:retried_id);
SELECT status FROM outbox.message(:pending_id);
SELECT status FROM outbox.message(:later_id);
DELETE FROM outbox.claims;
SELECT status FROM outbox.message(:retried_id);

------------------------------------------------------------------------------------------
-- sent: in the history
------------------------------------------------------------------------------------------
SELECT pg_temp.deliver(ARRAY[:pending_id]::bigint[]) AS delivered;
SELECT id = :pending_id AS same_id, endpoint, status, attempts, last_error, last_http_status,
       (created_at, sent_at) = (SELECT h.created_at, h.sent_at FROM outbox.history h WHERE h.id = :pending_id)
           AS its_times, created_at <= sent_at AS created_before_sent, dead_letter_id
  FROM outbox.message(:pending_id);

------------------------------------------------------------------------------------------
-- dead: in the DLQ, with the dead letter's id
------------------------------------------------------------------------------------------
SELECT outbox.enqueue('billing', '{"n": 4}') AS dead_id \gset
SELECT pg_temp.kill(ARRAY[:dead_id]::bigint[]) AS killed;
SELECT id = :dead_id AS same_id, endpoint, status, attempts, last_error, last_http_status, sent_at,
       dead_letter_id = (SELECT id FROM dlq.dead_letters WHERE message_id = :dead_id) AS is_its_dead_letter
  FROM outbox.message(:dead_id);
-- Dead because its endpoint was dropped (force), after a failed attempt.
SELECT outbox.enqueue('legacy', '{"n": 5}') AS dropped_id \gset
UPDATE outbox.messages SET attempts = 1, last_error = 'timeout', first_failed_at = now() WHERE id = :dropped_id;
SELECT outbox.drop_endpoint('legacy', force => true);
SELECT endpoint, status, attempts, last_error, last_http_status, dead_letter_id IS NOT NULL AS has_dead_letter
  FROM outbox.message(:dropped_id);
-- Requeued: the dead letter stays dead (as evidence); the requeued message is a new
-- one, pending, under its own id.
SELECT dlq.requeue((SELECT dead_letter_id FROM outbox.message(:dead_id))) AS requeued_id \gset
SELECT status, dead_letter_id IS NOT NULL AS has_dead_letter FROM outbox.message(:dead_id);
SELECT :requeued_id > :dead_id AS new_id, status, attempts, last_error, dead_letter_id
  FROM outbox.message(:requeued_id);

------------------------------------------------------------------------------------------
-- Every status at once, and ids that are nowhere: no row
------------------------------------------------------------------------------------------
SELECT i.label, s.status
  FROM (VALUES ('delivered', :pending_id), ('later', :later_id), ('retried', :retried_id),
               ('dead', :dead_id), ('dropped', :dropped_id), ('requeued', :requeued_id)) AS i(label, id)
  LEFT JOIN LATERAL outbox.message(i.id) s ON true
 ORDER BY i.id;
SELECT count(*) AS unknown_id FROM outbox.message(999999);
SELECT count(*) AS zero FROM outbox.message(0);
SELECT count(*) AS negative FROM outbox.message(-1);
SELECT count(*) AS max_bigint FROM outbox.message(9223372036854775807);
SELECT count(*) AS null_id FROM outbox.message(NULL);

------------------------------------------------------------------------------------------
-- attempts_logged: the message's rows in the attempt log (outbox.attempts), in any of
-- its partitions (the worker writes them as it settles; here by hand): one in a time
-- partition, one in the default partition (a time no partition covers).
------------------------------------------------------------------------------------------
SELECT attempts, attempts_logged FROM outbox.message(:retried_id);
SELECT outbox._partitions_prepare('outbox.attempts', 3600) > now() AS attempts_partitioned;
INSERT INTO outbox.attempts (attempted_at, endpoint, message_id, attempt, http_status, error, duration_ms,
                             response_body)
VALUES (now(), 'billing', :retried_id, 1, 503, 'HTTP 503', 12.5, 'down for maintenance'),
       (now() - interval '1 year', 'billing', :retried_id, 2, NULL, 'Connection refused', 0.4, NULL),
       (now(), 'billing', :later_id, 1, NULL, 'Connection refused', 0.4, NULL);
SELECT a.tableoid = 'outbox.attempts_default'::regclass AS in_default, count(*)
  FROM outbox.attempts a WHERE a.message_id = :retried_id GROUP BY 1 ORDER BY 1;
SELECT attempts, attempts_logged FROM outbox.message(:retried_id);
SELECT attempts_logged FROM outbox.message(:later_id);
-- Retention drops the time partitions whole and deletes the default partition's rows.
SELECT outbox._partitions_retire('outbox.attempts', 'infinity', true) >= 0 AS retired;
SELECT count(*) AS attempt_partitions FROM outbox._partitions('outbox.attempts');
SELECT attempts_logged FROM outbox.message(:retried_id);
-- Only the two time-partitioned tables.
SELECT outbox._partitions_prepare('outbox.messages', 3600);
\echo :SQLSTATE
-- Purged from the history: no row any more.
SELECT outbox.purge(interval '0') AS purged;
SELECT count(*) AS purged_message FROM outbox.message(:pending_id);

-- Clean up for the next file.
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters;
SELECT outbox.drop_endpoint(name, force => true) FROM outbox.endpoints ORDER BY name;
