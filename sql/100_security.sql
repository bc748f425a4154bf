--
-- Security (SECURITY.md): what the SQL surface promises, each promise checked so that
-- it fails if the promise breaks.
--
--   1. every SECURITY DEFINER function pins search_path = pg_catalog, pg_temp, and
--      none is executable by PUBLIC; the roles of docs/operations.md hold exactly their grants;
--   2. objects planted in public and in pg_temp by a role with CREATE on public are
--      never called by the functions, whatever the caller's search_path;
--   3. a producer reads nothing and administers nothing; an operator never reads a
--      secret;
--   4. a secret is never shown: not by any relation or function an operator can use,
--      not in any part (message, detail, hint, context) of any error;
--   5. CR, LF and NUL never get into a header (endpoint headers, message headers,
--      event_type, idempotency key);
--   6. only http:// and https:// URLs are accepted.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters
    RESTART IDENTITY;
DELETE FROM outbox.endpoints;

SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_sec_producer;
DROP ROLE IF EXISTS regress_sec_operator;
DROP ROLE IF EXISTS regress_sec_attacker;
RESET client_min_messages;
CREATE ROLE regress_sec_producer;
CREATE ROLE regress_sec_operator;
CREATE ROLE regress_sec_attacker;

-- The grants of docs/operations.md, exactly.
GRANT USAGE ON SCHEMA outbox TO regress_sec_producer;
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz),
    outbox.publish(text, jsonb, jsonb, text, text, timestamptz)
  TO regress_sec_producer;
GRANT USAGE ON SCHEMA outbox, dlq TO regress_sec_operator;
GRANT EXECUTE ON FUNCTION
    outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int, boolean, text, text, int),
    outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int, text, text, int),
    outbox.drop_endpoint(text, boolean), outbox.pause_endpoint(text), outbox.resume_endpoint(text),
    outbox.rotate_secret(text, text, interval), outbox.endpoint_public_key(text),
    outbox.purge(interval), outbox.metrics(), outbox.worker_status(), outbox.message(bigint),
    outbox.grant_send(text, name), outbox.revoke_send(text, name),
    outbox.subscribe(text, text[]), outbox.unsubscribe(text, text[]),
    outbox.replay(text, timestamptz, timestamptz, text),
    dlq.requeue(bigint, jsonb), dlq.requeue_all(text, text, timestamptz), dlq.discard(bigint, text)
  TO regress_sec_operator;
GRANT SELECT ON outbox.endpoints, outbox.endpoint_senders, outbox.messages, outbox.history, outbox.attempts,
                outbox.endpoint_stats, outbox.subscriptions, dlq.dead_letters, dlq.summary TO regress_sec_operator;

------------------------------------------------------------------------------------------
-- 1. The catalog.
------------------------------------------------------------------------------------------
-- SECURITY DEFINER functions in outbox and dlq: how many (so that the checks below
-- look at something), then every one WITHOUT search_path=pg_catalog, pg_temp (none).
SELECT count(*) >= 10 AS has_security_definer_functions
  FROM pg_proc p
 WHERE p.pronamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace) AND p.prosecdef;
SELECT p.oid::regprocedure AS security_definer_without_pinned_search_path, p.proconfig
  FROM pg_proc p
 WHERE p.pronamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace) AND p.prosecdef
   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
 ORDER BY p.oid::regprocedure::text;
-- ... and every one that PUBLIC may execute (none).
SELECT p.oid::regprocedure AS security_definer_executable_by_public
  FROM pg_proc p
 WHERE p.pronamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace) AND p.prosecdef
   AND has_function_privilege('public', p.oid, 'EXECUTE')
 ORDER BY p.oid::regprocedure::text;
-- SQL and PL/pgSQL functions that are not SECURITY DEFINER pin it too (they run inside
-- the definer functions): none without.
SELECT p.oid::regprocedure AS sql_function_without_pinned_search_path
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
   AND l.lanname IN ('sql', 'plpgsql')
   AND NOT coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false)
 ORDER BY p.oid::regprocedure::text;
