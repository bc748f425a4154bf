
-- The grants kept aside by 00_keep_grants.sql, given again on the functions and views
-- that replaced dropped ones (grantee 0 is PUBLIC).
DO $grants$
DECLARE
    g record;
    target pg_catalog.text;
BEGIN
    FOR g IN SELECT DISTINCT x.kind, x.schema, x.name, x.grantee, x.privilege_type, x.is_grantable
               FROM pg_catalog.json_to_recordset(pg_catalog.current_setting('pg_outbox_upgrade.grants')::json)
                    AS x(kind text, oid pg_catalog.oid, schema text, name text, grantee pg_catalog.oid,
                         privilege_type text, is_grantable boolean)
              WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_proc p WHERE x.kind = 'function' AND p.oid = x.oid)
                AND NOT EXISTS (SELECT FROM pg_catalog.pg_class c WHERE x.kind = 'relation' AND c.oid = x.oid)
    LOOP
        FOR target IN SELECT 'FUNCTION ' || p.oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc p
                       WHERE g.kind = 'function' AND p.pronamespace = g.schema::pg_catalog.regnamespace
                         AND p.proname = g.name
                      UNION ALL
                      SELECT 'TABLE ' || c.oid::pg_catalog.regclass::text FROM pg_catalog.pg_class c
                       WHERE g.kind = 'relation' AND c.relnamespace = g.schema::pg_catalog.regnamespace
                         AND c.relname = g.name
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON %s TO %s%s', g.privilege_type, target,
                CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::pg_catalog.regrole::text END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$grants$;

-- A GRANT or REVOKE run by an extension script is also recorded as the extension's own
-- initial privilege (pg_init_privs), and pg_dump dumps only what differs from those:
-- the replayed privileges file and the grants above recorded every administrator's
-- grant as the extension's. The initial privileges are put back as a fresh install
-- records them, the owner's alone, so that pg_dump dumps the administrators' grants.
UPDATE pg_catalog.pg_init_privs i
   SET initprivs = ARRAY(SELECT item FROM pg_catalog.unnest(i.initprivs) item
                          WHERE (SELECT a.grantee FROM pg_catalog.aclexplode(ARRAY[item]) a LIMIT 1) = o.owner)
  FROM (SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass AS classoid, p.oid, p.proowner AS owner
          FROM pg_catalog.pg_proc p WHERE p.pronamespace::pg_catalog.regnamespace::text IN ('outbox', 'dlq')
        UNION ALL
        SELECT 'pg_catalog.pg_class'::pg_catalog.regclass, c.oid, c.relowner
          FROM pg_catalog.pg_class c WHERE c.relnamespace::pg_catalog.regnamespace::text IN ('outbox', 'dlq')
        UNION ALL
        SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, n.oid, n.nspowner
          FROM pg_catalog.pg_namespace n WHERE n.nspname IN ('outbox', 'dlq')) o
 WHERE i.classoid = o.classoid AND i.objoid = o.oid AND i.objsubid = 0;
