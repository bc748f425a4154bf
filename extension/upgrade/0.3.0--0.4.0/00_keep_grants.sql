-- pg_outbox 0.3.0 -> 0.4.0.
--
-- Built by `make` from the files of this folder in name order: those numbered below 50
-- (this one, then one per feature: its tables, and the functions and views it drops
-- because their signature or columns change), then every function, view and privilege
-- file of extension/src (CREATE OR REPLACE), then those from 50 on. An updated database
-- equals a fresh install (test/t/096_upgrade_from_0_3.pl compares them).

\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- A function or view the update drops and creates again (a new signature, new columns)
-- loses the privileges an administrator granted on it: the operator and producer roles
-- of docs/operations.md. They are kept aside here, in a setting local to the update's
-- transaction (a table would become a member of the extension), with the object's oid;
-- 50_give_back_grants.sql gives each again to the object of the same name that
-- replaced one no longer there.
SELECT pg_catalog.set_config('pg_outbox_upgrade.grants', coalesce((
    SELECT pg_catalog.json_agg(g)::text
      FROM (SELECT 'function' AS kind, p.oid, n.nspname AS schema, p.proname AS name,
                   a.grantee, a.privilege_type, a.is_grantable
              FROM pg_catalog.pg_proc p
                   JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                   CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
             WHERE n.nspname IN ('outbox', 'dlq') AND a.grantee <> p.proowner
            UNION ALL
            SELECT 'relation', c.oid, n.nspname, c.relname, a.grantee, a.privilege_type, a.is_grantable
              FROM pg_catalog.pg_class c
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                   CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
             WHERE n.nspname IN ('outbox', 'dlq') AND c.relkind IN ('v', 'r', 'p') AND a.grantee <> c.relowner) g),
    '[]'), true);
