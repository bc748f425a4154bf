
-- The EXECUTE grants kept aside by 0.2.0--0.3.0.pre.sql, on the new create_endpoint and
-- alter_endpoint (grantee 0 is PUBLIC).
DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT * FROM pg_catalog.json_to_recordset(pg_catalog.current_setting('pg_outbox_upgrade.grants')::json)
                        AS x(function text, grantee oid, grantable boolean) LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s%s', g.function,
                       CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(g.grantee::regrole::text) END,
                       CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$grants$;
