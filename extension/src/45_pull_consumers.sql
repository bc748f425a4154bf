------------------------------------------------------------------------------------------
-- Pull endpoints: readers take the messages (docs/delivery.md, Pull endpoints)
------------------------------------------------------------------------------------------

-- What needs C++ (src/pg/consumer/): the settle of acknowledged and refused messages by
-- the worker's own settle, and the wait for an enqueuing commit.
CREATE OR REPLACE FUNCTION outbox._pull_ack(endpoint text, ids bigint[]) RETURNS bigint
    AS 'MODULE_PATHNAME', 'pg_outbox_pull_ack'
    LANGUAGE C VOLATILE STRICT;
CREATE OR REPLACE FUNCTION outbox._pull_nack(endpoint text, id bigint, error text, retry_after_ms bigint,
                                             permanent boolean, max_attempts int) RETURNS boolean
    AS 'MODULE_PATHNAME', 'pg_outbox_pull_nack'
    LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION outbox._pull_lapsed(endpoint text, max_attempts int) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_pull_lapsed'
    LANGUAGE C VOLATILE STRICT;
CREATE OR REPLACE FUNCTION outbox._pull_commits() RETURNS bigint
    AS 'MODULE_PATHNAME', 'pg_outbox_pull_commits'
    LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION outbox._pull_wait(seen bigint, until timestamptz) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_pull_wait'
    LANGUAGE C VOLATILE STRICT;

-- _read, _ack and _nack price out sequential and bitmap scans, as the worker does
-- (src/pg/worker/worker.cpp): the queue and outbox.holds change all the time, and their
-- plans stay on the indexes whatever the statistics said when they were made (jit off:
-- priced-out costs would make every statement look worth compiling).  They also run the
-- generic plans of their statements (and of those they call): each is the same index
-- probe for any endpoint and ids, and the plan cache otherwise planned some of them
-- again for every call, depending on when the queue was analyzed (a read and ack of one
-- message spent 0.25 ms of its 1.06 ms planning).
--
-- The consumer's entry points (src/pg/consumer/consumer_functions.cpp): not SECURITY
-- DEFINER, so that they know the role that really calls them; they run outbox._read,
-- _ack and _nack below as the extension's owner, with that role's oid.
CREATE OR REPLACE FUNCTION outbox.read(endpoint text, max int DEFAULT 1, visibility interval DEFAULT '30s',
                                       wait interval DEFAULT '0')
    RETURNS TABLE (id bigint, webhook_id text, event_type text, payload jsonb, headers jsonb,
                   ordering_key text, attempt int, created_at timestamptz)
    AS 'MODULE_PATHNAME', 'pg_outbox_read'
    LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION outbox.read(text, int, interval, interval) IS
    'takes up to max messages of a pull endpoint, invisible to other readers for visibility; waits up to wait for one';
CREATE OR REPLACE FUNCTION outbox.ack(endpoint text, ids bigint[]) RETURNS bigint
    AS 'MODULE_PATHNAME', 'pg_outbox_ack'
    LANGUAGE C VOLATILE;
CREATE OR REPLACE FUNCTION outbox.nack(endpoint text, id bigint, error text, retry_after interval DEFAULT NULL,
                                       permanent boolean DEFAULT false) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_nack'
    LANGUAGE C VOLATILE;

-- The endpoint argument of read/ack/nack: an existing pull endpoint that the calling
-- role may consume (a superuser, the extension's owner, or a role given the right by
-- outbox.grant_consume).  Returns its max_attempts (NULL: pg_outbox.max_attempts) and
-- whether it is paused.
CREATE OR REPLACE FUNCTION outbox._consumed_endpoint(endpoint text, caller oid, OUT max_attempts int, OUT paused boolean)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_pull boolean;
    v_role oid := _consumed_endpoint.caller;
