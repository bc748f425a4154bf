--
-- DROP EXTENSION removes everything it created, data included; CREATE EXTENSION again
-- starts afresh and works.  (Last file: it leaves the extension installed and empty.)
--
\set SHOW_CONTEXT never
SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.enqueue('billing', '{"n": 1}'::jsonb) > 0 AS enqueued;
-- The history's time partitions are created by the worker, not by the install script;
-- they go with the extension all the same, with what they hold.
SELECT outbox._history_prepare(3600) > now() AS partitions_prepared;
INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
VALUES (1000, 'billing', '{"n": 0}', 1, now(), now()), (1001, 'billing', '{"n": 0}', 1, now(), '2000-01-01');
SELECT count(*) > 1 AS history_relations
  FROM pg_inherits WHERE inhparent = 'outbox.history'::regclass;

DROP EXTENSION pg_outbox;
\echo :SQLSTATE
SELECT nspname FROM pg_namespace WHERE nspname IN ('outbox', 'dlq');
SELECT count(*) AS functions_left FROM pg_proc WHERE proname IN ('enqueue', 'requeue', 'metrics');
SELECT count(*) AS history_tables_left FROM pg_class WHERE relname LIKE 'history%' AND relkind IN ('r', 'p');
SELECT outbox.enqueue('billing', '{}'::jsonb);
\echo :SQLSTATE

CREATE EXTENSION pg_outbox;
\echo :SQLSTATE
SELECT count(*) AS endpoints FROM outbox.endpoints;
SELECT count(*) AS messages FROM outbox.messages;
SELECT count(*) AS history FROM outbox.history;
SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing');
SELECT outbox.enqueue('billing', '{"n": 1}'::jsonb);
SELECT outbox._boundary_selftest('ok');
SELECT outbox.drop_endpoint('billing', force => true);
SELECT dlq.requeue_all(endpoint => 'billing');
\echo :SQLSTATE
TRUNCATE dlq.dead_letters;

-- A second CREATE is refused; so is one with a schema of the same name in the way.
CREATE EXTENSION pg_outbox;
\echo :SQLSTATE
DROP EXTENSION pg_outbox;
CREATE SCHEMA dlq;
CREATE EXTENSION pg_outbox;
\echo :SQLSTATE
SELECT count(*) AS extensions FROM pg_extension WHERE extname = 'pg_outbox';
SELECT nspname FROM pg_namespace WHERE nspname IN ('outbox', 'dlq');
DROP SCHEMA dlq;
CREATE EXTENSION pg_outbox;
\echo :SQLSTATE
SELECT count(*) AS endpoints FROM outbox.endpoints;
