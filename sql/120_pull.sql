--
-- Pull endpoints (docs/delivery.md, Pull endpoints): created with pull => true, read with
-- outbox.read, settled with outbox.ack / outbox.nack; bad input is refused with its
-- SQLSTATE and changes nothing.  The timing of wait (woken at commit) is covered by
-- test/t/160_pull_consumers.pl.
--
\set SHOW_CONTEXT never
TRUNCATE outbox.messages, outbox.history, outbox.history_counts, dlq.dead_letters RESTART IDENTITY;
DELETE FROM outbox.endpoints;

------------------------------------------------------------------------------------------
-- Creating: exactly one of url, channel, pull => true; pull is create-only.
------------------------------------------------------------------------------------------
SELECT outbox.create_endpoint('parser', pull => true);
SELECT outbox.create_endpoint('bad1', url => 'http://127.0.0.1:8080/x', pull => true);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad2', channel => 'c', pull => true);
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad3', pull => true, secret => 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
\echo :SQLSTATE
SELECT outbox.create_endpoint('bad4', pull => false);
\echo :SQLSTATE
SELECT outbox.alter_endpoint('parser', url => 'http://127.0.0.1:8080/x');
\echo :SQLSTATE
SELECT outbox.alter_endpoint('parser', pull => false);
\echo :SQLSTATE
SELECT name, url, channel, pull FROM outbox.endpoints ORDER BY name;
SELECT outbox.create_endpoint('pushed', url => 'http://127.0.0.1:8080/hooks/pushed');
SELECT outbox.pause_endpoint('pushed');

------------------------------------------------------------------------------------------
-- Bad arguments to read: refused, nothing taken.
------------------------------------------------------------------------------------------
SELECT outbox.enqueue('parser', '{"n": 1}', event_type => 'doc.uploaded');
SELECT * FROM outbox.read('nosuch');
\echo :SQLSTATE
SELECT * FROM outbox.read(NULL);
\echo :SQLSTATE
SELECT * FROM outbox.read('pushed');
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', max => NULL);
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', max => 0);
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', max => -1);
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', max => 1001);
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', visibility => '-1s');
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', visibility => '0');
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', visibility => NULL);
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', wait => '-1s');
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', wait => '2 days');
\echo :SQLSTATE
SELECT * FROM outbox.read('parser', wait => '6 min');
\echo :SQLSTATE
-- A read needs READ COMMITTED (a new snapshot per look, and for the check that no other
-- read took the same messages), with or without wait.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT * FROM outbox.read('parser', wait => '1s');
\echo :SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT count(*) FROM outbox.read('parser', max => 1000);
\echo :SQLSTATE
ROLLBACK;
SELECT outbox.create_endpoint('nulled', pull => NULL);
\echo :SQLSTATE
SELECT m.id, s.attempts, s.status FROM outbox.messages m CROSS JOIN outbox.message(m.id) s;

------------------------------------------------------------------------------------------
-- Each message to one reader; held ones are in flight.
------------------------------------------------------------------------------------------
SELECT outbox.enqueue('parser', '{"n": 2}', event_type => 'doc.uploaded');
SELECT outbox.enqueue('parser', '{"n": 3}', event_type => 'doc.uploaded', headers => '{"x-a": "b"}');
SELECT id, webhook_id ~ '^msg_[0-9a-f]{16}_[0-9]+$' AS webhook_id_ok, event_type, payload, headers,
       ordering_key, attempt, created_at <= now() AS created
  FROM outbox.read('parser', max => 2);
SELECT id, attempt, headers FROM outbox.read('parser', max => 10);
SELECT count(*) AS nothing_left FROM outbox.read('parser', max => 10);
SELECT endpoint, pending, in_flight, sent, dead FROM outbox.endpoint_stats WHERE endpoint = 'parser';

------------------------------------------------------------------------------------------
-- ack: the held ids among those given are delivered (history, like a 2xx); others are
-- not counted.  A push endpoint is refused.
------------------------------------------------------------------------------------------
SELECT outbox.ack('parser', ARRAY[1, 999]);
SELECT outbox.ack('parser', ARRAY[1]);          -- already delivered
SELECT outbox.ack('pushed', ARRAY[2]);
\echo :SQLSTATE
SELECT outbox.ack('parser', NULL);
\echo :SQLSTATE
SELECT id, endpoint, attempts, last_http_status FROM outbox.history;
SELECT status, attempts FROM outbox.message(1);
SELECT endpoint, pending, in_flight, sent, dead FROM outbox.endpoint_stats WHERE endpoint = 'parser';

