-- pg_outbox 0.2.0 -> 0.3.0: the queue holds only undelivered messages.
--
-- Built by `make` as: this file, extension/src/35_engine_tables.sql (the new tables),
-- 0.2.0--0.3.0.post.sql (moving the data), then every function, view and privilege
-- file of extension/src (CREATE OR REPLACE), so that an updated database equals a
-- fresh install (test/t/095_upgrade.pl compares them).

\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- Reads the columns that go; created again below.
DROP VIEW outbox.endpoint_stats;

-- create_endpoint and alter_endpoint gain the concurrency option: a new signature, so
-- the old functions are dropped and created again below. The EXECUTE grants an
-- administrator gave on them (the operator role of docs/operations.md) are kept aside here, in
-- a setting local to the update's transaction (a table would become a member of the
-- extension), and given again on the new ones at the end (0.2.0--0.3.0.final.sql).
SELECT pg_catalog.set_config('pg_outbox_upgrade.grants', coalesce((
    SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
               'function', CASE p.proname
                           WHEN 'create_endpoint'
                           THEN 'outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int)'
                           ELSE 'outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int)' END,
               'grantee', a.grantee, 'grantable', a.is_grantable))::text
      FROM pg_catalog.pg_proc p
           CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
     WHERE p.pronamespace = 'outbox'::regnamespace
       AND p.proname IN ('create_endpoint', 'alter_endpoint')
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '[]'), true);
DROP FUNCTION outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint);
DROP FUNCTION outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint);
DROP FUNCTION outbox._check_endpoint_options(jsonb, text, int, int, bigint);
