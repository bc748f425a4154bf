-- pg_outbox 0.2.0 -> 0.3.0: the queue holds only undelivered messages.
--
-- Built by `make` as: this file, extension/src/35_engine_tables.sql (the new tables),
-- 0.2.0--0.3.0.post.sql (moving the data), then every function, view and privilege
-- file of extension/src (CREATE OR REPLACE), so that an updated database equals a
-- fresh install (test/t/095_upgrade.pl compares them).

\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- Reads the columns that go; created again below.
DROP VIEW outbox.endpoint_stats;
