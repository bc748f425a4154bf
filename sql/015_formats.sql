--
-- Formats and batches (docs/delivery.md, CloudEvents and Batches): the format, source
-- and batch_size options of create_endpoint / alter_endpoint, and every way to get them
-- wrong, including a message without an event type for a CloudEvents endpoint.  After
-- each group of refused calls the tables are shown unchanged.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;

CREATE TEMP VIEW fmts AS
SELECT name, url IS NOT NULL AS http, format, source, batch_size FROM outbox.endpoints;

------------------------------------------------------------------------------------------
-- Normal use
------------------------------------------------------------------------------------------
SELECT outbox.create_endpoint('sw', url => 'http://127.0.0.1:8080/sw');
SELECT outbox.create_endpoint('ce.bin', url => 'http://127.0.0.1:8080/bin', format => 'cloudevents-binary');
SELECT outbox.create_endpoint('ce.struct', url => 'http://127.0.0.1:8080/struct',
                              format => 'cloudevents-structured', source => 'https://shop.example/orders',
                              batch_size => 100);
SELECT outbox.create_endpoint('n', channel => 'orders');
SELECT * FROM fmts ORDER BY name;

-- alter_endpoint changes what it is given; source => '' goes back to the default.
SELECT outbox.alter_endpoint('sw', batch_size => 1000);
SELECT outbox.alter_endpoint('ce.struct', source => '');
SELECT outbox.alter_endpoint('ce.bin', format => 'standard-webhooks');
SELECT outbox.alter_endpoint('ce.bin', format => 'cloudevents-binary', source => '/orders');
SELECT * FROM fmts ORDER BY name;

------------------------------------------------------------------------------------------
-- Bad input: refused with its SQLSTATE, nothing changed
------------------------------------------------------------------------------------------
\set VERBOSITY terse
SELECT outbox.create_endpoint('x', url => 'http://127.0.0.1:8080/x', format => 'cloudevents');
\echo :SQLSTATE
SELECT outbox.create_endpoint('x', url => 'http://127.0.0.1:8080/x', batch_size => 0);
\echo :SQLSTATE
SELECT outbox.create_endpoint('x', url => 'http://127.0.0.1:8080/x', batch_size => 1001);
\echo :SQLSTATE
SELECT outbox.create_endpoint('x', url => 'http://127.0.0.1:8080/x', source => '');
\echo :SQLSTATE
SELECT outbox.create_endpoint('x', url => 'http://127.0.0.1:8080/x', source => E'/a\nb');
\echo :SQLSTATE
SELECT outbox.create_endpoint('x', url => 'http://127.0.0.1:8080/x', source => repeat('s', 1001));
\echo :SQLSTATE
-- NOTIFY endpoints carry one message in their own envelope.
SELECT outbox.create_endpoint('x', channel => 'x', format => 'cloudevents-binary');
\echo :SQLSTATE
SELECT outbox.create_endpoint('x', channel => 'x', batch_size => 10);
\echo :SQLSTATE
SELECT outbox.create_endpoint('x', channel => 'x', source => '/x');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('n', format => 'cloudevents-structured');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('n', batch_size => 2);
\echo :SQLSTATE
SELECT outbox.alter_endpoint('sw', format => 'CloudEvents-Binary');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('sw', batch_size => -1);
\echo :SQLSTATE
-- The table's own checks hold for privileged direct writes too.
UPDATE outbox.endpoints SET format = 'json' WHERE name = 'sw';
\echo :SQLSTATE
UPDATE outbox.endpoints SET batch_size = 0 WHERE name = 'sw';
\echo :SQLSTATE
UPDATE outbox.endpoints SET batch_size = 2 WHERE name = 'n';
\echo :SQLSTATE
\set VERBOSITY default
SELECT * FROM fmts ORDER BY name;

------------------------------------------------------------------------------------------
-- A message without an event type cannot go to a CloudEvents endpoint
------------------------------------------------------------------------------------------
SELECT outbox.pause_endpoint(name) FROM outbox.endpoints WHERE url IS NOT NULL ORDER BY name;
SELECT outbox.enqueue('ce.bin', '{"a": 1}');
\echo :SQLSTATE
SELECT outbox.enqueue('ce.bin', '{"a": 1}', event_type => 'order.created') > 0 AS enqueued;
-- Standard Webhooks has no such rule.
SELECT outbox.enqueue('sw', '{"a": 2}') > 0 AS enqueued;
-- ... but then sw cannot become a CloudEvents endpoint while that message is queued.
SELECT outbox.alter_endpoint('sw', format => 'cloudevents-structured');
\echo :SQLSTATE
SELECT endpoint, event_type, payload FROM outbox.messages ORDER BY id;
SELECT * FROM fmts ORDER BY name;

-- Clean up for the next file.
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
SELECT outbox.drop_endpoint(name) FROM outbox.endpoints ORDER BY name;
