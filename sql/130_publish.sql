--
-- Publish and subscribe (docs/delivery.md, Publish and subscribe): subscriptions by exact
-- event type or prefix.*, one message per subscribed endpoint with one webhook-id, the
-- send right on every subscriber, max_pending all or nothing, bad input refused with
-- nothing changed.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;

SELECT outbox.create_endpoint('billing', url => 'http://127.0.0.1:8080/hooks/billing');
SELECT outbox.create_endpoint('audit', url => 'http://127.0.0.1:8080/hooks/audit', ordered => true);
SELECT outbox.create_endpoint('crm', channel => 'crm_events', max_pending => 2);
SELECT outbox.create_endpoint('parser', pull => true);
SELECT outbox.create_endpoint('idle', url => 'http://127.0.0.1:8080/hooks/idle');

-- Subscriptions: exact names and prefixes; twice is not an error.
SELECT outbox.subscribe('billing', ARRAY['order.created', 'order.paid']);
SELECT outbox.subscribe('audit', ARRAY['order.*']);
SELECT outbox.subscribe('audit', ARRAY['order.*']);
SELECT outbox.subscribe('crm', ARRAY['order.created']);
SELECT outbox.subscribe('parser', ARRAY['order.created', 'invoice.*']);
SELECT endpoint, event_type, prefix FROM outbox.subscriptions ORDER BY 1, 2;