BEGIN
    IF _consumed_endpoint.endpoint IS NULL THEN
        RAISE EXCEPTION 'endpoint must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT e.pull, e.max_attempts, e.paused INTO v_pull, max_attempts, paused
      FROM outbox.endpoints e WHERE e.name = _consumed_endpoint.endpoint;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', _consumed_endpoint.endpoint
            USING ERRCODE = 'undefined_object';
    END IF;
    IF NOT (EXISTS (SELECT FROM pg_catalog.pg_roles r WHERE r.oid = v_role AND r.rolsuper)
            OR EXISTS (SELECT FROM pg_catalog.pg_extension x WHERE x.extname = 'pg_outbox' AND x.extowner = v_role)
            OR EXISTS (SELECT FROM outbox.endpoint_consumers c
                        WHERE c.endpoint = _consumed_endpoint.endpoint
                          AND (c.role::oid = 0 OR pg_catalog.pg_has_role(v_role, c.role::oid, 'USAGE')))) THEN
        RAISE EXCEPTION 'permission denied to consume endpoint "%"', _consumed_endpoint.endpoint
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'An administrator gives the right with outbox.grant_consume().';
    END IF;
    IF NOT v_pull THEN
        RAISE EXCEPTION 'endpoint "%" is not a pull endpoint', _consumed_endpoint.endpoint
            USING ERRCODE = 'wrong_object_type',
                  DETAIL = 'The worker delivers its messages; only a pull endpoint''s are read.',
                  HINT = 'Create the endpoint with pull => true.';
    END IF;
END
$fn$;

-- A duration argument: not NULL, not negative, finite.
CREATE OR REPLACE FUNCTION outbox._check_duration(name text, value interval)
    RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF _check_duration.value IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', _check_duration.name USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF _check_duration.value < interval '0' OR NOT isfinite(_check_duration.value)
       OR _check_duration.value > interval '1 day' THEN
        RAISE EXCEPTION '% must be between 0 and 1 day', _check_duration.name
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('%s is %s.', _check_duration.name, _check_duration.value);
    END IF;
END
$fn$;

-- Takes up to max of the endpoint's due messages, each for one reader: they become
-- invisible for visibility, held by one row of outbox.holds, and their attempt counts
-- from now on (the queue's row records it when the message is answered or its visibility
-- passes).  On an ordered endpoint only each key's head is ever due
-- (src/pg/ordering/ordering.cpp).  With wait, sleeps until an enqueuing transaction
-- commits or the endpoint's next message comes due, then looks again (a new statement: a
-- fresh snapshot), until a message comes or wait is up.  Reads whose visibility passed
-- are counted first (outbox._pull_lapsed).  clock_timestamp(), not now(): a read that
-- waits sees messages committed after its transaction began.  outbox.read runs it as the
-- extension's owner, with the caller.
CREATE OR REPLACE FUNCTION outbox._read(endpoint text, max int, visibility interval, wait interval, caller oid)
    RETURNS TABLE (id bigint, webhook_id text, event_type text, payload jsonb, headers jsonb,
                   ordering_key text, attempt int, created_at timestamptz)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
    SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    v_max_attempts int;
    v_paused boolean;
    v_until timestamptz;
    v_seen bigint;
    v_now timestamptz;
    v_next timestamptz;
    v_ids bigint[];
    v_taken bigint[];
    v_instance text;
    v_legacy bigint;