-- What each role may do with each relation: exactly the grants of docs/operations.md, nothing on
-- the secrets.
SELECT r.rolname, c.oid::regclass AS relation,
       has_table_privilege(r.oid, c.oid, 'SELECT') AS sel,
       has_any_column_privilege(r.oid, c.oid, 'SELECT') AS sel_any_column,
       has_table_privilege(r.oid, c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER') AS write
  FROM pg_roles r
 CROSS JOIN pg_class c
 WHERE r.rolname IN ('regress_sec_producer', 'regress_sec_operator')
   AND c.relnamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
   AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
 ORDER BY r.rolname, c.oid::regclass::text;
-- The functions each role may execute.
SELECT r.rolname, string_agg(p.proname, ', ' ORDER BY p.proname) AS executable
  FROM pg_roles r
 CROSS JOIN pg_proc p
 WHERE r.rolname IN ('regress_sec_producer', 'regress_sec_operator')
   AND p.pronamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
   AND has_function_privilege(r.oid, p.oid, 'EXECUTE')
 GROUP BY r.rolname ORDER BY 1;

------------------------------------------------------------------------------------------
-- 2. Planted objects.  A role with CREATE on public plants functions and operators
-- that shadow the ones the install script's functions use (some as exact matches that
-- beat pg_catalog's own when public comes first, some as better type matches that beat
-- them wherever public is), and temporary relations and functions named like the
-- extension's.  Each planted object records its call in public.regress_sec_calls and
-- then behaves like the real one, so a hijack shows up as a row there, not as a
-- failed call.
------------------------------------------------------------------------------------------
GRANT CREATE ON SCHEMA public TO regress_sec_attacker;
SET ROLE regress_sec_attacker;
CREATE TABLE public.regress_sec_calls (fn text, caller text);
GRANT INSERT ON public.regress_sec_calls TO PUBLIC;
CREATE FUNCTION public.regress_sec_called(fn text) RETURNS boolean LANGUAGE plpgsql
AS $$ BEGIN INSERT INTO public.regress_sec_calls VALUES (fn, current_user); RETURN true; END $$;
-- Functions.
CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('now()') THEN pg_catalog.now() END;
CREATE FUNCTION public.format(f text, a integer) RETURNS text LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('format(text,integer)') THEN pg_catalog.format(f, a) END;
CREATE FUNCTION public.format(f text, a bigint) RETURNS text LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('format(text,bigint)') THEN pg_catalog.format(f, a) END;
CREATE FUNCTION public.format(f text, a text) RETURNS text LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('format(text,text)') THEN pg_catalog.format(f, a) END;
CREATE FUNCTION public.strpos(a text, b text) RETURNS integer LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('strpos(text,text)') THEN pg_catalog.strpos(a, b) END;
CREATE FUNCTION public.current_setting(a text, b boolean) RETURNS text LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('current_setting(text,boolean)') THEN pg_catalog.current_setting(a, b) END;
CREATE FUNCTION public.replace(a text, b text, c text) RETURNS text LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('replace(text,text,text)') THEN pg_catalog.replace(a, b, c) END;
CREATE FUNCTION public.round(a numeric, b integer) RETURNS numeric LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('round(numeric,integer)') THEN pg_catalog.round(a, b) END;
CREATE FUNCTION public.make_interval(secs integer) RETURNS interval LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('make_interval(integer)') THEN pg_catalog.make_interval(secs => secs) END;
CREATE FUNCTION public.unnest(a text[]) RETURNS SETOF text LANGUAGE sql
    BEGIN ATOMIC SELECT x FROM pg_catalog.unnest(a) x WHERE public.regress_sec_called('unnest(text[])'); END;
CREATE FUNCTION public.jsonb_build_object(a text, b bigint, c text, d text, e text, f jsonb)
    RETURNS jsonb LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('jsonb_build_object(...)')
                THEN pg_catalog.jsonb_build_object(a, b, c, d, e, f) END;
CREATE FUNCTION public.pg_notify(a text, b text) RETURNS void LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('pg_notify(text,text)') THEN pg_catalog.pg_notify(a, b) END;
-- Operators.
CREATE FUNCTION public.regress_sec_texteq(a text, b text) RETURNS boolean LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('=(text,text)') THEN pg_catalog.texteq(a, b) END;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.regress_sec_texteq);
CREATE FUNCTION public.regress_sec_textne(a text, b text) RETURNS boolean LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('<>(text,text)') THEN pg_catalog.textne(a, b) END;
CREATE OPERATOR public.<> (LEFTARG = text, RIGHTARG = text, FUNCTION = public.regress_sec_textne);
CREATE FUNCTION public.regress_sec_textcat(a text, b text) RETURNS text LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('||(text,text)') THEN pg_catalog.textcat(a, b) END;
CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = public.regress_sec_textcat);
CREATE FUNCTION public.regress_sec_int8eq(a bigint, b bigint) RETURNS boolean LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('=(bigint,bigint)') THEN pg_catalog.int8eq(a, b) END;
CREATE OPERATOR public.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.regress_sec_int8eq);
CREATE FUNCTION public.regress_sec_int8ge(a bigint, b bigint) RETURNS boolean LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('>=(bigint,bigint)') THEN pg_catalog.int8ge(a, b) END;
CREATE OPERATOR public.>= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = public.regress_sec_int8ge);
CREATE FUNCTION public.regress_sec_tsmi(a timestamptz, b interval) RETURNS timestamptz LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('-(timestamptz,interval)') THEN pg_catalog.timestamptz_mi_interval(a, b) END;
CREATE OPERATOR public.- (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = public.regress_sec_tsmi);
CREATE FUNCTION public.regress_sec_tsle(a timestamptz, b timestamptz) RETURNS boolean LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('<=(timestamptz,timestamptz)') THEN pg_catalog.timestamptz_le(a, b) END;
CREATE OPERATOR public.<= (LEFTARG = timestamptz, RIGHTARG = timestamptz, FUNCTION = public.regress_sec_tsle);
CREATE FUNCTION public.regress_sec_intervallt(a interval, b interval) RETURNS boolean LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('<(interval,interval)') THEN pg_catalog.interval_lt(a, b) END;
CREATE OPERATOR public.< (LEFTARG = interval, RIGHTARG = interval, FUNCTION = public.regress_sec_intervallt);
-- Temporary relations named like the extension's tables and views (any read through
-- one records a call; a write into one fails), and temporary functions.
CREATE TEMP VIEW messages AS
    SELECT NULL::bigint AS id, NULL::text AS endpoint, NULL::jsonb AS payload
     WHERE NOT public.regress_sec_called('pg_temp.messages');
