--
-- Rows that landed in a default partition while no time partition covered their range
-- (a pull consumer's ack while no worker served the database, an INSERT by hand): the
-- partition made for that range takes them in, with the history's counts, rather than
-- leave the range to the default partition.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, outbox.attempts RESTART IDENTITY;
DELETE FROM outbox.endpoints;
SELECT outbox.create_endpoint('parser', pull => true);

-- No time partition at all, then rows of this hour: they are in the default partitions.
SELECT count(*) FILTER (WHERE outbox._partition_drop_if_empty(p.partition)) = count(*) AS all_dropped
  FROM (SELECT partition FROM outbox._partitions('outbox.history')
        UNION ALL SELECT partition FROM outbox._partitions('outbox.attempts')) p;
INSERT INTO outbox.history (id, endpoint, payload, attempts, created_at, sent_at)
SELECT g, 'parser', jsonb_build_object('n', g), 1, now(), now() FROM generate_series(1, 5) g;
INSERT INTO outbox.attempts (attempted_at, endpoint, message_id, attempt, http_status)
SELECT now(), 'parser', g, 1, 200 FROM generate_series(1, 5) g;
SELECT (SELECT count(*) FROM outbox.history_default) AS history_default,
       (SELECT count(*) FROM outbox.attempts_default) AS attempts_default;
SELECT sent FROM outbox.endpoint_stats WHERE endpoint = 'parser';

-- The worker's preparation makes this hour's partitions all the same, with the rows in
-- them, and the hours after it.
BEGIN;
SELECT outbox._history_prepare(3600) >= now() + interval '3 hours' AS history_covered,
       outbox._partitions_prepare('outbox.attempts', 3600) >= now() + interval '3 hours' AS attempts_covered;
SELECT (SELECT count(*) FROM outbox.history_default) AS history_default,
       (SELECT count(*) FROM outbox.attempts_default) AS attempts_default;
SELECT count(*) AS history_rows, bool_and(p.from_at <= now() AND now() < p.to_at) AS in_this_hour
  FROM outbox.history h JOIN outbox._history_partitions() p ON p.partition = h.tableoid;
SELECT count(*) AS attempt_rows, bool_and(p.from_at <= now() AND now() < p.to_at) AS in_this_hour
  FROM outbox.attempts a JOIN outbox._partitions('outbox.attempts') p ON p.partition = a.tableoid;
COMMIT;
-- Counted where they are now, as the settle counts them; seen by message() and the stats.
SELECT c.endpoint, c.sent, p.from_at <= now() AND now() < p.to_at AS this_hour
  FROM outbox.history_counts c JOIN outbox._history_partitions() p ON p.partition = c.partition;
SELECT sent FROM outbox.endpoint_stats WHERE endpoint = 'parser';
SELECT status, attempts_logged FROM outbox.message(3);
-- Each keeps its index, as a partition made empty does.
SELECT count(*) FILTER (WHERE i.indexrelid IS NOT NULL) = count(*) AS indexed
  FROM (SELECT partition FROM outbox._partitions('outbox.history')
        UNION ALL SELECT partition FROM outbox._partitions('outbox.attempts')) p
  LEFT JOIN pg_index i ON i.indrelid = p.partition;

-- They leave with their partition, as any delivered rows: purge(0) counts them.
SELECT outbox.purge('0') AS purged;
SELECT count(*) AS left_in_history FROM outbox.history;
SELECT outbox.drop_endpoint('parser', force => true);

-- A hole among the partitions is made at the next preparation: a range whose CREATE gave
-- up (lock_timeout while the default partition was busy) while a later one was made is
-- not left to the default partition for good, and replay() still sees the history start
-- where the retention says. Here this hour's history partition is dropped (empty), the
-- later ones stay; the next call makes it again and no other.
SELECT outbox._history_prepare(3600) IS NOT NULL AS prepared;
SELECT outbox._partition_drop_if_empty(p.partition) AS dropped_this_hour
  FROM outbox._history_partitions() p WHERE p.from_at <= now() AND now() < p.to_at;
SELECT count(*) FILTER (WHERE from_at <= now()) AS covering_now, count(*) > 0 AS later_ones_stay
  FROM outbox._history_partitions() WHERE to_at > now();
-- The run of partitions from this hour on ends where the hole is: the worker calls again
-- soon, instead of waiting until the last partition nears.
SELECT outbox._partitions_covered('outbox.history', 3600) <= now() AS covered_until_the_hole;
SELECT array_agg(partition ORDER BY from_at) AS before_call FROM outbox._history_partitions() \gset
SELECT outbox._history_prepare(3600) >= now() + interval '3 hours' AS covered_again;
SELECT count(*) AS covering_now FROM outbox._history_partitions() WHERE from_at <= now() AND now() < to_at;
SELECT count(*) AS made FROM outbox._history_partitions() WHERE NOT partition = ANY (:'before_call'::regclass[]);
SELECT outbox._history_start() <= now() AS history_starts_before_now;
