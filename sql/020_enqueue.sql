--
-- enqueue: normal use, idempotency, deliver_at, backpressure (max_pending), the
-- transaction it runs in, and bad input.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters
    RESTART IDENTITY;
DELETE FROM outbox.endpoints;

SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.create_endpoint('orders_feed', channel => 'orders');
SELECT outbox.create_endpoint('limited', url => 'http://127.0.0.1:8080/hooks/limited', max_pending => 3);

-- The messages without the timestamps that change from run to run, with where each
-- stands (outbox.message()).
CREATE TEMP VIEW msgs AS
SELECT m.id, m.endpoint, m.event_type, m.payload, m.headers, m.ordering_key, m.idempotency_key,
       s.status, m.attempts, m.next_attempt_at <= now() AS due, m.last_error, m.last_http_status,
       m.first_failed_at, s.sent_at
  FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s;

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

------------------------------------------------------------------------------------------
-- Normal use
------------------------------------------------------------------------------------------
-- The first enqueue of the session looks at outbox.messages: as installed, it inserts
-- without the executor's checks and says nothing; a changed table would make it say so
-- at DEBUG1 (see "A table changed by someone else" below).
SET client_min_messages = debug1;
SELECT outbox.enqueue('billing', '{"order_id": 42}'::jsonb, event_type => 'order.created');
RESET client_min_messages;
SELECT outbox.enqueue('billing', '{"order_id": 43, "lines": [1, 2]}'::jsonb,
                      event_type => 'order.created',
                      headers => '{"X-Request-Id": "r-1"}',
                      ordering_key => 'customer-7',
                      idempotency_key => 'order-43-created');
SELECT outbox.enqueue('orders_feed', '{"order_id": 42}'::jsonb);
-- Any JSON value is a payload, JSON null included.
SELECT outbox.enqueue('orders_feed', '"just a string"'::jsonb);
SELECT outbox.enqueue('orders_feed', 'null'::jsonb);
SELECT outbox.enqueue('orders_feed', '[]'::jsonb, headers => '{}');
SELECT * FROM msgs ORDER BY id;
-- created_at and next_attempt_at are the enqueuing transaction's time.
SELECT bool_and(next_attempt_at = created_at) AS due_at_creation FROM outbox.messages;

-- Only the caller's transaction decides: a rolled-back enqueue leaves nothing.
BEGIN;
SELECT outbox.enqueue('billing', '{"order_id": 44}'::jsonb) AS rolled_back_id \gset
SELECT count(*) AS visible_inside FROM outbox.messages WHERE id = :rolled_back_id;
ROLLBACK;
SELECT count(*) AS left_after_rollback FROM outbox.messages WHERE id = :rolled_back_id;
-- Several in one transaction: all or none.
BEGIN;
SELECT outbox.enqueue('billing', jsonb_build_object('n', n)) IS NOT NULL AS enqueued
  FROM generate_series(1, 3) AS n;
COMMIT;
SELECT count(*) AS committed_batch FROM outbox.messages WHERE payload ? 'n';

-- A paused endpoint still accepts messages.
SELECT outbox.pause_endpoint('orders_feed');
SELECT outbox.enqueue('orders_feed', '{"while": "paused"}'::jsonb) > 0 AS accepted;
SELECT outbox.resume_endpoint('orders_feed');

-- A privileged role may also INSERT directly; the defaults fill the rest.
INSERT INTO outbox.messages (endpoint, payload) VALUES ('billing', '{"direct": true}');
SELECT m.endpoint, m.payload, s.status, m.attempts, m.next_attempt_at = m.created_at AS due_at_creation
  FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s WHERE m.payload ? 'direct';

------------------------------------------------------------------------------------------
-- Idempotency
------------------------------------------------------------------------------------------
SELECT outbox.enqueue('billing', '{"v": 1}'::jsonb, idempotency_key => 'evt_1') AS first_id \gset
-- Same endpoint and key: the same id, nothing inserted, the first payload kept.
SELECT outbox.enqueue('billing', '{"v": 2}'::jsonb, idempotency_key => 'evt_1') = :first_id AS same_id;
SELECT outbox.enqueue('billing', '{"v": 3}'::jsonb, event_type => 'other',
                      idempotency_key => 'evt_1') = :first_id AS same_id;