CREATE TEMP VIEW endpoints AS
    SELECT NULL::text AS name, NULL::text AS url, NULL::bigint AS max_pending
     WHERE NOT public.regress_sec_called('pg_temp.endpoints');
CREATE TEMP VIEW endpoint_secrets AS
    SELECT NULL::text AS endpoint, NULL::text AS secret
     WHERE NOT public.regress_sec_called('pg_temp.endpoint_secrets');
CREATE TEMP VIEW dead_letters AS
    SELECT NULL::bigint AS id, NULL::text AS endpoint
     WHERE NOT public.regress_sec_called('pg_temp.dead_letters');
CREATE TEMP VIEW endpoint_stats AS
    SELECT NULL::text AS endpoint
     WHERE NOT public.regress_sec_called('pg_temp.endpoint_stats');
CREATE TEMP VIEW claims AS
    SELECT NULL::bigint AS id, NULL::bigint[] AS message_ids, NULL::int[] AS attempts
     WHERE NOT public.regress_sec_called('pg_temp.claims');
CREATE TEMP VIEW history AS
    SELECT NULL::bigint AS id, NULL::text AS endpoint, NULL::timestamptz AS sent_at
     WHERE NOT public.regress_sec_called('pg_temp.history');
CREATE TEMP VIEW history_counts AS
    SELECT NULL::regclass AS partition, NULL::text AS endpoint, NULL::bigint AS sent
     WHERE NOT public.regress_sec_called('pg_temp.history_counts');
GRANT SELECT ON messages, endpoints, endpoint_secrets, dead_letters, endpoint_stats, claims, history,
                history_counts TO PUBLIC;
CREATE FUNCTION pg_temp.now() RETURNS timestamptz LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('pg_temp.now()') THEN pg_catalog.now() END;
CREATE FUNCTION pg_temp.format(f text, a bigint) RETURNS text LANGUAGE sql
    RETURN CASE WHEN public.regress_sec_called('pg_temp.format(text,bigint)') THEN pg_catalog.format(f, a) END;
RESET ROLE;

-- The plants are live: a caller with public first (and pg_catalog last) that runs
-- plain SQL does call them: every planted object shows up here.
SET ROLE regress_sec_producer;
SET search_path = public, pg_temp, pg_catalog;
SELECT now() IS NOT NULL AS a, format('%s', 1) AS b, format('%s', 1::bigint) AS c,
       format('%s', 'x'::text) AS d, strpos('ab', 'b') AS e,
       current_setting('pg_outbox.no_such_setting', true) IS NULL AS f,
       replace('a', 'a', 'b') AS g, round(1.25, 1) AS h, make_interval(secs => 1) AS i,
       (SELECT count(*) FROM unnest('{x}'::text[])) AS j,
       jsonb_build_object('id', 1::bigint, 'event_type', 't', 'payload', '{}'::jsonb) AS k,
       'a'::text = 'a'::text AS l, 'a'::text <> 'b'::text AS m, 'a'::text || 'b'::text AS n,
       1::bigint = 1::bigint AS o, 2::bigint >= 1::bigint AS p,
       (now() - interval '1 day') <= now() AS q, interval '1 s' < interval '2 s' AS r,
       (SELECT 1 FROM pg_notify('regress_sec_nobody_listens', 'x')) AS s,
       (SELECT count(*) FROM messages) + (SELECT count(*) FROM endpoints)
         + (SELECT count(*) FROM endpoint_secrets) + (SELECT count(*) FROM dead_letters)
         + (SELECT count(*) FROM endpoint_stats) + (SELECT count(*) FROM claims)
         + (SELECT count(*) FROM history) + (SELECT count(*) FROM history_counts) AS t,
       pg_temp.now() IS NOT NULL AS u, pg_temp.format('%s', 1::bigint) AS v;
