-- pg_outbox 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_outbox UPDATE).
--
-- Changes:
--   * outbox.worker_status() gains config_loaded_at: when the worker last read its
--     configuration.  A function's result columns cannot be changed in place, so it is
--     dropped and created again, and every role that could execute it still can.
--   * pg_outbox.dlq_retention deletes only handled (requeued or discarded) dead letters,
--     counted from when they were handled; an index serves that purge.
--
-- Every message, endpoint and dead letter stays where it is: no row is touched.  The 0.2.0 library also serves a database still on 0.1.0 (worker_status()
-- then shows its first nine columns), so the new library can be installed and the
-- server restarted before the update is run.

\echo Use "ALTER EXTENSION pg_outbox UPDATE TO '0.2.0'" to load this file. \quit

DO $upgrade$
DECLARE
    grants text[];
    g text;
BEGIN
    SELECT pg_catalog.array_agg(pg_catalog.format(
               'GRANT EXECUTE ON FUNCTION outbox.worker_status() TO %s%s',
               a.grantee::pg_catalog.regrole,
               CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END))
      INTO grants
      FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
     WHERE p.oid = 'outbox.worker_status()'::pg_catalog.regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0;

    DROP FUNCTION outbox.worker_status();
    -- config_loaded_at: when the configuration the worker runs with was read (its
    -- own re-read after a SIGHUP, or the server's last load before the worker
    -- started; the worker's pg_conf_load_time()).  A change made with ALTER SYSTEM +
    -- pg_reload_conf() has reached the worker once this is later than the moment
    -- ALTER SYSTEM returned.
    CREATE FUNCTION outbox.worker_status(
            OUT pid int, OUT database text, OUT state text,
            OUT started_at timestamptz, OUT last_loop_at timestamptz, OUT in_flight int,
            OUT sent bigint, OUT retried bigint, OUT dead_lettered bigint,
            OUT config_loaded_at timestamptz)
        RETURNS record
        AS 'MODULE_PATHNAME', 'pg_outbox_worker_status'
        LANGUAGE C VOLATILE;
    COMMENT ON FUNCTION outbox.worker_status() IS
        'the background worker: pid, database, state, start and last loop time, messages in flight, counters since start, when it last read its configuration';
    REVOKE ALL ON FUNCTION outbox.worker_status() FROM PUBLIC;

    FOREACH g IN ARRAY COALESCE(grants, '{}') LOOP
        EXECUTE g;
    END LOOP;
END
$upgrade$;

-- Retention (pg_outbox.dlq_retention) of handled dead letters, by when they were
-- handled.  Open ones are never deleted automatically, so they are not in it.
CREATE INDEX dead_letters_handled_idx ON dlq.dead_letters ((COALESCE(requeued_at, discarded_at)))
    WHERE requeued_at IS NOT NULL OR discarded_at IS NOT NULL;