SELECT id = :first_id AS is_first, payload, event_type
  FROM outbox.messages WHERE idempotency_key = 'evt_1';
-- Twice in one transaction too.
BEGIN;
SELECT outbox.enqueue('billing', '{"v": 1}'::jsonb, idempotency_key => 'evt_2') AS tx_id \gset
SELECT outbox.enqueue('billing', '{"v": 1}'::jsonb, idempotency_key => 'evt_2') = :tx_id AS same_id;
COMMIT;
SELECT count(*) AS rows_with_evt_2 FROM outbox.messages WHERE idempotency_key = 'evt_2';
-- The key is per endpoint: another endpoint gets its own message.
SELECT outbox.enqueue('orders_feed', '{"v": 1}'::jsonb, idempotency_key => 'evt_1') <> :first_id AS new_id;
SELECT endpoint, count(*) FROM outbox.messages WHERE idempotency_key = 'evt_1'
 GROUP BY endpoint ORDER BY endpoint;
-- A key is held while its message is in the queue.  A delivered message leaves the
-- queue (for the history), and with it goes its hold on the key: the next enqueue with
-- that key is a new message ...
SELECT pg_temp.deliver(ARRAY[:first_id]::bigint[]) AS delivered;
SELECT status FROM outbox.message(:first_id);
SELECT outbox.enqueue('billing', '{"v": 4}'::jsonb, idempotency_key => 'evt_1') AS second_id \gset
SELECT :second_id > :first_id AS new_id;
-- ... which holds the key in turn while it waits.
SELECT outbox.enqueue('billing', '{"v": 5}'::jsonb, idempotency_key => 'evt_1') = :second_id AS same_id;
SELECT payload FROM outbox.messages WHERE endpoint = 'billing' AND idempotency_key = 'evt_1';
SELECT id = :first_id AS is_first, payload FROM outbox.history
 WHERE endpoint = 'billing' AND idempotency_key = 'evt_1';
-- 200 characters, and the characters a key may use.
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => repeat('k', 200)) > 0 AS accepted;
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => 'evt_2Rz-9:x/y_Z~ü') > 0 AS accepted;
-- A key may not look like pg_outbox's own webhook-ids (msg_...): a receiver that
-- deduplicates on webhook-id would take the one for the other.  Nothing is inserted.
SELECT count(*) AS before FROM outbox.messages \gset
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => 'msg_2Rz-9');
\echo :SQLSTATE
SELECT count(*) = :before AS nothing_inserted FROM outbox.messages;

------------------------------------------------------------------------------------------
-- deliver_at
------------------------------------------------------------------------------------------
SELECT outbox.enqueue('billing', '{"later": true}'::jsonb,
                      deliver_at => now() + interval '1 hour') AS later_id \gset
SELECT m.next_attempt_at > now() AS in_the_future,
       m.next_attempt_at = m.created_at + interval '1 hour' AS exactly_then, s.status
  FROM outbox.messages m CROSS JOIN LATERAL outbox.message(m.id) s WHERE m.id = :later_id;
-- A time in the past means at once.
SELECT outbox.enqueue('billing', '{"past": true}'::jsonb,
                      deliver_at => now() - interval '1 day') AS past_id \gset
SELECT next_attempt_at = created_at AS due_at_creation FROM outbox.messages WHERE id = :past_id;
SELECT outbox.enqueue('billing', '{"infinity": true}'::jsonb,
                      deliver_at => '-infinity') AS past_id \gset
SELECT next_attempt_at = created_at AS due_at_creation FROM outbox.messages WHERE id = :past_id;

