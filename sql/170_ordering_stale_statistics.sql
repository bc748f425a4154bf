--
-- Per-key commit order does not depend on when the queue was last analyzed. A drained
-- queue analyzed while empty (autovacuum does it between two bursts) says it holds no
-- row however many pages it has; the commit that placed a bulk INSERT's keyed rows then
-- ran its numbering as a scan of the whole queue per key, each drawing a number for every
-- follower again (a 100,000-row INSERT of 3,333 keys did not commit in 8 minutes).
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims RESTART IDENTITY;
DELETE FROM outbox.endpoints;
SELECT outbox.create_endpoint('stale', url => 'http://127.0.0.1:8080/hooks/stale', ordered => true);
SELECT outbox.pause_endpoint('stale');

-- A queue that held 100,000 rows, drained, and analyzed empty: its pages stay.
INSERT INTO outbox.messages (endpoint, payload) SELECT 'stale', '{}' FROM generate_series(1, 100000);
DELETE FROM outbox.messages;
ANALYZE outbox.messages;
SELECT relpages > 0 AS has_pages, reltuples AS tuples FROM pg_class WHERE oid = 'outbox.messages'::regclass;

-- 50 keys of 100 messages in one INSERT: each key's head, and 99 followers numbered in
-- their commit order, one number each.
SELECT nextval('outbox.commit_order') AS before \gset
-- (The index entries the commit reads are counted by the statistics, flushed when the
-- session is idle between two statements.)
SELECT pg_stat_force_next_flush();
SELECT idx_tup_read AS read_before FROM pg_stat_user_indexes WHERE indexrelid = 'outbox.messages_pkey'::regclass \gset
INSERT INTO outbox.messages (endpoint, payload, ordering_key)
SELECT 'stale', jsonb_build_object('n', g), 'k' || (g % 50) FROM generate_series(1, 5000) g;
SELECT count(*) FILTER (WHERE ordering_seq IS NULL) AS heads,
       count(*) FILTER (WHERE ordering_seq IS NOT NULL) AS followers,
       (SELECT last_value FROM outbox.commit_order) - :before AS numbers_drawn
  FROM outbox.messages;
-- The placement read each message's primary key entry about twice (does it still exist,
-- then its number), not the whole queue once per key (250,000).
SELECT pg_stat_force_next_flush();
SELECT idx_tup_read - :read_before < 3 * 5000 AS reads_proportional_to_the_rows
  FROM pg_stat_user_indexes WHERE indexrelid = 'outbox.messages_pkey'::regclass;
-- Within each key the numbers follow the ids (the order of the INSERT's rows).
SELECT count(*) AS out_of_order
  FROM (SELECT id, ordering_seq, lag(ordering_seq) OVER (PARTITION BY ordering_key ORDER BY id) AS previous
          FROM outbox.messages WHERE ordering_seq IS NOT NULL) s
 WHERE s.previous >= s.ordering_seq;
-- Rows that come with numbers (a restored dump) keep the order of their numbers, whatever
-- their ids: the lowest is the head, the others are numbered again in that order.
INSERT INTO outbox.messages (endpoint, payload, ordering_key, ordering_seq)
VALUES ('stale', '{"n": "c"}', 'restored', 30), ('stale', '{"n": "b"}', 'restored', 20),
       ('stale', '{"n": "a"}', 'restored', 10);
SELECT payload->>'n' AS n, ordering_seq IS NULL AS head, ordering_seq > :before AS numbered_again
  FROM outbox.messages WHERE ordering_key = 'restored' ORDER BY ordering_seq NULLS FIRST;
SELECT outbox.drop_endpoint('stale', force => true);
