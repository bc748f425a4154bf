--
-- DROP EXTENSION removes everything it created, data included; CREATE EXTENSION again
-- starts afresh and works.  (Last file: it leaves the extension installed and empty.)
--
\set SHOW_CONTEXT never
SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing',
                              secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
SELECT outbox.enqueue('billing', '{"n": 1}'::jsonb) > 0 AS enqueued;

DROP EXTENSION pg_outbox;
\echo :SQLSTATE
SELECT nspname FROM pg_namespace WHERE nspname IN ('outbox', 'dlq');
SELECT count(*) AS functions_left FROM pg_proc WHERE proname IN ('enqueue', 'requeue', 'metrics');
SELECT outbox.enqueue('billing', '{}'::jsonb);
\echo :SQLSTATE

CREATE EXTENSION pg_outbox;
\echo :SQLSTATE
SELECT count(*) AS endpoints FROM outbox.endpoints;
SELECT count(*) AS messages FROM outbox.messages;
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