------------------------------------------------------------------------------------------
-- Backpressure: max_pending counts undelivered (pending or in-flight) messages.
------------------------------------------------------------------------------------------
SELECT outbox.enqueue('limited', '{"n": 1}'::jsonb, idempotency_key => 'lim-1') AS lim_1 \gset
SELECT outbox.enqueue('limited', '{"n": 2}'::jsonb) > 0 AS accepted;
SELECT outbox.enqueue('limited', '{"n": 3}'::jsonb) > 0 AS accepted;
SELECT outbox.enqueue('limited', '{"n": 4}'::jsonb);
\echo :SQLSTATE
SELECT outbox.enqueue('limited', '{"n": 4}'::jsonb, idempotency_key => 'lim-4');
\echo :SQLSTATE
-- A retried enqueue of a message already in is not new work: it gets its id.
SELECT outbox.enqueue('limited', '{"n": 1}'::jsonb, idempotency_key => 'lim-1') = :lim_1 AS same_id;
SELECT count(*) AS limited_rows FROM outbox.messages WHERE endpoint = 'limited';
-- In-flight messages count (the worker's claim lists them); delivered ones do not.
INSERT INTO outbox.claims (message_ids, attempts) VALUES (ARRAY[:lim_1]::bigint[], '{1}');
SELECT status FROM outbox.message(:lim_1);
SELECT outbox.enqueue('limited', '{"n": 4}'::jsonb);
\echo :SQLSTATE
SELECT pg_temp.deliver(ARRAY[:lim_1]::bigint[]) AS delivered;
DELETE FROM outbox.claims;
SELECT outbox.enqueue('limited', '{"n": 4}'::jsonb) > 0 AS accepted;
SELECT outbox.enqueue('limited', '{"n": 5}'::jsonb);
\echo :SQLSTATE
-- Raising the limit lets more in.
SELECT outbox.alter_endpoint('limited', max_pending => 4);
SELECT outbox.enqueue('limited', '{"n": 5}'::jsonb) > 0 AS accepted;
SELECT outbox.enqueue('limited', '{"n": 6}'::jsonb);
\echo :SQLSTATE
SELECT s.status, count(*)
  FROM (SELECT id FROM outbox.messages UNION ALL SELECT id FROM outbox.history) i
 CROSS JOIN LATERAL outbox.message(i.id) s
 WHERE s.endpoint = 'limited' GROUP BY s.status ORDER BY s.status;

------------------------------------------------------------------------------------------
-- Bad input: each refused, nothing inserted.
------------------------------------------------------------------------------------------
SELECT count(*) AS messages_before FROM outbox.messages \gset
-- NULL payload, NULL endpoint, unknown endpoint.
SELECT outbox.enqueue('billing', NULL);
\echo :SQLSTATE
SELECT outbox.enqueue(NULL, '{}'::jsonb);
\echo :SQLSTATE
SELECT outbox.enqueue('nope', '{}'::jsonb);
\echo :SQLSTATE
SELECT outbox.enqueue('Billing', '{}'::jsonb);
\echo :SQLSTATE
-- Headers: not an object, a value that is not a string, CR/LF in a name or value.
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '[]');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '"X-A: 1"');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '{"X-A": 1}');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '{"X-A": null}');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '{"X-A\r\nX-Injected": "1"}');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '{"X-A": "1\r\nX-Injected: 1"}');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '{"X-A": "1\n"}');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, headers => '{"X A": "1"}');
\echo :SQLSTATE
-- Idempotency keys: ".", whitespace, control characters, empty, 201 characters.
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => 'order.42');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => 'order 42');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => E'order\t42');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => E'order-42\n');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => E'order\u00a042');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => E'order\x0142');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => '');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, idempotency_key => repeat('k', 201));
\echo :SQLSTATE
-- event_type travels in a header: no CR/LF.
SELECT outbox.enqueue('billing', '{}'::jsonb, event_type => E'order.created\r\nX-Injected: 1');
\echo :SQLSTATE
-- Bounds that keep every row deliverable: event_type is also indexed in the DLQ, and
-- an infinite deliver_at could never be scheduled.
SELECT outbox.enqueue('billing', '{}'::jsonb, event_type => E'order\x01created');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, event_type => repeat('e', 201));
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, ordering_key => repeat('k', 201));
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}'::jsonb, deliver_at => 'infinity');
\echo :SQLSTATE
-- A payload over pg_outbox.max_payload_size (1 MB here, its default: the GUC is set
-- with ALTER SYSTEM and a reload, never by SET) is refused with 54000, and nothing is
-- inserted.  The size is the payload's as stored, uncompressed: exactly at the limit
-- is accepted (and rolled back), one byte over is not.
SHOW pg_outbox.max_payload_size;
SELECT outbox._payload_size(to_jsonb(repeat('x', 1048576 - 8))) AS at_the_limit,
       outbox._payload_size(to_jsonb(repeat('x', 1048576 - 7))) AS one_byte_over;