------------------------------------------------------------------------------------------
-- nack: retried (after retry_after, or with the backoff), or dead at once when permanent.
------------------------------------------------------------------------------------------
SELECT outbox.nack('parser', 999, 'no such message');
\echo :SQLSTATE
SELECT outbox.nack('parser', 2, NULL);
\echo :SQLSTATE
SELECT outbox.nack('parser', 2, 'bad', retry_after => '-1s');
\echo :SQLSTATE
SELECT outbox.nack('pushed', 2, 'bad');
\echo :SQLSTATE
SELECT m.id, s.attempts, m.last_error, s.status = 'in_flight' AS held
  FROM outbox.messages m CROSS JOIN outbox.message(m.id) s ORDER BY m.id;
SELECT outbox.nack('parser', 2, 'parser crashed: unexpected token', retry_after => '0');
SELECT outbox.nack('parser', 2, 'twice');       -- no longer held
\echo :SQLSTATE
SELECT status, attempts, last_error FROM outbox.message(2);
SELECT id, attempt FROM outbox.read('parser', max => 10);  -- back at once, attempt 2
SELECT outbox.nack('parser', 2, 'still failing');          -- the backoff: not due yet
SELECT count(*) AS not_yet FROM outbox.read('parser', max => 10);
SELECT outbox.nack('parser', 3, 'unsupported format', permanent => true);
SELECT message_id, endpoint, reason_code, error_message, attempts FROM dlq.dead_letters ORDER BY id;

------------------------------------------------------------------------------------------
-- max_attempts: a nack on the last attempt, and a visibility that passes on the last
-- attempt, end in the DLQ as RETRY_EXHAUSTED with the error.
------------------------------------------------------------------------------------------
SELECT outbox.create_endpoint('tries', pull => true, max_attempts => 2);
SELECT outbox.enqueue('tries', '{"n": 4}');
SELECT id, attempt FROM outbox.read('tries');
SELECT outbox.nack('tries', 4, 'first failure', retry_after => '0');
SELECT id, attempt FROM outbox.read('tries');
SELECT outbox.nack('tries', 4, 'second failure', retry_after => '0');
SELECT outbox.enqueue('tries', '{"n": 5}');
SELECT id, attempt FROM outbox.read('tries', visibility => '10ms');
SELECT pg_sleep(0.05);
SELECT id, attempt FROM outbox.read('tries', visibility => '10ms');  -- back: attempt 2
SELECT last_error FROM outbox.messages WHERE id = 5;
SELECT pg_sleep(0.05);
SELECT count(*) AS none FROM outbox.read('tries');                  -- exhausted: dead
SELECT message_id, reason_code, error_message, attempts FROM dlq.dead_letters WHERE endpoint = 'tries' ORDER BY id;
-- Every answer is in the attempt log: the two nacks with their errors, each lapsed
-- visibility (logged when the message was taken again, or dead-lettered).
SELECT message_id, attempt, error, http_status, duration_ms FROM outbox.attempts
 WHERE endpoint = 'tries' ORDER BY message_id, attempt;
SELECT count(*) AS queued FROM outbox.messages WHERE endpoint = 'tries';

------------------------------------------------------------------------------------------
-- Paused: read returns nothing.  Requeued dead letters are read again.
------------------------------------------------------------------------------------------
SELECT outbox.pause_endpoint('parser');
SELECT dlq.requeue(id) FROM dlq.dead_letters WHERE reason_code = 'REJECTED_BY_CONSUMER';
SELECT count(*) AS while_paused FROM outbox.read('parser', max => 10);
SELECT outbox.resume_endpoint('parser');
SELECT id, payload, attempt FROM outbox.read('parser', max => 10);

------------------------------------------------------------------------------------------
-- Ordered: only each key's head, the next once the head is acknowledged or dead.
------------------------------------------------------------------------------------------
SELECT outbox.create_endpoint('ordered', pull => true, ordered => true);
SELECT outbox.enqueue('ordered', '{"k": "a", "n": 1}', ordering_key => 'a');
SELECT outbox.enqueue('ordered', '{"k": "a", "n": 2}', ordering_key => 'a');
SELECT outbox.enqueue('ordered', '{"k": "b", "n": 1}', ordering_key => 'b');
SELECT outbox.enqueue('ordered', '{"k": "a", "n": 3}', ordering_key => 'a');
SELECT payload FROM outbox.read('ordered', max => 10) ORDER BY payload->>'k';
SELECT outbox.ack('ordered', ARRAY(SELECT m.id FROM outbox.messages m CROSS JOIN outbox.message(m.id) s
                                    WHERE m.endpoint = 'ordered' AND s.status = 'in_flight' AND m.ordering_key = 'a'));