BEGIN
    SELECT c.max_attempts INTO v_max_attempts FROM outbox._consumed_endpoint(_read.endpoint, _read.caller) c;
    v_max_attempts := coalesce(v_max_attempts, current_setting('pg_outbox.max_attempts')::int);
    IF _read.max IS NULL OR _read.max < 1 OR _read.max > 1000 THEN
        RAISE EXCEPTION 'max must be between 1 and 1000'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('max is %s.', coalesce(_read.max::text, 'NULL'));
    END IF;
    PERFORM outbox._check_duration('visibility', _read.visibility);
    PERFORM outbox._check_duration('wait', _read.wait);
    IF _read.visibility = interval '0' THEN
        RAISE EXCEPTION 'visibility must be greater than zero' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- A read that waits runs inside the caller's statement, whose snapshot keeps VACUUM
    -- from the queue's dead rows while it waits: the wait is bounded.
    IF _read.wait > interval '5 minutes' THEN
        RAISE EXCEPTION 'wait must be at most 5 minutes'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('wait is %s.', _read.wait),
                  HINT = 'Call outbox.read again when it returns nothing.';
    END IF;
    -- Each look, and the check after it that no other read took the same messages, needs
    -- a snapshot of its own: the rows are only locked, not rewritten, so a transaction
    -- snapshot would not see a read that committed after it began.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'outbox.read needs a READ COMMITTED transaction'
            USING ERRCODE = 'invalid_transaction_state',
                  DETAIL = format('This transaction is %s: its snapshot would not see what other readers took.',
                                  upper(current_setting('transaction_isolation'))),
                  HINT = 'Read in a READ COMMITTED transaction (the default).';
    END IF;
    v_until := clock_timestamp() + _read.wait;
    SELECT i.id, i.legacy_below INTO v_instance, v_legacy FROM outbox._instance() i;
    LOOP
        v_seen := outbox._pull_commits();  -- before looking: a commit after it ends the wait
        v_now := clock_timestamp();
        SELECT e.paused INTO v_paused FROM outbox.endpoints e WHERE e.name = _read.endpoint;
        IF NOT coalesce(v_paused, true) THEN
            -- (A probe of the holds' index first: most reads find no lapsed read, and the
            -- count itself is a statement that locks and deletes.)
            IF EXISTS (SELECT FROM outbox.holds h
                        WHERE h.endpoint = _read.endpoint AND h.held_until <= clock_timestamp()) THEN
                PERFORM outbox._pull_lapsed(_read.endpoint, v_max_attempts);
            END IF;
            -- The due messages that no read holds, locked; SKIP LOCKED passes over those
            -- another read is taking now.
            SELECT array_agg(c.id ORDER BY c.next_attempt_at, c.id) INTO v_ids
              FROM (SELECT m.id, m.next_attempt_at
                      FROM outbox.messages m
                     WHERE m.endpoint = _read.endpoint AND m.ordering_seq IS NULL AND m.next_attempt_at <= v_now
                       AND m.id NOT IN (SELECT unnest(h.message_ids) FROM outbox.holds h
                                         WHERE h.endpoint = _read.endpoint)
                     ORDER BY m.next_attempt_at
                     LIMIT _read.max
                       FOR UPDATE SKIP LOCKED) c;
            IF v_ids IS NOT NULL THEN
                -- A read that committed after the look above began released its locks
                -- before this one took them: this statement's snapshot sees its hold,
                -- and its messages are left to it.
                INSERT INTO outbox.holds AS h (endpoint, message_ids, read_at, held_until)
                SELECT _read.endpoint, t.ids, v_now, v_now + _read.visibility
                  FROM (SELECT array_agg(u.id ORDER BY u.n) AS ids
                          FROM unnest(v_ids) WITH ORDINALITY AS u(id, n)
                         WHERE u.id NOT IN (SELECT unnest(o.message_ids) FROM outbox.holds o
                                             WHERE o.endpoint = _read.endpoint)) t
                 WHERE t.ids IS NOT NULL
                RETURNING h.message_ids INTO v_taken;
                CONTINUE WHEN v_taken IS NULL;  -- every one was taken by that read: look again
                RETURN QUERY
                SELECT m.id, outbox._webhook_id(m.id, m.idempotency_key, v_instance, v_legacy), m.event_type,
                       m.payload, m.headers, m.ordering_key, m.attempts + 1, m.created_at
                  FROM unnest(v_taken) WITH ORDINALITY AS u(id, n)
                  JOIN outbox.messages m ON m.id = u.id
                 ORDER BY u.n;
                RETURN;
            END IF;
        END IF;
        EXIT WHEN clock_timestamp() >= v_until;
        -- Also woken when the endpoint's next message comes due by itself (a retry after
        -- its backoff, a deliver_at) or a read's visibility passes: no commit announces it.
        SELECT least((SELECT min(m.next_attempt_at) FROM outbox.messages m
                       WHERE m.endpoint = _read.endpoint AND m.ordering_seq IS NULL AND m.next_attempt_at > v_now),
                     (SELECT min(h.held_until) FROM outbox.holds h WHERE h.endpoint = _read.endpoint))
          INTO v_next;
        PERFORM outbox._pull_wait(v_seen, least(v_until, v_next));
    END LOOP;
END
$fn$;
-- The messages among ids that a reader of the endpoint holds now are delivered: they
-- leave the queue for the history as a 2xx does.  Others (unknown, of another endpoint,
-- never read, or whose visibility has passed) are not counted.  Returns how many.
-- outbox.ack runs it as the extension's owner, with the caller.
CREATE OR REPLACE FUNCTION outbox._ack(endpoint text, ids bigint[], caller oid)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
    SET plan_cache_mode = force_generic_plan