BEGIN;
SELECT outbox.enqueue('billing', to_jsonb(repeat('x', 1048576 - 8))) > 0 AS accepted_at_the_limit;
ROLLBACK;
SELECT outbox.enqueue('billing', to_jsonb(repeat('x', 1048576 - 7)));
\echo :SQLSTATE
SELECT outbox.enqueue('billing', jsonb_build_object('blob', repeat('x', 2000000)), event_type => 'big',
                      idempotency_key => 'too-big');
\echo :SQLSTATE
-- Compression does not hide the size: a payload stored compressed (a very repetitive
-- 2 MB) is measured as what it is.
CREATE TEMP TABLE big_payloads (payload jsonb);
INSERT INTO big_payloads VALUES (jsonb_build_object('blob', repeat('x', 2000000)));
SELECT pg_column_size(payload) < 100000 AS stored_compressed, outbox._payload_size(payload) AS size
  FROM big_payloads;
SELECT outbox.enqueue('billing', payload) FROM big_payloads;
\echo :SQLSTATE
-- A plain INSERT cannot bypass them: the table's CHECK constraints hold the same bounds.
\set VERBOSITY terse
INSERT INTO outbox.messages (endpoint, payload, event_type) VALUES ('billing', '{}', repeat('e', 201));
\echo :SQLSTATE
INSERT INTO outbox.messages (endpoint, payload, next_attempt_at) VALUES ('billing', '{}', 'infinity');
\echo :SQLSTATE
\set VERBOSITY default
SELECT count(*) - :messages_before AS inserted_by_bad_calls FROM outbox.messages;

-- The producer's commit is untouched: the worker's synchronous_commit = off is its own.
BEGIN;
SELECT outbox.enqueue('billing', '{}') > 0 AS enqueued;
SHOW synchronous_commit;
ROLLBACK;

-- enqueue writes its row without a statement, but every column is what an INSERT with
-- the table's defaults would have written, and in the same transaction it is visible
-- to the next statement.
BEGIN;
SELECT outbox.enqueue('billing', '{"n": 1}', event_type => 'row.check', ordering_key => 'k') AS row_id \gset
SELECT endpoint, event_type, payload, headers, ordering_key, idempotency_key, attempts,
       next_attempt_at = now() AS due_now, created_at = now() AS created_now,
       last_error, last_http_status, first_failed_at
  FROM outbox.messages WHERE id = :row_id;
ROLLBACK;
-- Several enqueues in one statement see each other, as separate statements would: the
-- same idempotency key twice gives one message, and max_pending counts the rows the
-- statement itself has added.
SELECT outbox.create_endpoint('one-statement', url => 'http://127.0.0.1:9/', max_pending => 3);
SELECT outbox.pause_endpoint('one-statement');
SELECT count(DISTINCT outbox.enqueue('one-statement', '{}', idempotency_key => 'same')) AS distinct_ids
  FROM generate_series(1, 2);
\set VERBOSITY terse
SELECT outbox.enqueue('one-statement', jsonb_build_object('n', g)) FROM generate_series(1, 5) g;
\echo :SQLSTATE
\set VERBOSITY default
SELECT count(*) AS queued FROM outbox.messages WHERE endpoint = 'one-statement';
SELECT outbox.drop_endpoint('one-statement', true);

