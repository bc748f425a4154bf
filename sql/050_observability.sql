--
-- Observability: outbox.endpoint_stats, outbox.metrics() (Prometheus text format),
-- outbox.worker_status(), and outbox.purge().
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters
    RESTART IDENTITY;
DELETE FROM outbox.endpoints;

-- What the worker does when a delivery succeeds and pg_outbox.sent_retention > 0, at
-- the time given: in one statement the rows leave the queue for the history, and the
-- counts of the time partitions they land in grow by as many (the worker does not
-- serve this database, so the tests deliver by hand).
CREATE FUNCTION pg_temp.deliver(ids bigint[], at timestamptz) RETURNS bigint LANGUAGE sql
AS $$
    WITH moved AS (DELETE FROM outbox.messages m WHERE m.id = ANY (ids) RETURNING m.*),
         kept AS (INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key,
                                              idempotency_key, attempts, last_http_status, created_at, sent_at)
                  SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                         attempts + 1, 200, created_at, at FROM moved
                  RETURNING tableoid, endpoint),
         counted AS (INSERT INTO outbox.history_counts AS hc (partition, endpoint, slot, sent)
                     SELECT k.tableoid::regclass, k.endpoint, 0, count(*) FROM kept k
                      WHERE k.tableoid <> 'outbox.history_default'::regclass GROUP BY 1, 2
                     ON CONFLICT (partition, endpoint, slot) DO UPDATE SET sent = hc.sent + excluded.sent
                     RETURNING 1)
    SELECT count(*) FROM kept
$$;
-- Where each delivered message is kept: the default partition, or a time partition.
CREATE TEMP VIEW kept AS
SELECT h.id, CASE WHEN h.tableoid = 'outbox.history_default'::regclass THEN 'default' ELSE 'time' END
                 AS partition
  FROM outbox.history h;

