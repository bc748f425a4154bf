--
-- Replay (docs/delivery.md, Replay): the messages delivered to an endpoint in a window,
-- sent again from the history with their webhook-ids, in their delivery order; windows
-- before the history and bad input refused with nothing changed.  No worker serves this
-- database: the replayed messages wait in outbox.replay_queue until the test moves them
-- into the queue as the worker does (outbox._replays_move); those of a pull or an
-- ordered endpoint are queued by the replay itself.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;
DELETE FROM outbox.history;

SELECT outbox.create_endpoint('feed', url => 'http://127.0.0.1:8080/hooks/feed');
SELECT outbox.create_endpoint('other', url => 'http://127.0.0.1:8080/hooks/other');
SELECT outbox.pause_endpoint('feed');
SELECT outbox.pause_endpoint('other');

-- A delivered history (as the worker writes it), ids deliberately not in sent_at order.
INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                            attempts, last_http_status, created_at, sent_at)
VALUES (101, 'feed', 'order.created', '{"n": 1}', NULL, 'k', NULL, 1, 200, now() - interval '3 hours', now() - interval '2 hours'),
       (105, 'feed', 'order.created', '{"n": 2}', NULL, 'k', 'key-2', 1, 200, now() - interval '3 hours', now() - interval '80 minutes'),
       (103, 'feed', 'order.paid',    '{"n": 3}', '{"X-A": "b"}', 'k', NULL, 2, 200, now() - interval '3 hours', now() - interval '70 minutes'),
       (104, 'feed', 'order.created', '{"n": 4}', NULL, NULL, NULL, 1, 200, now() - interval '3 hours', now() - interval '10 minutes'),
       (102, 'other', 'order.created', '{"n": 5}', NULL, NULL, NULL, 1, 200, now() - interval '3 hours', now() - interval '75 minutes');

-- The window [90 min ago, 5 min ago): n = 2, 3, 4 of feed, in delivery order, with their
-- webhook-ids (the key, or msg_<instance>_<id>).
SELECT outbox.replay('feed', now() - interval '90 minutes', now() - interval '5 minutes');
SELECT n, endpoint, payload, webhook_id LIKE 'msg\_%' OR webhook_id = 'key-2' AS webhook_id_kept
  FROM outbox.replay_queue ORDER BY n;
SELECT pending FROM outbox.endpoint_stats WHERE endpoint = 'feed';
-- Moved in batches, in their order.
SELECT outbox._replays_move(2);
SELECT outbox._replays_move(2);
SELECT count(*) AS left_to_move FROM outbox.replay_queue;
SELECT m.id, m.endpoint, m.event_type, m.payload, m.headers, m.ordering_key,
       m.idempotency_key = CASE h.id WHEN 105 THEN 'key-2' ELSE (SELECT 'msg_' || i.id || '_' || h.id FROM outbox._instance() i) END
           AS original_webhook_id,
       m.attempts, m.ordering_seq IS NULL AS head_of_its_key
  FROM outbox.messages m JOIN outbox.history h ON h.payload = m.payload AND h.endpoint = m.endpoint
 ORDER BY m.id;
-- Again while they are queued: nothing twice.
SELECT outbox.replay('feed', now() - interval '90 minutes', now() - interval '5 minutes');
DELETE FROM outbox.messages;
-- Replayed twice before the move: the second copy of each finds the first queued and is
-- not queued.
SELECT outbox.replay('feed', now() - interval '90 minutes', now() - interval '5 minutes');
SELECT outbox.replay('feed', now() - interval '90 minutes', now() - interval '5 minutes');
SELECT outbox._replays_move(1000);
SELECT count(*) AS queued, count(DISTINCT idempotency_key) AS webhook_ids FROM outbox.messages;
DELETE FROM outbox.messages;
-- drop_endpoint: replayed messages not yet moved count as undelivered, and go with force.
SELECT outbox.create_endpoint('short-lived', url => 'http://127.0.0.1:8080/hooks/short');
INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
VALUES (106, 'short-lived', '{"n": 6}', 1, now() - interval '1 hour', now() - interval '1 hour');
SELECT outbox.replay('short-lived', now() - interval '2 hours');
SELECT outbox.drop_endpoint('short-lived');
\echo :SQLSTATE
SELECT outbox.drop_endpoint('short-lived', force => true);
SELECT count(*) AS left_behind FROM outbox.replay_queue;
SELECT count(*) AS dead_lettered FROM dlq.dead_letters;
-- A pull endpoint's readers need no worker: its replayed messages are queued at once.
SELECT outbox.create_endpoint('parser', pull => true);
INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
VALUES (108, 'parser', '{"n": 8}', 1, now() - interval '1 hour', now() - interval '1 hour'),
       (109, 'parser', '{"n": 9}', 1, now() - interval '1 hour', now() - interval '50 minutes');