-- A table changed by someone else (here a CHECK an operator added) gets every check
-- of the executor: enqueue honours the new constraint and inserts nothing.
ALTER TABLE outbox.messages ADD CONSTRAINT local_small_payloads CHECK (length(payload::text) < 50);
SET client_min_messages = debug1;
SELECT outbox.enqueue('billing', '{"changed": true}') > 0 AS enqueued_with_the_executors_checks;
RESET client_min_messages;
SELECT count(*) AS messages_before_local_check FROM outbox.messages \gset
\set VERBOSITY terse
SELECT outbox.enqueue('billing', jsonb_build_object('blob', repeat('x', 100)));
\echo :SQLSTATE
\set VERBOSITY default
SELECT outbox.enqueue('billing', '{"small": true}') > 0 AS small_one_enqueued;
SELECT count(*) - :messages_before_local_check AS inserted FROM outbox.messages;
ALTER TABLE outbox.messages DROP CONSTRAINT local_small_payloads;
-- A CHECK added on a column enqueue checks itself (PostgreSQL names it
-- messages_event_type_check1) is not taken for the installed one: it is honoured too.
ALTER TABLE outbox.messages ADD CHECK (event_type <> 'forbidden.event');
SELECT conname FROM pg_constraint WHERE conrelid = 'outbox.messages'::regclass AND conname LIKE 'messages_event_type_check%' ORDER BY 1;
\set VERBOSITY terse
SELECT outbox.enqueue('billing', '{}', event_type => 'forbidden.event');
\echo :SQLSTATE
\set VERBOSITY default
SELECT count(*) - :messages_before_local_check AS inserted FROM outbox.messages;
ALTER TABLE outbox.messages DROP CONSTRAINT messages_event_type_check1;
-- A column someone added with a default and NOT NULL: enqueue's row gets the default;
-- without the default, the NOT NULL refuses it (enqueue knows no column of theirs).
ALTER TABLE outbox.messages ADD COLUMN local_tenant text NOT NULL DEFAULT 'acme';
SELECT outbox.enqueue('billing', '{"tenant": true}') AS tenant_message \gset
SELECT local_tenant FROM outbox.messages WHERE id = :tenant_message;
ALTER TABLE outbox.messages ALTER COLUMN local_tenant DROP DEFAULT;
\set VERBOSITY terse
SELECT outbox.enqueue('billing', '{"tenant": false}');
\echo :SQLSTATE
\set VERBOSITY default
ALTER TABLE outbox.messages DROP COLUMN local_tenant;
SELECT count(*) - :messages_before_local_check AS inserted FROM outbox.messages;

-- outbox._claimable(tableoid, ctid): the claim's stand-in for FOR UPDATE SKIP LOCKED,
-- asked about rows that a transaction touched since their INSERT. A row nobody touched
-- is free; so is the version a committed UPDATE wrote (its xmax is the UPDATE's own row
-- lock, over); the version it left behind is not (nor is a row that another
-- transaction is changing: t/035 §4b). It reads no table but outbox.messages.
SELECT outbox.enqueue('billing', '{"claimable": 1}') AS claimable_id \gset
SELECT ctid AS old_ctid, outbox._claimable(tableoid, ctid) AS untouched FROM outbox.messages
 WHERE id = :claimable_id \gset
SELECT :'untouched' AS untouched;
UPDATE outbox.messages SET payload = '{"claimable": 2}' WHERE id = :claimable_id;
SELECT outbox._claimable('outbox.messages'::regclass, :'old_ctid') AS updated_version,
       xmax <> '0' AS new_version_has_xmax, outbox._claimable(tableoid, ctid) AS new_version
  FROM outbox.messages WHERE id = :claimable_id;
DELETE FROM outbox.messages WHERE id = :claimable_id;
\set VERBOSITY terse
SELECT outbox._claimable('pg_class'::regclass, '(0,1)');
\echo :SQLSTATE
\set VERBOSITY default

-- Clean up for the next file.
TRUNCATE outbox.messages;
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints ORDER BY name;