AS $fn$
BEGIN
    PERFORM outbox._consumed_endpoint(_ack.endpoint, _ack.caller);
    IF _ack.ids IS NULL THEN
        RAISE EXCEPTION 'ids must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF cardinality(_ack.ids) > 10000 THEN
        RAISE EXCEPTION 'at most 10000 ids at once' USING ERRCODE = 'invalid_parameter_value',
            DETAIL = format('%s ids were given.', cardinality(_ack.ids));
    END IF;
    RETURN outbox._pull_ack(_ack.endpoint, _ack.ids);
END
$fn$;

-- The consumer could not process the message it holds: retried after retry_after when
-- given (at most pg_outbox.backoff_max), else with the endpoint's backoff; dead-lettered
-- with the consumer's error after max_attempts (RETRY_EXHAUSTED), or at once when
-- permanent (REJECTED_BY_CONSUMER).  An id the endpoint's readers do not hold is an
-- error (42704).  outbox.nack runs it as the extension's owner, with the caller.
CREATE OR REPLACE FUNCTION outbox._nack(endpoint text, id bigint, error text, retry_after interval,
                                        permanent boolean, caller oid)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off
    SET plan_cache_mode = force_generic_plan
AS $fn$
DECLARE
    v_max_attempts int;
BEGIN
    SELECT c.max_attempts INTO v_max_attempts FROM outbox._consumed_endpoint(_nack.endpoint, _nack.caller) c;
    IF _nack.id IS NULL OR _nack.error IS NULL OR _nack.permanent IS NULL THEN
        RAISE EXCEPTION 'id, error and permanent must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF _nack.retry_after IS NOT NULL THEN
        PERFORM outbox._check_duration('retry_after', _nack.retry_after);
    END IF;
    IF NOT outbox._pull_nack(_nack.endpoint, _nack.id, _nack.error,
                             (extract(epoch FROM _nack.retry_after) * 1000)::bigint,
                             _nack.permanent, v_max_attempts) THEN
        RAISE EXCEPTION 'message % is not held by a reader of endpoint "%"', _nack.id, _nack.endpoint
            USING ERRCODE = 'undefined_object',
                  DETAIL = 'It is unknown, of another endpoint, not read, or its visibility has passed.';
    END IF;
END
$fn$;

------------------------------------------------------------------------------------------
-- Consume rights
------------------------------------------------------------------------------------------

-- Lets role (a role name, or 'public') read, acknowledge and refuse the messages of a
-- pull endpoint (with EXECUTE on outbox.read, outbox.ack and outbox.nack).  Granting
-- twice is not an error.  42704 for an unknown endpoint or role; 42809 for an endpoint
-- that is not a pull endpoint.
CREATE OR REPLACE FUNCTION outbox.grant_consume(endpoint text, role name)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF NOT (SELECT e.pull FROM outbox.endpoints e WHERE e.name = outbox._sending_endpoint(grant_consume.endpoint)) THEN
        RAISE EXCEPTION 'endpoint "%" is not a pull endpoint', grant_consume.endpoint
            USING ERRCODE = 'wrong_object_type';
    END IF;
    INSERT INTO outbox.endpoint_consumers (endpoint, role)
    VALUES (grant_consume.endpoint, outbox._sending_role(grant_consume.role))
    ON CONFLICT DO NOTHING;
END
$fn$;
COMMENT ON FUNCTION outbox.grant_consume(text, name) IS
    'lets a role (or public) read, acknowledge and refuse the messages of a pull endpoint';

-- Takes the right back.  Revoking what was not granted is not an error (as REVOKE).
CREATE OR REPLACE FUNCTION outbox.revoke_consume(endpoint text, role name)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    DELETE FROM outbox.endpoint_consumers c
     WHERE c.endpoint = outbox._sending_endpoint(revoke_consume.endpoint)
       AND c.role = outbox._sending_role(revoke_consume.role);
END
$fn$;
COMMENT ON FUNCTION outbox.revoke_consume(text, name) IS
    'takes back a role''s right to consume a pull endpoint';
