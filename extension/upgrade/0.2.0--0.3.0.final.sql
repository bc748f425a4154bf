
-- The EXECUTE grants kept aside by 0.2.0--0.3.0.pre.sql, given again on the new
-- create_endpoint and alter_endpoint (grantee 0 is PUBLIC). A GRANT run by an extension
-- script is also recorded as the extension's own initial privilege (pg_init_privs),
-- which pg_dump leaves out: the functions' initial privileges are put back as the
-- script's privileges file left them, so that pg_dump dumps these grants like any other
-- grant of an administrator.
DO $grants$
DECLARE
    f pg_catalog.regprocedure;
    initial pg_catalog.aclitem[];
    g record;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int)',
        'outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int)']::pg_catalog.regprocedure[]
    LOOP
        SELECT i.initprivs INTO initial
          FROM pg_catalog.pg_init_privs i
         WHERE i.objoid = f AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
        FOR g IN SELECT *
                   FROM pg_catalog.json_to_recordset(pg_catalog.current_setting('pg_outbox_upgrade.grants')::json)
                        AS x(function text, grantee oid, grantable boolean)
                  WHERE x.function::pg_catalog.regprocedure = f
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f,
                CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::pg_catalog.regrole::text END,
                CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
        IF initial IS NULL THEN
            DELETE FROM pg_catalog.pg_init_privs i
             WHERE i.objoid = f AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
        ELSE
            UPDATE pg_catalog.pg_init_privs i SET initprivs = initial
             WHERE i.objoid = f AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
        END IF;
    END LOOP;
END
$grants$;

-- Per-key commit order (src/pg/ordering/ordering.cpp): the triggers, now that their functions
-- exist, and the queued messages of ordered endpoints put in the order 0.2.0 kept (ids).
CREATE TRIGGER messages_note_inserts
    AFTER INSERT ON outbox.messages REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._note_inserts();
CREATE TRIGGER messages_queue_changed
    AFTER DELETE OR UPDATE OF endpoint OR TRUNCATE ON outbox.messages
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._queue_changed();
CREATE CONSTRAINT TRIGGER messages_order_at_commit
    AFTER INSERT ON outbox.messages DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL) EXECUTE FUNCTION outbox._order_at_commit();
CREATE TRIGGER messages_moved
    BEFORE UPDATE OF endpoint, ordering_key ON outbox.messages
    FOR EACH ROW WHEN (OLD.endpoint IS DISTINCT FROM NEW.endpoint OR OLD.ordering_key IS DISTINCT FROM NEW.ordering_key)
    EXECUTE FUNCTION outbox._moved_message();
CREATE TRIGGER messages_next_in_order
    AFTER DELETE OR UPDATE OF endpoint, ordering_key ON outbox.messages
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL AND outbox._trigger_promotes())
    EXECUTE FUNCTION outbox._next_in_order();
SELECT outbox._order_queued(e.name, true) FROM outbox.endpoints e WHERE e.ordered;
SELECT pg_catalog.pg_extension_config_dump('outbox.commit_order', '');
