--
-- Send rights (docs/operations.md, Privileges): a producer may enqueue only to the endpoints it was
-- granted with outbox.grant_send; otherwise 42501 and nothing is inserted.  The right
-- follows PostgreSQL's role semantics (membership with INHERIT, SET ROLE), is checked
-- for the role that really calls enqueue (not the function's owner, not the session
-- user), and goes away with revoke_send or the endpoint.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;

SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_send_a;
DROP ROLE IF EXISTS regress_send_b;
DROP ROLE IF EXISTS regress_send_group;
DROP ROLE IF EXISTS regress_send_member;
DROP ROLE IF EXISTS regress_send_noinherit;
DROP ROLE IF EXISTS regress_send_operator;
RESET client_min_messages;
CREATE ROLE regress_send_a;
CREATE ROLE regress_send_b;
CREATE ROLE regress_send_group;
CREATE ROLE regress_send_member IN ROLE regress_send_group;
CREATE ROLE regress_send_noinherit NOINHERIT IN ROLE regress_send_group;
CREATE ROLE regress_send_operator;
GRANT USAGE ON SCHEMA outbox TO regress_send_a, regress_send_b, regress_send_group,
    regress_send_member, regress_send_noinherit;
GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz)
  TO regress_send_a, regress_send_b, regress_send_group, regress_send_member, regress_send_noinherit;
GRANT USAGE ON SCHEMA outbox TO regress_send_operator;
GRANT EXECUTE ON FUNCTION outbox.grant_send(text, name), outbox.revoke_send(text, name)
  TO regress_send_operator;
GRANT SELECT ON outbox.endpoint_senders TO regress_send_operator;

SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing');
SELECT outbox.create_endpoint('audit', url => 'http://127.0.0.1:8080/hooks/audit');
SELECT outbox.pause_endpoint('billing');
SELECT outbox.pause_endpoint('audit');

-- The operator grants: a to billing, the group to audit.
SET ROLE regress_send_operator;
SELECT outbox.grant_send('billing', 'regress_send_a');
SELECT outbox.grant_send('billing', 'regress_send_a');   -- twice: no error, one row
SELECT outbox.grant_send('audit', 'regress_send_group');
SELECT endpoint, role FROM outbox.endpoint_senders ORDER BY 1, 2;
RESET ROLE;

-- a: billing yes, audit no (42501, nothing inserted).
SET ROLE regress_send_a;
SELECT outbox.enqueue('billing', '{"from": "a"}') > 0 AS enqueued;
SELECT outbox.enqueue('audit', '{"from": "a"}');
\echo :SQLSTATE
RESET ROLE;
SELECT endpoint, payload FROM outbox.messages ORDER BY id;

-- b: nothing granted.  The error names the endpoint and tells how to grant it.
SET ROLE regress_send_b;
SELECT outbox.enqueue('billing', '{"from": "b"}');
\echo :SQLSTATE
RESET ROLE;

-- A member of the group (INHERIT) may send to audit; a NOINHERIT member only after
-- SET ROLE to the group.
SET ROLE regress_send_member;
SELECT outbox.enqueue('audit', '{"from": "member"}') > 0 AS enqueued;
RESET ROLE;
SET ROLE regress_send_noinherit;
SELECT outbox.enqueue('audit', '{"from": "noinherit"}');
\echo :SQLSTATE
SET ROLE regress_send_group;
SELECT outbox.enqueue('audit', '{"from": "noinherit as group"}') > 0 AS enqueued;
RESET ROLE;

-- The caller is the role that calls enqueue, also from inside a SECURITY DEFINER
-- function of another role: b's function runs as b, and b has no right to billing
-- even when a calls it; a's function does.
CREATE FUNCTION public.regress_send_via_b() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT outbox.enqueue('billing', '{"via": "b"}') $$;
ALTER FUNCTION public.regress_send_via_b() OWNER TO regress_send_b;
CREATE FUNCTION public.regress_send_via_a() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT outbox.enqueue('billing', '{"via": "a"}') $$;
ALTER FUNCTION public.regress_send_via_a() OWNER TO regress_send_a;
GRANT EXECUTE ON FUNCTION public.regress_send_via_b(), public.regress_send_via_a() TO regress_send_a, regress_send_b;
SET ROLE regress_send_a;
SELECT public.regress_send_via_b();
\echo :SQLSTATE
RESET ROLE;
SET ROLE regress_send_b;
SELECT public.regress_send_via_a() > 0 AS enqueued_as_a;
RESET ROLE;

-- PUBLIC: every role with EXECUTE on enqueue.
SELECT outbox.grant_send('audit', 'public');
SET ROLE regress_send_b;
SELECT outbox.enqueue('audit', '{"from": "b via public"}') > 0 AS enqueued;
RESET ROLE;
SELECT outbox.revoke_send('audit', 'public');

-- revoke_send takes it back; revoking what was not granted is no error.
SET ROLE regress_send_operator;
SELECT outbox.revoke_send('billing', 'regress_send_a');
SELECT outbox.revoke_send('billing', 'regress_send_a');
RESET ROLE;
SET ROLE regress_send_a;
SELECT outbox.enqueue('billing', '{"from": "a, revoked"}');
\echo :SQLSTATE
RESET ROLE;

-- Bad arguments: a clean error, nothing changed.
SELECT outbox.grant_send('nope', 'regress_send_a');
\echo :SQLSTATE
SELECT outbox.grant_send('billing', 'regress_no_such_role');
\echo :SQLSTATE
SELECT outbox.grant_send(NULL, 'regress_send_a');
\echo :SQLSTATE
SELECT outbox.revoke_send('billing', NULL);
\echo :SQLSTATE
-- Producers cannot grant themselves anything, nor read who may send.
SET ROLE regress_send_b;
SELECT outbox.grant_send('billing', 'regress_send_b');
\echo :SQLSTATE
SELECT count(*) FROM outbox.endpoint_senders;
\echo :SQLSTATE
RESET ROLE;

-- The superuser (here the extension's owner) needs no grant.
SELECT outbox.enqueue('billing', '{"from": "superuser"}') > 0 AS enqueued;

-- What arrived, in order: only the allowed ones.
SELECT endpoint, payload FROM outbox.messages ORDER BY id;

-- An endpoint's rights go with it.
SELECT outbox.grant_send('billing', 'regress_send_b');
SELECT outbox.drop_endpoint('billing', force => true);
SELECT count(*) AS rights_left_for_billing FROM outbox.endpoint_senders WHERE endpoint = 'billing';

-- Clean up for the next file.
DROP FUNCTION public.regress_send_via_b(), public.regress_send_via_a();
TRUNCATE outbox.messages, dlq.dead_letters;
SELECT outbox.drop_endpoint(name, force => true) FROM outbox.endpoints ORDER BY name;
DROP OWNED BY regress_send_a, regress_send_b, regress_send_group, regress_send_member,
    regress_send_noinherit, regress_send_operator;
DROP ROLE regress_send_a, regress_send_b, regress_send_member, regress_send_noinherit,
    regress_send_group, regress_send_operator;