SET search_path = pg_catalog, pg_temp;
RESET ROLE;
SELECT fn, caller, count(*) > 0 AS called FROM public.regress_sec_calls GROUP BY 1, 2 ORDER BY 1, 2;
TRUNCATE public.regress_sec_calls;

-- The superuser's own statements below must not call the plants either.
SET search_path = pg_catalog, pg_temp;

-- Now every function a producer or an operator may call, with three hostile
-- search_paths, each through its success and its error paths.
SET ROLE regress_sec_operator;
SET search_path = public, pg_temp;
SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing',
                              headers => '{"X-Tenant": "acme"}',
                              secret => 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE=',
                              timeout_ms => 2000, max_attempts => 3, max_pending => 100);
SELECT outbox.create_endpoint('feed', channel => 'regress_sec_feed');
SELECT outbox.create_endpoint('limits', url => 'http://127.0.0.1:8080/hooks/limits', max_pending => 0);
\echo :SQLSTATE
SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing');
\echo :SQLSTATE
SET search_path = pg_temp, public;
SELECT outbox.alter_endpoint('billing', url => 'https://127.0.0.1:8443/hooks/billing',
                             headers => '{"X-Tenant": "acme", "X-Env": "test"}',
                             secret => 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDI=',
                             timeout_ms => 3000, max_attempts => 4, ordered => true, max_pending => 50);
SELECT outbox.alter_endpoint('billing', timeout_ms => 0);
\echo :SQLSTATE
SELECT outbox.pause_endpoint('billing');
SELECT outbox.resume_endpoint('billing');
SELECT outbox.grant_send('billing', 'regress_sec_producer');
SELECT outbox.grant_send('feed', 'regress_sec_producer');
SELECT outbox.grant_send('nope', 'regress_sec_producer');
\echo :SQLSTATE
SELECT outbox.revoke_send('feed', 'regress_sec_attacker');
RESET ROLE;

SET ROLE regress_sec_producer;
SET search_path = public, pg_temp, pg_catalog;
SELECT outbox.enqueue('billing', '{"n": 1}', event_type => 'order.created',
                      headers => '{"X-Trace": "t-1"}', ordering_key => 'k-1',
                      idempotency_key => 'idem-1', deliver_at => '2100-01-01 00:00:00+00') IS NOT NULL AS enqueued;
SELECT outbox.enqueue('billing', '{"n": 1}', idempotency_key => 'idem-1') IS NOT NULL AS same_key;
SET search_path = pg_temp, public;
SELECT outbox.enqueue('billing', '{"n": 2}') IS NOT NULL AS enqueued;
SELECT outbox.enqueue('feed', '{"n": 3}', event_type => 'feed.item') IS NOT NULL AS enqueued;
SELECT outbox.enqueue('nope', '{}');
\echo :SQLSTATE
SELECT outbox.enqueue('billing', NULL);
\echo :SQLSTATE
SELECT outbox.enqueue('billing', '{}', event_type => E'a\r\nb');
\echo :SQLSTATE
RESET ROLE;

-- A message in flight (the worker's claim lists billing's first) and one delivered
-- (in the history), written as the worker would, so that the operator's functions
-- below read the claims and the history too.
SET search_path = pg_catalog, pg_temp;
SELECT outbox.enqueue('billing', '{"n": 4}') AS delivered_id \gset
INSERT INTO outbox.claims (message_ids, attempts) VALUES ('{1}', '{1}');
WITH moved AS (DELETE FROM outbox.messages m WHERE m.id = :delivered_id RETURNING m.*)
INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                            attempts, last_http_status, created_at, sent_at)
SELECT id, endpoint, event_type, payload, headers, ordering_key, idempotency_key, 1, 200, created_at, now()
  FROM moved;
SET ROLE regress_sec_operator;
SET search_path = public, pg_temp, pg_catalog;
SELECT endpoint, pending, in_flight, sent, dead, paused FROM outbox.endpoint_stats ORDER BY endpoint;
SELECT position('pg_outbox_messages' IN outbox.metrics()) > 0 AS metrics_work;
SELECT s.id = :delivered_id AS is_delivered, s.endpoint, s.status, s.attempts
  FROM unnest(ARRAY[1, 3, 4, :delivered_id, 999999]::bigint[]) AS i(id) CROSS JOIN LATERAL outbox.message(i.id) s
 ORDER BY s.id;
SET search_path = pg_temp, public;
SELECT s.id = :delivered_id AS is_delivered, s.status
  FROM unnest(ARRAY[1, 3, 4, :delivered_id]::bigint[]) AS i(id) CROSS JOIN LATERAL outbox.message(i.id) s
 ORDER BY s.id;
