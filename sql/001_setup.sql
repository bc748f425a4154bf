--
-- pg_outbox regress suite: setup.
--
-- Conventions of every file: errors show their message, DETAIL and HINT, and then
-- "\echo :SQLSTATE" shows the SQLSTATE (00000 after a statement that succeeded).
-- CONTEXT lines are hidden (they carry PL/pgSQL line numbers).  Files that print ids
-- start from empty tables with their identities restarted.
--
\set SHOW_CONTEXT never
CREATE EXTENSION pg_outbox;
\echo :SQLSTATE
SELECT extname, extversion, extrelocatable FROM pg_extension WHERE extname = 'pg_outbox';

-- Schemas, tables and views, column by column: the worker's SQL is written against these.
SELECT table_schema, table_name, column_name, data_type, is_nullable, column_default, is_identity,
       identity_generation
  FROM information_schema.columns
 WHERE table_schema IN ('outbox', 'dlq')
 ORDER BY table_schema, table_name, ordinal_position;

-- Check constraints and foreign keys.  outbox.messages deliberately has no foreign key
-- to outbox.endpoints.
SELECT conrelid::regclass AS "table", contype, pg_get_constraintdef(oid) AS definition
  FROM pg_constraint
 WHERE connamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace) AND contype IN ('c', 'f')
 ORDER BY conrelid::regclass::text, 3;

-- Indexes.
SELECT indexrelid::regclass AS index, pg_get_indexdef(indexrelid) AS definition
  FROM pg_index
 WHERE indrelid IN ('outbox.endpoints'::regclass, 'outbox.endpoint_secrets'::regclass,
                    'outbox.messages'::regclass, 'dlq.dead_letters'::regclass,
                    'outbox.claims'::regclass, 'outbox.history'::regclass,
                    'outbox.history_default'::regclass, 'outbox.history_counts'::regclass,
                    'outbox.attempts'::regclass, 'outbox.attempts_default'::regclass)
 ORDER BY indexrelid::regclass::text;

-- The queue asks autovacuum to look at it far more often than at an ordinary table.
SELECT reloptions FROM pg_class WHERE oid = 'outbox.messages'::regclass;

-- The history of delivered messages: range-partitioned by sent_at, with a default
-- partition; the time partitions are the worker's to create, so a new install has none.
SELECT pg_get_partkeydef('outbox.history'::regclass) AS partition_key;
SELECT inhrelid::regclass AS partition, pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'outbox.history'::regclass;
SELECT count(*) AS time_partitions FROM outbox._history_partitions();
-- The attempt log: the same layout, by attempted_at.
SELECT pg_get_partkeydef('outbox.attempts'::regclass) AS partition_key;
SELECT inhrelid::regclass AS partition, pg_get_expr(c.relpartbound, c.oid) AS bound
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'outbox.attempts'::regclass;
SELECT count(*) AS time_partitions FROM outbox._partitions('outbox.attempts');

-- The triggers: the queue's (the commit-time wake-up, the commit order, max_pending's
-- counts) and the subscriptions' (publish's cached subscribers forgotten at commit).
SELECT tgrelid::regclass AS "table", tgname, pg_get_triggerdef(oid) AS definition
  FROM pg_trigger
 WHERE tgrelid IN (SELECT c.oid FROM pg_class c
                    WHERE c.relnamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace))
   AND NOT tgisinternal;

-- Functions: every one a producer or operator calls is SECURITY DEFINER with a fixed
-- search_path.
SELECT p.oid::regprocedure AS function, l.lanname AS language, p.prosecdef AS security_definer,
       p.proconfig AS settings
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
 ORDER BY p.oid::regprocedure::text;

-- The user-data tables are dumped by pg_dump.
SELECT c::regclass AS dumped_relation
  FROM pg_extension, unnest(extconfig) AS c
 WHERE extname = 'pg_outbox'
 ORDER BY c::regclass::text;

-- Nothing is granted to PUBLIC.
SELECT n.nspname, has_schema_privilege('public', n.oid, 'USAGE') AS usage,
       has_schema_privilege('public', n.oid, 'CREATE') AS "create"
  FROM pg_namespace n WHERE n.nspname IN ('outbox', 'dlq') ORDER BY 1;
SELECT count(*) AS relations_public_can_touch
  FROM pg_class c
 WHERE c.relnamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
   AND c.relkind IN ('r', 'p', 'v', 'S')
   AND has_table_privilege('public', c.oid, 'SELECT,INSERT,UPDATE,DELETE,TRUNCATE,REFERENCES,TRIGGER');
SELECT count(*) AS sequences_public_can_use
  FROM pg_class c
 WHERE c.relnamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
   AND CASE WHEN c.relkind = 'S' THEN has_sequence_privilege('public', c.oid, 'USAGE,SELECT,UPDATE') END;
SELECT count(*) AS functions_public_can_execute
  FROM pg_proc p
 WHERE p.pronamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
   AND has_function_privilege('public', p.oid, 'EXECUTE');

-- The secret lives apart: no column of a table or view that others can be granted
-- (outbox.endpoints, the views) is called anything like "secret".
SELECT table_schema, table_name, column_name
  FROM information_schema.columns
 WHERE table_schema IN ('outbox', 'dlq') AND column_name LIKE '%secret%'
 ORDER BY 1, 2, 3;

-- The GUCs as docs/operations.md (Configuration) documents them: default, unit, and
-- whether a reload (sighup) or a restart (postmaster) applies a change.
SELECT name, boot_val, unit, context, min_val, max_val
  FROM pg_settings WHERE name LIKE 'pg_outbox.%' ORDER BY name;

-- worker_status() columns, in order (the upgrade scripts must keep them).
SELECT parameter_name, data_type
  FROM information_schema.parameters
 WHERE specific_schema = 'outbox'
   AND specific_name = (SELECT specific_name FROM information_schema.routines
                         WHERE routine_schema = 'outbox' AND routine_name = 'worker_status')
 ORDER BY ordinal_position;
