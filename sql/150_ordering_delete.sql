--
-- Ordering (docs/delivery.md, Ordering): a DELETE by plain SQL (an operator, a pull
-- reader's answer, drop_endpoint) hands each key's place to its next message, looked at
-- once per key and statement (extension/src/30_tables.sql, messages_heads_gone). The
-- worker of this suite serves another database: only the triggers move anything here.
--
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;
SELECT outbox.create_endpoint('orders', url => 'http://127.0.0.1:8080/hooks/orders', ordered => true);
SELECT outbox.pause_endpoint('orders');
-- Three keys of four messages each, committed in id order: each key's first is its head.
SELECT count(outbox.enqueue('orders', jsonb_build_object('n', g), ordering_key => 'k' || (g % 3)))
  FROM generate_series(1, 12) g;
CREATE TEMP VIEW heads AS
SELECT ordering_key, array_agg(payload->>'n' ORDER BY id) FILTER (WHERE ordering_seq IS NULL) AS head,
       count(*) AS queued
  FROM outbox.messages WHERE endpoint = 'orders' GROUP BY ordering_key ORDER BY ordering_key;
SELECT * FROM heads;
-- One statement deletes the heads of k0 and k1 and the next message of k1 too: k0's next
-- message and k1's third become the heads; k2 keeps its head.
DELETE FROM outbox.messages WHERE endpoint = 'orders' AND (payload->>'n')::int IN (3, 1, 4);
SELECT * FROM heads;
-- A statement that deletes followers only changes no head.
DELETE FROM outbox.messages WHERE endpoint = 'orders' AND (payload->>'n')::int IN (11, 12);
SELECT * FROM heads;
-- Every message of every key in one statement: nothing is left to promote.
DELETE FROM outbox.messages WHERE endpoint = 'orders';
SELECT * FROM heads;
-- In a transaction rolled back, nothing moved.
SELECT count(outbox.enqueue('orders', jsonb_build_object('n', g), ordering_key => 'k')) FROM generate_series(1, 3) g;
BEGIN;
DELETE FROM outbox.messages WHERE endpoint = 'orders' AND payload->>'n' = '1';
SELECT * FROM heads;
ROLLBACK;
SELECT * FROM heads;
