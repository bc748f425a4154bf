-- `make installcheck` runs this first, against the server pg_regress is about to use
-- (PGHOST, PGPORT, PGUSER...): is it a server the regress suite can run against?  A
-- clear error now instead of a page of diffs later.
\set ON_ERROR_STOP 1
\set QUIET 1
\set SHOW_CONTEXT never
SET client_min_messages = warning;
DO $check$
BEGIN
    IF NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        RAISE EXCEPTION 'make installcheck: role "%" is not a superuser', current_user
            USING HINT = 'Set PGUSER to a superuser: the suite creates the extension and roles.';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_available_extensions WHERE name = 'pg_outbox') THEN
        RAISE EXCEPTION 'make installcheck: pg_outbox is not installed on this server'
            USING HINT = 'Run "make install" for this server''s PostgreSQL (PG_CONFIG), then restart it.';
    END IF;
    IF pg_catalog.current_setting('shared_preload_libraries')
           !~ '(^|[\s,"/])pg_outbox(\.so)?([\s,"]|$)' THEN
        RAISE EXCEPTION 'make installcheck: pg_outbox is not in shared_preload_libraries'
            USING HINT = 'Set shared_preload_libraries = ''pg_outbox'' in postgresql.conf and restart the server.';
    END IF;
    -- The suite checks what enqueue and the SQL functions write, with nothing delivered:
    -- no worker may serve its database (contrib_regression).
    IF coalesce(pg_catalog.current_setting('pg_outbox.database', true), '') IN ('', 'contrib_regression') THEN
        RAISE EXCEPTION 'make installcheck: pg_outbox would serve the suite''s database contrib_regression'
            USING HINT = 'Set pg_outbox.database = ''postgres'' (any database but contrib_regression) and restart '
                         'the server: by default (empty) every database with the extension is served.';
    END IF;
END
$check$;
