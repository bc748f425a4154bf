--
-- The C++/PostgreSQL boundary: a C++ exception of any kind becomes an ordinary ERROR
-- (XX000, "pg_outbox internal error: ..."; std::bad_alloc becomes 53200 out_of_memory),
-- a PostgreSQL error raised under C++ frames keeps its own SQLSTATE, and the backend
-- goes on working after each (the test function also fails if an earlier call skipped
-- a destructor).
--
\set SHOW_CONTEXT never
SELECT outbox._boundary_selftest('ok');
SELECT outbox._boundary_selftest('std_exception');
\echo :SQLSTATE
SELECT 1 AS backend_alive;
SELECT outbox._boundary_selftest('bad_alloc');
\echo :SQLSTATE
SELECT 1 AS backend_alive;
SELECT outbox._boundary_selftest('unknown');
\echo :SQLSTATE
SELECT 1 AS backend_alive;
SELECT outbox._boundary_selftest('pg_error_in_cpp');
\echo :SQLSTATE
SELECT 1 AS backend_alive;
-- No destructor was skipped on the way.
SELECT outbox._boundary_selftest('ok');
-- Inside a transaction: the error aborts it like any other, ROLLBACK recovers.
BEGIN;
SELECT outbox._boundary_selftest('std_exception');
SELECT 1;
ROLLBACK;
-- Inside a subtransaction (a PL/pgSQL exception block): caught like any other error.
DO $$
DECLARE
    k text;
BEGIN
    FOREACH k IN ARRAY ARRAY['std_exception', 'bad_alloc', 'unknown', 'pg_error_in_cpp'] LOOP
        BEGIN
            PERFORM outbox._boundary_selftest(k);
        EXCEPTION WHEN OTHERS THEN
            RAISE NOTICE '% -> %: %', k, SQLSTATE, SQLERRM;
        END;
    END LOOP;
END
$$;
SELECT outbox._boundary_selftest('ok');
-- Bad input.
SELECT outbox._boundary_selftest('no_such_kind');
\echo :SQLSTATE
SELECT outbox._boundary_selftest(NULL) IS NULL AS null_in_null_out;
SELECT 1 AS backend_alive;