SELECT outbox.replay('parser', now() - interval '2 hours');
SELECT endpoint, payload FROM outbox.messages ORDER BY id;
SELECT count(*) AS left_to_move FROM outbox.replay_queue;
SELECT outbox.drop_endpoint('parser', force => true);
DELETE FROM dlq.dead_letters;
-- So are an ordered endpoint's: they take their place in their keys' order at the
-- replay's commit, as enqueued messages do (the first of key k is its head).
SELECT outbox.create_endpoint('sorted', url => 'http://127.0.0.1:8080/hooks/sorted', ordered => true);
INSERT INTO outbox.history (id, endpoint, payload, ordering_key, attempts, created_at, sent_at)
VALUES (110, 'sorted', '{"n": 10}', 'k', 1, now() - interval '1 hour', now() - interval '1 hour'),
       (111, 'sorted', '{"n": 11}', 'k', 1, now() - interval '1 hour', now() - interval '50 minutes'),
       (112, 'sorted', '{"n": 12}', NULL, 1, now() - interval '1 hour', now() - interval '40 minutes');
SELECT outbox.replay('sorted', now() - interval '2 hours');
SELECT payload, ordering_key, ordering_seq IS NULL AS head FROM outbox.messages ORDER BY id;
SELECT count(*) AS left_to_move FROM outbox.replay_queue;
SELECT outbox.drop_endpoint('sorted', force => true);
DELETE FROM dlq.dead_letters;
-- A replayed message whose endpoint went before the move is not queued.
SELECT outbox.create_endpoint('gone-soon', url => 'http://127.0.0.1:8080/hooks/gone');
INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
VALUES (107, 'gone-soon', '{"n": 7}', 1, now() - interval '1 hour', now() - interval '1 hour');
SELECT outbox.replay('gone-soon', now() - interval '2 hours');
DELETE FROM outbox.endpoints WHERE name = 'gone-soon';
SELECT outbox._replays_move(1000);
SELECT count(*) AS queued, (SELECT count(*) FROM outbox.replay_queue) AS left_to_move FROM outbox.messages;
-- An event type; the default until (now); another endpoint's window.
SELECT outbox.replay('feed', now() - interval '90 minutes', event_type => 'order.created');
SELECT outbox._replays_move(1000);
SELECT endpoint, payload FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;
SELECT outbox.replay('other', now() - interval '23 hours');
SELECT outbox._replays_move(1000);
SELECT endpoint, payload FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;
-- An empty window is not an error.
SELECT outbox.replay('feed', now() - interval '1 minute', now() - interval '1 minute');
-- An endpoint that becomes ordered queues its replayed messages still waiting first:
-- they go before a message committed to their key after the change.
INSERT INTO outbox.history (id, endpoint, payload, ordering_key, attempts, created_at, sent_at)
VALUES (113, 'other', '{"n": 13}', 'k', 1, now() - interval '1 hour', now() - interval '30 minutes');
SELECT outbox.replay('other', now() - interval '2 hours');
SELECT count(*) AS waiting FROM outbox.replay_queue;
SELECT outbox.alter_endpoint('other', ordered => true);
SELECT count(*) AS waiting FROM outbox.replay_queue;
SELECT outbox.enqueue('other', '{"n": 14}', ordering_key => 'k') IS NOT NULL AS enqueued;
SELECT payload, ordering_key, ordering_seq IS NULL AS head FROM outbox.messages ORDER BY id;
DELETE FROM outbox.messages;
DELETE FROM outbox.history WHERE id = 113;

-- Bad input: nothing queued.
SELECT outbox.replay('nowhere', now() - interval '1 hour');
\echo :SQLSTATE
SELECT outbox.replay(NULL, now() - interval '1 hour');
\echo :SQLSTATE
SELECT outbox.replay('feed', NULL);
\echo :SQLSTATE
SELECT outbox.replay('feed', now() - interval '1 hour', NULL);
\echo :SQLSTATE
SELECT outbox.replay('feed', now() - interval '1 hour', now() - interval '2 hours');
\echo :SQLSTATE
-- Before the history (pg_outbox.sent_retention is 1 day here): the error says where the
-- history starts (the time shown as <start>).
DO $$
BEGIN
    PERFORM outbox.replay('feed', now() - interval '2 days');
EXCEPTION WHEN invalid_parameter_value THEN
    RAISE NOTICE '% | % | start is a day ago: %', regexp_replace(SQLERRM, 'to .*$', 'to <start>'), SQLSTATE,
        substring(SQLERRM FROM 'goes back to (.*)$')::timestamptz = now() - interval '1 day';
END
$$;
SELECT count(*) AS queued, (SELECT count(*) FROM outbox.replay_queue) AS to_move FROM outbox.messages;

-- Cleanup.
DELETE FROM outbox.history;
DELETE FROM outbox.endpoints;