SELECT count(*) AS no_such_message FROM outbox.message(-1);
SET search_path = public, pg_temp, pg_catalog;
SELECT count(*) AS worker_rows FROM outbox.worker_status();
SELECT outbox.purge();
SELECT outbox.purge(interval '-1 day');
\echo :SQLSTATE
SELECT outbox.drop_endpoint('billing');
\echo :SQLSTATE
SELECT outbox.drop_endpoint('billing', force => true);
SELECT outbox.drop_endpoint('feed', force => true);
SELECT id, message_id, endpoint, reason_code FROM dlq.dead_letters ORDER BY id;
SELECT endpoint, reason_code, event_type, count FROM dlq.summary ORDER BY 1, 2, 3;
SELECT s.id = :delivered_id AS is_delivered, s.endpoint, s.status, s.dead_letter_id
  FROM unnest(ARRAY[1, 3, 4, :delivered_id]::bigint[]) AS i(id) CROSS JOIN LATERAL outbox.message(i.id) s
 ORDER BY s.id;
SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing');
SET search_path = pg_temp, public;
SELECT dlq.requeue(1) IS NOT NULL AS requeued;
SELECT dlq.requeue(1);
\echo :SQLSTATE
SELECT dlq.requeue_all(endpoint => 'billing', reason_code => 'ENDPOINT_DROPPED', since => '2000-01-01 00:00:00+00');
SELECT dlq.requeue_all(reason_code => 'BOGUS');
\echo :SQLSTATE
SELECT dlq.discard(3, 'feed retired');
SELECT dlq.discard(3);
\echo :SQLSTATE
SET search_path = pg_catalog, pg_temp;
RESET ROLE;

-- Not one planted object was called.
SELECT count(*) AS planted_object_calls FROM public.regress_sec_calls;
SELECT fn, caller FROM public.regress_sec_calls ORDER BY 1, 2;

------------------------------------------------------------------------------------------
-- 3. What a producer and an operator cannot do.
------------------------------------------------------------------------------------------
SET ROLE regress_sec_producer;
SELECT payload FROM outbox.messages;
\echo :SQLSTATE
SELECT payload FROM outbox.history;
\echo :SQLSTATE
SELECT status FROM outbox.message(1);
\echo :SQLSTATE
SELECT payload FROM dlq.dead_letters;
\echo :SQLSTATE
SELECT secret FROM outbox.endpoint_secrets;
\echo :SQLSTATE
SELECT url FROM outbox.endpoints;
\echo :SQLSTATE
SELECT outbox.create_endpoint('evil', url => 'http://169.254.169.254/latest/meta-data/');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('billing', url => 'http://169.254.169.254/latest/meta-data/');
\echo :SQLSTATE
SELECT outbox.drop_endpoint('billing', force => true);
\echo :SQLSTATE
SELECT dlq.requeue(2);
\echo :SQLSTATE
SELECT dlq.requeue_all();
\echo :SQLSTATE
SELECT dlq.discard(2);
\echo :SQLSTATE
RESET ROLE;