-- One publish: one message per subscriber, the same webhook-id for all (the first
-- delivery's own, carried by the others as their idempotency key).
BEGIN;
SELECT outbox.publish('order.created', '{"order": 1}', ordering_key => 'o-1');
SELECT endpoint, event_type, payload, ordering_key FROM outbox.messages ORDER BY endpoint;
SELECT count(DISTINCT outbox._webhook_id(id, idempotency_key)) AS webhook_ids,
       count(*) FILTER (WHERE idempotency_key IS NULL) AS without_key,
       bool_and(outbox._webhook_id(id, idempotency_key) LIKE 'msg\_%\_' || min_id) AS named_after_first
  FROM outbox.messages, (SELECT min(id) AS min_id FROM outbox.messages) f;
COMMIT;

-- A prefix matches deeper types too, not the bare prefix; another type reaches only its
-- own subscribers; an event nobody subscribed to is not an error (0 deliveries).
SELECT outbox.publish('order.paid', '{"order": 1}');
SELECT outbox.publish('order.line.added', '{"order": 1}');
SELECT outbox.publish('order', '{"order": 1}');
SELECT outbox.publish('invoice.sent', '{"invoice": 7}');
SELECT outbox.publish('shipment.sent', '{"shipment": 3}');
SELECT event_type, string_agg(endpoint, ', ' ORDER BY endpoint) AS endpoints
  FROM outbox.messages GROUP BY event_type ORDER BY 1;

-- Nothing rolled back stays.
BEGIN;
SELECT outbox.publish('order.paid', '{"rolled": "back"}');
ROLLBACK;
SELECT count(*) AS rolled_back FROM outbox.messages WHERE payload ? 'rolled';

-- With an idempotency key: it is every delivery's webhook-id; publishing again while
-- they are queued adds nothing (and counts them).
SELECT outbox.publish('invoice.sent', '{"invoice": 8}', idempotency_key => 'inv-8');
SELECT outbox.publish('invoice.sent', '{"invoice": 8}', idempotency_key => 'inv-8');
SELECT endpoint, idempotency_key FROM outbox.messages WHERE payload = '{"invoice": 8}' ORDER BY 1;

-- max_pending: crm holds 1 message of 2; the next order.created fills it, the one after
-- refuses the whole publish (53400, as enqueue): no subscriber gets it.
SELECT outbox.publish('order.created', '{"order": 2}');
SELECT count(*) AS before FROM outbox.messages;
SELECT outbox.publish('order.created', '{"order": 3}');
\echo :SQLSTATE
SELECT count(*) AS after FROM outbox.messages;

-- Unsubscribe: some patterns, then all of an endpoint's.
SELECT outbox.unsubscribe('parser', ARRAY['invoice.*', 'never.subscribed']);
SELECT outbox.publish('invoice.sent', '{"invoice": 9}');
SELECT outbox.unsubscribe('billing');
SELECT endpoint, event_type FROM outbox.subscriptions ORDER BY 1, 2;
-- Dropping an endpoint ends its subscriptions.
SELECT outbox.drop_endpoint('parser', force => true);
SELECT endpoint, event_type FROM outbox.subscriptions ORDER BY 1, 2;

-- Bad input: refused with a fitting SQLSTATE, nothing changed.
SELECT count(*) AS subscriptions FROM outbox.subscriptions;
SELECT outbox.subscribe('nowhere', ARRAY['order.created']);
\echo :SQLSTATE
SELECT outbox.unsubscribe('nowhere');
\echo :SQLSTATE
SELECT outbox.subscribe(NULL, ARRAY['order.created']);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', NULL);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY[]::text[]);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY['a.b', NULL]);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY['']);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY['a.*.b']);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY['*']);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY['.*']);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY['order *']);
\echo :SQLSTATE
SELECT outbox.subscribe('idle', ARRAY['ok.type', 'a*']);   -- one bad pattern: none added
\echo :SQLSTATE
SELECT outbox.unsubscribe('audit', ARRAY['']);
\echo :SQLSTATE
SELECT count(*) AS subscriptions FROM outbox.subscriptions;
SELECT count(*) AS messages FROM outbox.messages;
SELECT outbox.publish(NULL, '{}');
\echo :SQLSTATE
SELECT outbox.publish('order.created', NULL);
\echo :SQLSTATE
SELECT outbox.publish('', '{}');
\echo :SQLSTATE
SELECT outbox.publish('order.created', '{}', headers => '{"x": 1}');
\echo :SQLSTATE
SELECT outbox.publish('order.created', '{}', idempotency_key => 'has space');
\echo :SQLSTATE
SELECT outbox.publish('order.created', '{}', deliver_at => 'infinity');
\echo :SQLSTATE
SELECT count(*) AS messages FROM outbox.messages;

-- Send rights: publishing needs the send right on every endpoint it would deliver to.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_publisher;
RESET client_min_messages;
CREATE ROLE regress_publisher;
GRANT USAGE ON SCHEMA outbox TO regress_publisher;
GRANT EXECUTE ON FUNCTION outbox.publish(text, jsonb, jsonb, text, text, timestamptz) TO regress_publisher;
SELECT outbox.subscribe('idle', ARRAY['user.*']);
SELECT outbox.subscribe('audit', ARRAY['user.created']);
SELECT outbox.grant_send('idle', 'regress_publisher');
SET ROLE regress_publisher;
SELECT outbox.publish('user.deleted', '{"user": 1}');                -- idle only: granted
SELECT outbox.publish('user.created', '{"user": 2}');                -- idle and audit: refused
\echo :SQLSTATE
SELECT outbox.publish('nobody.listens', '{"user": 3}');              -- no subscriber: nothing to refuse
RESET ROLE;
SELECT endpoint, payload FROM outbox.messages WHERE event_type LIKE 'user.%' ORDER BY id;
SELECT outbox.grant_send('audit', 'regress_publisher');
SET ROLE regress_publisher;
SELECT outbox.publish('user.created', '{"user": 2}');
-- A producer cannot read the subscriptions.
SELECT count(*) FROM outbox.subscriptions;
\echo :SQLSTATE
RESET ROLE;
-- The right is judged for the role that really calls: a SECURITY DEFINER function of a
-- role without it, run by a superuser, is refused.
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_publisher_b;
RESET client_min_messages;
CREATE ROLE regress_publisher_b;
GRANT USAGE ON SCHEMA outbox TO regress_publisher_b;
GRANT EXECUTE ON FUNCTION outbox.publish(text, jsonb, jsonb, text, text, timestamptz) TO regress_publisher_b;
CREATE FUNCTION public.publish_as_b() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    AS $$ SELECT outbox.publish('user.deleted', '{"user": "via b"}') $$;
ALTER FUNCTION public.publish_as_b() OWNER TO regress_publisher_b;
SELECT public.publish_as_b();
\echo :SQLSTATE
DROP FUNCTION public.publish_as_b();
DROP OWNED BY regress_publisher_b;
DROP ROLE regress_publisher_b;
SELECT endpoint, payload FROM outbox.messages WHERE event_type LIKE 'user.%' ORDER BY id;

-- Cleanup.
SELECT outbox.unsubscribe(name) FROM outbox.endpoints ORDER BY name;
DELETE FROM outbox.messages;
DELETE FROM outbox.endpoints;
DROP OWNED BY regress_publisher;
DROP ROLE regress_publisher;