SELECT outbox.create_endpoint('alpha', url => 'http://127.0.0.1:8080/hooks/alpha',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.create_endpoint('beta', channel => 'beta');
SELECT outbox.create_endpoint('gamma', url => 'http://127.0.0.1:8080/hooks/gamma');
SELECT outbox.create_endpoint('idle', url => 'http://127.0.0.1:8080/hooks/idle');

-- alpha: 3 pending (the oldest waiting 10 minutes), 1 in flight, 3 sent: two days ago
-- and an hour ago (in the default partition), and now (in a time partition).  The
-- worker's claim lists the one in flight and one of the batch that is settled already.
SELECT count(outbox.enqueue('alpha', jsonb_build_object('n', n))) FROM generate_series(1, 7) AS n;
UPDATE outbox.messages SET created_at = created_at - interval '10 minutes',
                           next_attempt_at = next_attempt_at - interval '10 minutes'
 WHERE id = 1;
INSERT INTO outbox.claims (message_ids, attempts) VALUES ('{4,5}', '{1,1}');
-- The history's time partitions, as the worker prepares them: hourly, from the
-- current hour to at least three hours ahead.  What was sent before the current hour
-- lands in the default partition.  (One transaction: one now().)
BEGIN;
SELECT outbox._history_prepare(3600) >= now() + interval '3 hours' AS covered_3h_ahead;
SELECT count(*) >= 4 AS time_partitions,
       bool_and(to_at - from_at = interval '1 hour') AS hourly,
       min(from_at) <= now() AS from_this_hour
  FROM outbox._history_partitions();
SELECT pg_temp.deliver('{5}', now() - interval '2 days') + pg_temp.deliver('{6}', now() - interval '1 hour')
       + pg_temp.deliver('{7}', now()) AS delivered;
COMMIT;
SELECT id, partition FROM kept ORDER BY id;
SELECT endpoint, sent FROM outbox.history_counts;
-- beta: only a message scheduled for tomorrow: it is pending but not waiting yet.
SELECT outbox.enqueue('beta', '{}'::jsonb, deliver_at => now() + interval '1 day') > 0 AS scheduled;
-- gamma: paused, circuit open, a message retried once already (waiting since creation
-- although its next attempt is later), and open and closed dead letters.
SELECT outbox.pause_endpoint('gamma');
UPDATE outbox.endpoints SET breaker_state = 'open', breaker_failures = 10,
                            breaker_open_until = now() + interval '30 seconds',
                            breaker_cooldown_ms = 30000
 WHERE name = 'gamma';
SELECT outbox.enqueue('gamma', '{"retried": true}'::jsonb) AS gamma_id \gset
UPDATE outbox.messages SET attempts = 1, created_at = created_at - interval '1 hour',
                           next_attempt_at = now() + interval '1 minute',
                           last_error = 'HTTP 500', last_http_status = 500
 WHERE id = :gamma_id;
INSERT INTO dlq.dead_letters (message_id, endpoint, event_type, payload, reason_code,
                              message_created_at, dead_at, requeued_at, discarded_at)
VALUES (901, 'gamma', 'a', '{}', 'RETRY_EXHAUSTED', now() - interval '2 hours', now() - interval '2 hours', NULL, NULL),
       (902, 'gamma', 'a', '{}', 'RETRY_EXHAUSTED', now() - interval '1 hour', now() - interval '1 hour', NULL, NULL),
       (903, 'gamma', 'b', '{}', 'HTTP_CLIENT_ERROR', now(), now(), NULL, NULL),
       (904, 'gamma', 'b', '{}', 'HTTP_CLIENT_ERROR', now(), now(), now(), NULL),
       (905, 'gamma', 'b', '{}', 'HTTP_CLIENT_ERROR', now(), now(), NULL, now()),
       -- an endpoint that no longer exists, with a name that needs escaping in a label
       (906, E'old"one\\x\ny', NULL, '{}', 'ENDPOINT_DROPPED', now(), now(), NULL, NULL);

------------------------------------------------------------------------------------------
-- outbox.endpoint_stats
------------------------------------------------------------------------------------------
SELECT endpoint, pending, in_flight, sent, dead,
       oldest_pending_age IS NULL AS nothing_waiting,
       oldest_pending_age >= interval '10 minutes' AS waiting_10min,
       oldest_pending_age >= interval '1 hour' AS waiting_1h,
       paused, breaker_state, breaker_failures, breaker_open_until > now() AS open_until_later
  FROM outbox.endpoint_stats ORDER BY endpoint;

------------------------------------------------------------------------------------------
-- outbox.metrics()
------------------------------------------------------------------------------------------
-- One line per row; ages that are not zero are shown as <age> (they depend on the clock).
SELECT regexp_replace(line, '(_age_seconds\{.*\}) (?!0$)[0-9.]+$', '\1 <age>') AS line
  FROM regexp_split_to_table(outbox.metrics(), E'\n') WITH ORDINALITY AS t(line, n)
 ORDER BY n;
-- The exposition ends with a line feed; every sample line is "name{labels} value".
SELECT right(outbox.metrics(), 1) = E'\n' AS ends_with_newline;
SELECT count(*) AS malformed_lines
  FROM regexp_split_to_table(rtrim(outbox.metrics(), E'\n'), E'\n') AS line
 WHERE line !~ '^# (HELP|TYPE) pg_outbox_[a-z_]+ .+$'
   AND line !~ '^pg_outbox_[a-z_]+(\{([a-z_]+="([^"\\\n]|\\[\\"n])*",?)+\})? [0-9]+(\.[0-9]+)?$';
-- Ages: the oldest waiting message of alpha is 10 minutes old, gamma's one hour; gamma's
-- oldest open dead letter two hours.
SELECT substring(outbox.metrics() FROM 'pg_outbox_oldest_pending_age_seconds\{endpoint="alpha"\} ([0-9.]+)')::numeric
       BETWEEN 600 AND 3600 AS alpha_age_ok,
       substring(outbox.metrics() FROM 'pg_outbox_oldest_pending_age_seconds\{endpoint="gamma"\} ([0-9.]+)')::numeric
       BETWEEN 3600 AND 7200 AS gamma_age_ok,
       substring(outbox.metrics() FROM 'pg_outbox_dead_letter_oldest_age_seconds\{endpoint="gamma"\} ([0-9.]+)')::numeric
       BETWEEN 7200 AND 10800 AS gamma_dead_age_ok;
-- Never a secret.
SELECT position('whsec_' IN outbox.metrics()) = 0 AS no_secret_in_metrics;
SELECT position('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' IN outbox.metrics()) = 0 AS no_secret_key_in_metrics;

------------------------------------------------------------------------------------------
-- outbox.worker_status(): one row, about this database's worker. None serves this
-- database (pg_outbox.database names another): the row says why, with no pid.
------------------------------------------------------------------------------------------
SELECT count(*) AS rows FROM outbox.worker_status();
SELECT pg_typeof(pid) AS pid, pg_typeof(database) AS database, pg_typeof(state) AS state,
       pg_typeof(started_at) AS started_at, pg_typeof(last_loop_at) AS last_loop_at,
       pg_typeof(in_flight) AS in_flight, pg_typeof(sent) AS sent,
       pg_typeof(retried) AS retried, pg_typeof(dead_lettered) AS dead_lettered
  FROM outbox.worker_status();
SELECT database = current_database() AS this_database, pid IS NULL AS no_pid, state,
       sent = 0 AND retried = 0 AND dead_lettered = 0 AS counters_zero
  FROM outbox.worker_status();
SELECT count(*) AS counters_for_this_database
  FROM outbox._delivery_counters() WHERE endpoint IN (SELECT name FROM outbox.endpoints);

------------------------------------------------------------------------------------------
-- outbox.purge()
------------------------------------------------------------------------------------------
-- alpha's sent messages: one sent two days ago, one an hour ago, and one sent now.
SELECT h.id, s.status FROM outbox.history h CROSS JOIN LATERAL outbox.message(h.id) s ORDER BY h.id;
-- Bad input first: a negative interval, and nothing is deleted.
SELECT outbox.purge(interval '-1 second');
\echo :SQLSTATE
SELECT outbox.purge(interval '-1 day');
\echo :SQLSTATE
SELECT count(*) AS sent_rows FROM outbox.history;
-- Explicit retention: nothing is three days old.
SELECT outbox.purge(interval '3 days');
-- The GUC's retention (the default here: one day): the one sent two days ago.
SHOW pg_outbox.sent_retention;
SELECT outbox.purge();
SELECT id FROM outbox.history ORDER BY id;
SELECT count(*) AS purged_message FROM outbox.message(5);
SELECT outbox.purge(NULL);
-- Half an hour: the one sent an hour ago.
SELECT outbox.purge(interval '30 minutes');
SELECT id FROM outbox.history ORDER BY id;
SELECT endpoint, sent FROM outbox.endpoint_stats WHERE endpoint = 'alpha';
-- Zero: every sent message, the one sent in this very transaction included; the counts
-- of the time partitions go down with them.
BEGIN;
SELECT outbox.enqueue('alpha', '{"n": 8}'::jsonb) AS sent_in_tx \gset
SELECT pg_temp.deliver(ARRAY[:sent_in_tx]::bigint[], now()) AS delivered;
SELECT id, partition FROM kept ORDER BY id;
SELECT outbox.purge(interval '0');
COMMIT;
SELECT count(*) AS sent_rows FROM outbox.history;
SELECT endpoint, sent FROM outbox.history_counts;
SELECT endpoint, sent FROM outbox.endpoint_stats WHERE endpoint = 'alpha';
SELECT position('pg_outbox_messages{endpoint="alpha",status="sent"} 0' IN outbox.metrics()) > 0 AS metrics_sent_0;
-- An empty history: nothing to purge, whatever the age.
SELECT outbox.purge();
SELECT outbox.purge(interval '0');
SELECT outbox.purge(interval '1000 years');
-- Only sent messages are ever purged.
SELECT s.status, count(*) FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s
 GROUP BY s.status ORDER BY s.status;
SELECT count(*) AS dead_letters FROM dlq.dead_letters;

------------------------------------------------------------------------------------------
-- Retiring the history's time partitions, as the worker does once retention has
-- passed: whole partitions are dropped, their counts with them.
------------------------------------------------------------------------------------------
SELECT pg_temp.deliver('{2}', now()) AS delivered;
SELECT endpoint, sent FROM outbox.endpoint_stats WHERE endpoint = 'alpha';
SELECT outbox._history_retire('infinity', false) AS retired;
SELECT count(*) AS time_partitions FROM outbox._history_partitions();
SELECT count(*) AS counts_left FROM outbox.history_counts;
SELECT count(*) AS sent_rows FROM outbox.history;
SELECT endpoint, sent FROM outbox.endpoint_stats WHERE endpoint = 'alpha';

------------------------------------------------------------------------------------------
-- Endpoints that retire themselves: the reason the worker paused an endpoint for, as the
-- worker writes it, is shown by endpoint_stats and metrics(); resume_endpoint clears it.
------------------------------------------------------------------------------------------
UPDATE outbox.endpoints SET paused = true, paused_reason = 'FAILING', failing_since = now() - interval '5 days'
 WHERE name = 'idle';
SELECT endpoint, paused, paused_reason, failing_since <= now() - interval '5 days' AS failing_5_days
  FROM outbox.endpoint_stats WHERE endpoint = 'idle';
SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') AS line
 WHERE line LIKE 'pg_outbox_auto_paused{endpoint="idle"%' ORDER BY line;
-- An operator's pause of a retired endpoint keeps the worker's reason.
SELECT outbox.pause_endpoint('idle');
SELECT paused, paused_reason FROM outbox.endpoint_stats WHERE endpoint = 'idle';
SELECT outbox.resume_endpoint('idle');
SELECT endpoint, paused, paused_reason, failing_since FROM outbox.endpoint_stats WHERE endpoint = 'idle';
SELECT resumed_at > now() - interval '1 minute' AS resumed_now FROM outbox.endpoints WHERE name = 'idle';
SELECT line FROM regexp_split_to_table(outbox.metrics(), E'\n') AS line
 WHERE line LIKE 'pg_outbox_auto_paused{endpoint="idle"%' ORDER BY line;
-- An operator's own pause has no reason.
SELECT outbox.pause_endpoint('idle');
SELECT paused, paused_reason FROM outbox.endpoint_stats WHERE endpoint = 'idle';
SELECT outbox.resume_endpoint('idle');
-- A reason is one of the worker's; endpoint_stats shows none for an endpoint not paused.
\set VERBOSITY terse
UPDATE outbox.endpoints SET paused_reason = 'BORED' WHERE name = 'idle';
\echo :SQLSTATE
\set VERBOSITY default
UPDATE outbox.endpoints SET paused_reason = 'GONE' WHERE name = 'idle';
SELECT paused, paused_reason FROM outbox.endpoint_stats WHERE endpoint = 'idle';

-- Clean up for the next file.
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters;
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints ORDER BY name;