SET ROLE regress_sec_operator;
SELECT secret FROM outbox.endpoint_secrets;
\echo :SQLSTATE
SELECT count(*) FROM outbox.endpoint_secrets;
\echo :SQLSTATE
COPY outbox.endpoint_secrets TO STDOUT;
\echo :SQLSTATE
UPDATE outbox.endpoint_secrets SET secret = secret;
\echo :SQLSTATE
INSERT INTO outbox.endpoint_secrets VALUES ('billing', 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE=');
\echo :SQLSTATE
RESET ROLE;

------------------------------------------------------------------------------------------
-- 4. Secrets are never shown.
------------------------------------------------------------------------------------------
SELECT outbox.alter_endpoint('billing', secret => 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE=');
SELECT outbox.create_endpoint('signed', url => 'http://127.0.0.1:8080/hooks/signed',
                              secret => 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDI=');
SELECT outbox.grant_send('signed', 'regress_sec_producer');
SELECT outbox.enqueue('signed', '{"n": 1}') IS NOT NULL AS enqueued;
-- The secrets are stored (the superuser may look).
SELECT endpoint, secret LIKE 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAw%' AS stored
  FROM outbox.endpoint_secrets ORDER BY 1;

-- Every relation in outbox and dlq that the operator may read, row by row as text, and
-- every function it may call that returns data: no secret, no base64 of one, no key.
CREATE FUNCTION pg_temp.shows_secret(t text) RETURNS boolean LANGUAGE sql
    SET search_path = pg_catalog, pg_temp
    RETURN t LIKE '%whsec_%' OR t LIKE '%cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFL%'
        OR t LIKE '%regress-sec-key-DO-NOT-LEAK%';
SET ROLE regress_sec_operator;
DO $$
DECLARE
    rel regclass;
    n   bigint;
    total bigint;
BEGIN
    FOR rel IN
        SELECT c.oid::regclass FROM pg_catalog.pg_class c
         WHERE c.relnamespace IN ('outbox'::regnamespace, 'dlq'::regnamespace)
           AND c.relkind IN ('r', 'p', 'v', 'm')
           AND pg_catalog.has_table_privilege(c.oid, 'SELECT')
         ORDER BY c.oid::regclass::text
    LOOP
        EXECUTE pg_catalog.format('SELECT count(*), count(*) FILTER (WHERE pg_temp.shows_secret(t::text)) FROM %s t', rel)
           INTO total, n;
        RAISE NOTICE 'operator reads %: % row(s), % showing a secret', rel, total, n;
    END LOOP;
END
$$;
SELECT pg_temp.shows_secret(outbox.metrics()) AS metrics_show_secret,
       pg_temp.shows_secret((SELECT string_agg(w::text, ',') FROM outbox.worker_status() w)) AS worker_status_shows_secret,
       pg_temp.shows_secret((SELECT string_agg(e::text, ',') FROM outbox.endpoints e)) AS endpoints_show_secret,
       pg_temp.shows_secret((SELECT string_agg(s::text, ',') FROM outbox.endpoint_stats s)) AS endpoint_stats_show_secret,
       pg_temp.shows_secret((SELECT string_agg(s::text, ',') FROM generate_series(1, 10) AS i(id)
                              CROSS JOIN LATERAL outbox.message(i.id) s)) AS message_shows_secret,
       pg_temp.shows_secret('{"s": "whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE="}') AS self_check;
RESET ROLE;

-- Malformed secrets, and good secrets in calls that fail for another reason: the
-- error's message, detail, hint and context never contain the secret (nor its
-- base64 part).  The secret is passed in a variable, so the context (which quotes
-- the failing SQL statement) can only contain it if the function itself puts it there.
CREATE FUNCTION pg_temp.secret_errors()
    RETURNS TABLE (call text, state text, message text, leaked boolean)
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    c record;
    v_message text; v_detail text; v_hint text; v_context text; v_all text;
BEGIN
    FOR c IN
        SELECT * FROM (VALUES
            ('create, no prefix',        'create',  'NOPREFIX-cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('create, not base64',       'create',  'whsec_MALFORMED!SECRET!MARKER!0001'),
            ('create, short key',        'create',  'whsec_U0hPUlQtU0VDUkVULU1BUktFUg=='),
            ('create, long key',         'create',  'whsec_' || replace(encode(convert_to(repeat('LONG-SECRET-MARKER-', 4), 'UTF8'), 'base64'), E'\n', '')),
            ('create, newline',          'create',  E'whsec_cmVncmVzcy1zZWMta2V5\nLURPLU5PVC1MRUFLLTAwMDE='),
            ('create, spaces',           'create',  'whsec_ cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('create, non-ASCII',        'create',  'whsec_SECRET-MARKER-é-ü-✓'),
            ('create, duplicate name',   'dup',     'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('create, bad url',          'badurl',  'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('create, bad headers',      'badhdr',  'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('create, channel + secret', 'channel', 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('alter, not base64',        'alter',   'whsec_MALFORMED!SECRET!MARKER!0002'),
            ('alter, short key',         'alter',   'whsec_U0hPUlQtU0VDUkVULU1BUktFUg=='),
            ('alter, unknown endpoint',  'alter404','whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('alter, channel endpoint',  'alterch', 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('alter, bad timeout',       'altert',  'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('rotate, not base64',       'rotate',  'whsec_MALFORMED!SECRET!MARKER!0003'),
            ('rotate, ed25519 base64',   'rotate',  'whsk_MALFORMED!SECRET!MARKER!0004'),
            ('rotate, ed25519 length',   'rotate',  'whsk_U0hPUlQtU0VDUkVULU1BUktFUg=='),
            ('rotate, unknown endpoint', 'rotate404', 'whsk_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('rotate, channel endpoint', 'rotatech', 'whsk_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('rotate, negative grace',   'rotateneg', 'whsk_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE='),
            ('rotate, current again',    'rotate',  'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDI='),
            -- The check itself: an error that does show the secret is caught.
            ('self-check: a leaky error', 'leak',   'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDE=')
        ) AS v(label, how, secret)
    LOOP
        BEGIN
            CASE c.how
            WHEN 'create' THEN
                PERFORM outbox.create_endpoint('leaky', url => 'http://127.0.0.1:8080/x', secret => c.secret);
            WHEN 'dup' THEN
                PERFORM outbox.create_endpoint('signed', url => 'http://127.0.0.1:8080/x', secret => c.secret);
            WHEN 'badurl' THEN
                PERFORM outbox.create_endpoint('leaky', url => 'file:///etc/passwd', secret => c.secret);
            WHEN 'badhdr' THEN
                PERFORM outbox.create_endpoint('leaky', url => 'http://127.0.0.1:8080/x', headers => '{"X-A": 1}',
                                               secret => c.secret);
            WHEN 'channel' THEN
                PERFORM outbox.create_endpoint('leaky', channel => 'leaky', secret => c.secret);
            WHEN 'alter' THEN
                PERFORM outbox.alter_endpoint('signed', secret => c.secret);
            WHEN 'alter404' THEN
                PERFORM outbox.alter_endpoint('no-such-endpoint', secret => c.secret);
            WHEN 'alterch' THEN
                PERFORM outbox.alter_endpoint('regress-sec-feed', secret => c.secret);
            WHEN 'altert' THEN
                PERFORM outbox.alter_endpoint('signed', secret => c.secret, timeout_ms => -1);
            WHEN 'rotate' THEN
                PERFORM outbox.rotate_secret('signed', c.secret);
            WHEN 'rotate404' THEN
                PERFORM outbox.rotate_secret('no-such-endpoint', c.secret);
            WHEN 'rotatech' THEN
                PERFORM outbox.rotate_secret('regress-sec-feed', c.secret);
            WHEN 'rotateneg' THEN
                PERFORM outbox.rotate_secret('signed', c.secret, grace => '-1 hour');
            WHEN 'leak' THEN
                RAISE EXCEPTION 'bad secret' USING DETAIL = 'It was ' || c.secret || '.';
            END CASE;
            call := c.label; state := '00000'; message := 'accepted'; leaked := false;
            RETURN NEXT;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_message = MESSAGE_TEXT, v_detail = PG_EXCEPTION_DETAIL,
                                    v_hint = PG_EXCEPTION_HINT, v_context = PG_EXCEPTION_CONTEXT;
            call := c.label;
            state := SQLSTATE;
            message := v_message;
            v_all := concat_ws(' | ', SQLERRM, v_message, v_detail, v_hint, v_context);
            leaked := strpos(v_all, c.secret) > 0 OR strpos(v_all, substr(c.secret, 7, 16)) > 0
                      OR strpos(v_all, substr(c.secret, 6, 16)) > 0
                      OR v_all LIKE '%MARKER%';
            RETURN NEXT;
        END;
    END LOOP;
END
$fn$;
SELECT outbox.create_endpoint('regress-sec-feed', channel => 'regress_sec_feed');
SET ROLE regress_sec_operator;
SELECT * FROM pg_temp.secret_errors();
RESET ROLE;
-- Nothing was created or changed by those calls.
SELECT name FROM outbox.endpoints ORDER BY 1;
SELECT endpoint, secret = 'whsec_cmVncmVzcy1zZWMta2V5LURPLU5PVC1MRUFLLTAwMDI=' AS unchanged
  FROM outbox.endpoint_secrets WHERE endpoint = 'signed';

------------------------------------------------------------------------------------------
-- 5. Header injection: CR, LF and NUL are refused wherever a header is made.
------------------------------------------------------------------------------------------
-- A call that is accepted is rolled back at once and shown as "accepted".
CREATE FUNCTION pg_temp.attempt(sql text, arg text DEFAULT NULL) RETURNS text
    LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    BEGIN
        EXECUTE sql USING arg;
        RAISE EXCEPTION USING ERRCODE = 'ZX001', MESSAGE = 'accepted';
    EXCEPTION WHEN OTHERS THEN
        IF SQLSTATE = 'ZX001' THEN
            RETURN 'accepted';
        END IF;
        RETURN SQLSTATE || ': ' || SQLERRM;
    END;
END
$fn$;

-- jsonb itself refuses \u0000, and text cannot hold a NUL at all: no NUL ever reaches
-- a header, an event type or a key.
SELECT '{"X-A": "a\u0000b"}'::jsonb;
\echo :SQLSTATE
SELECT '{"X-A\u0000": "b"}'::jsonb;
\echo :SQLSTATE
SELECT E'order\000created';
\echo :SQLSTATE
SELECT chr(0);
\echo :SQLSTATE

SET ROLE regress_sec_operator;
SELECT h AS endpoint_headers,
       pg_temp.attempt($$SELECT outbox.create_endpoint('inj', url => 'http://127.0.0.1:8080/x', headers => $1::jsonb)$$, h) AS create_endpoint,
       pg_temp.attempt($$SELECT outbox.alter_endpoint('signed', headers => $1::jsonb)$$, h) AS alter_endpoint
  FROM unnest(ARRAY[
        '{"X-A": "ok"}',
        '{"X-A": "1\r\nX-Injected: 1"}',
        '{"X-A": "1\r"}',
        '{"X-A": "1\n"}',
        '{"X-A": "1\r\n\r\nPOST /admin HTTP/1.1"}',
        '{"X-A\r\nX-Injected": "1"}',
        '{"X-A\r": "1"}',
        '{"X-A\n": "1"}',
        '{"X-A": "\r"}',
        '{"\n": "1"}',
        '{"X-A": "1\u000b2"}',
        '{"X-A": "1\u007f"}']) AS h;
RESET ROLE;

SET ROLE regress_sec_producer;
SELECT h AS message_headers,
       pg_temp.attempt($$SELECT outbox.enqueue('signed', '{}', headers => $1::jsonb)$$, h) AS enqueue
  FROM unnest(ARRAY[
        '{"X-A": "ok"}',
        '{"X-A": "1\r\nX-Injected: 1"}',
        '{"X-A": "1\r"}',
        '{"X-A": "1\n"}',
        '{"X-A": "1\r\n\r\nPOST /admin HTTP/1.1"}',
        '{"X-A\r\nX-Injected": "1"}',
        '{"X-A\r": "1"}',
        '{"X-A\n": "1"}']) AS h;
SELECT replace(replace(e, E'\r', '\r'), E'\n', '\n') AS event_type,
       pg_temp.attempt($$SELECT outbox.enqueue('signed', '{}', event_type => $1)$$, e) AS enqueue
  FROM unnest(ARRAY['order.created', E'order.created\r\nX-Injected: 1', E'order\r', E'order\n',
                    E'\r\n\r\nPOST /admin HTTP/1.1']) AS e;
SELECT replace(replace(k, E'\r', '\r'), E'\n', '\n') AS idempotency_key,
       pg_temp.attempt($$SELECT outbox.enqueue('signed', '{}', idempotency_key => $1)$$, k) AS enqueue
  FROM unnest(ARRAY['key-1', E'key-1\r\nX-Injected: 1', E'key\r', E'key\n']) AS k;
RESET ROLE;

------------------------------------------------------------------------------------------
-- 6. Only http:// and https:// URLs.
------------------------------------------------------------------------------------------
SET ROLE regress_sec_operator;
SELECT replace(replace(replace(u, E'\r', '\r'), E'\n', '\n'), E'\t', '\t') AS url,
       pg_temp.attempt($$SELECT outbox.create_endpoint('scheme', url => $1)$$, u) AS create_endpoint,
       pg_temp.attempt($$SELECT outbox.alter_endpoint('signed', url => $1)$$, u) AS alter_endpoint
  FROM unnest(ARRAY[
        'http://127.0.0.1:8080/hooks',
        'https://hooks.example.com/a?b=c',
        'HTTPS://HOOKS.EXAMPLE.COM/',
        'file:///etc/passwd',
        'file://localhost/etc/passwd',
        'gopher://127.0.0.1:6379/_FLUSHALL',
        'ftp://127.0.0.1/',
        'ftps://127.0.0.1/',
        'dict://127.0.0.1:11211/stat',
        'ldap://127.0.0.1/dc=example',
        'ldaps://127.0.0.1/',
        'tftp://127.0.0.1/x',
        'telnet://127.0.0.1:23/',
        'smb://127.0.0.1/share',
        'scp://127.0.0.1/etc/passwd',
        'sftp://127.0.0.1/etc/passwd',
        'imap://127.0.0.1/',
        'pop3://127.0.0.1/',
        'smtp://127.0.0.1/',
        'rtsp://127.0.0.1/',
        'mqtt://127.0.0.1/',
        'ws://127.0.0.1/',
        'wss://127.0.0.1/',
        'javascript:alert(1)',
        'data:text/plain,hello',
        'httpx://127.0.0.1/',
        'http+unix://%2Frun%2Fpostgresql/',
        'http:/127.0.0.1/',
        'http:127.0.0.1/',
        '//127.0.0.1/hooks',
        '127.0.0.1:8080/hooks',
        'http://',
        E'http://us\ner:pw@127.0.0.1/',
        E'http://user:p\r\nw@127.0.0.1/',
        E'http://127.0.0.1/\r\nX-Injected: 1',
        E'http://127.0.0.1/a\tb',
        'http://127.0.0.1\@evil.example.com/',
        'http://a@b@evil.example.com/',
        'http://127.0.0.1/#fragment']) AS u;
RESET ROLE;
-- Nothing was created or changed by those calls.
SELECT name, url FROM outbox.endpoints ORDER BY 1;

------------------------------------------------------------------------------------------
-- Clean up: the plants, the roles, the grant, the next file's tables.
------------------------------------------------------------------------------------------
RESET search_path;
DROP OWNED BY regress_sec_attacker;
DISCARD TEMP;
REVOKE CREATE ON SCHEMA public FROM regress_sec_attacker;
DROP OWNED BY regress_sec_producer, regress_sec_operator;
DROP ROLE regress_sec_producer, regress_sec_operator, regress_sec_attacker;
TRUNCATE outbox.messages, outbox.claims, outbox.history, outbox.history_counts, dlq.dead_letters;
SELECT outbox.drop_endpoint(name, force => true) FROM outbox.endpoints ORDER BY name;
SELECT count(*) AS functions_left_in_public
  FROM pg_proc WHERE pronamespace = 'public'::regnamespace;