SELECT payload FROM outbox.read('ordered', max => 10);
SELECT outbox.nack('ordered', (SELECT m.id FROM outbox.messages m CROSS JOIN outbox.message(m.id) s
                                WHERE m.endpoint = 'ordered' AND s.status = 'in_flight' AND m.ordering_key = 'a'),
                   'cannot', permanent => true);
SELECT payload FROM outbox.read('ordered', max => 10);

------------------------------------------------------------------------------------------
-- wait with nothing committed: returns empty when the time is up.
------------------------------------------------------------------------------------------
SELECT count(*) AS nothing FROM outbox.read('parser', wait => '100ms');

------------------------------------------------------------------------------------------
-- Consume rights: a role needs EXECUTE and grant_consume for the endpoint.
------------------------------------------------------------------------------------------
SET client_min_messages = warning;
DROP ROLE IF EXISTS regress_consumer;
DROP ROLE IF EXISTS regress_stranger;
RESET client_min_messages;
CREATE ROLE regress_consumer;
CREATE ROLE regress_stranger;
GRANT USAGE ON SCHEMA outbox TO regress_consumer, regress_stranger;
GRANT EXECUTE ON FUNCTION outbox.read(text, int, interval, interval), outbox.ack(text, bigint[]),
    outbox.nack(text, bigint, text, interval, boolean) TO regress_consumer, regress_stranger;
SELECT outbox.grant_consume('parser', 'regress_consumer');
SELECT outbox.grant_consume('parser', 'regress_consumer');  -- twice: not an error
SELECT outbox.grant_consume('pushed', 'regress_consumer');
\echo :SQLSTATE
SELECT outbox.grant_consume('nosuch', 'regress_consumer');
\echo :SQLSTATE
SELECT outbox.grant_consume('parser', 'nosuchrole');
\echo :SQLSTATE
SELECT endpoint, role FROM outbox.endpoint_consumers;
SELECT outbox.enqueue('parser', '{"n": 6}');
SET ROLE regress_stranger;
SELECT * FROM outbox.read('parser');
\echo :SQLSTATE
SELECT outbox.ack('parser', ARRAY[11]);
\echo :SQLSTATE
SELECT outbox.nack('parser', 11, 'x');
\echo :SQLSTATE
SELECT * FROM outbox.read('ordered');
\echo :SQLSTATE
RESET ROLE;
SET ROLE regress_consumer;
SELECT id, payload, attempt FROM outbox.read('parser');
SELECT outbox.ack('parser', ARRAY[11]);
SELECT * FROM outbox.read('ordered');
\echo :SQLSTATE
SELECT count(*) FROM outbox.messages;
\echo :SQLSTATE
RESET ROLE;
-- The right is the role's that really calls: the owner of a SECURITY DEFINER function
-- that calls read, whoever runs it (a superuser here), not the session user.
CREATE FUNCTION public.stranger_reads() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    RETURN (SELECT count(*) FROM outbox.read('parser'));
ALTER FUNCTION public.stranger_reads() OWNER TO regress_stranger;
CREATE FUNCTION public.consumer_reads() RETURNS bigint LANGUAGE sql SECURITY DEFINER
    RETURN (SELECT count(*) FROM outbox.read('parser'));
ALTER FUNCTION public.consumer_reads() OWNER TO regress_consumer;
GRANT EXECUTE ON FUNCTION public.consumer_reads() TO regress_stranger;
SELECT public.stranger_reads();
\echo :SQLSTATE
SET ROLE regress_stranger;
SELECT public.consumer_reads();
RESET ROLE;
DROP FUNCTION public.stranger_reads(), public.consumer_reads();
SELECT outbox.revoke_consume('parser', 'regress_consumer');
SET ROLE regress_consumer;
SELECT * FROM outbox.read('parser');
\echo :SQLSTATE
RESET ROLE;
SELECT id, status FROM outbox.message(11);
SELECT id, status FROM outbox.message(6);  -- held by a reader: in flight

-- Dropping the endpoint takes its rights.
SELECT outbox.grant_consume('ordered', 'public');
SELECT outbox.drop_endpoint('ordered', force => true);
SELECT count(*) AS rights_left FROM outbox.endpoint_consumers WHERE endpoint = 'ordered';

DROP OWNED BY regress_consumer, regress_stranger;
DROP ROLE regress_consumer;
DROP ROLE regress_stranger;
