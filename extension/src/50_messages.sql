------------------------------------------------------------------------------------------
-- Messages
------------------------------------------------------------------------------------------

-- The producer's hot path, called by outbox.enqueue() (below) with the role that
-- really called it: one endpoint lookup by primary key, the send right, one INSERT.
-- Executable by nobody but the owner: only outbox.enqueue, which switches to the owner
-- after it has taken the caller's identity, reaches it, so no caller can claim to be
-- another role.  It does not lock the endpoint row (see outbox.messages); a message
-- enqueued while its endpoint is being dropped is dead-lettered by the worker as
-- INVALID_MESSAGE.
CREATE OR REPLACE FUNCTION outbox._enqueue(endpoint text,
                                payload jsonb,
                                event_type text,
                                headers jsonb,
                                ordering_key text,
                                idempotency_key text,
                                deliver_at timestamptz,
                                caller regrole,
                                privileged boolean)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_max_pending bigint;
    v_id          bigint;
BEGIN
    IF _enqueue.endpoint IS NULL THEN
        RAISE EXCEPTION 'endpoint must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF _enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be NULL'
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Use ''null''::jsonb for a JSON null payload.';
    END IF;

    SELECT e.max_pending INTO v_max_pending
      FROM outbox.endpoints e
     WHERE e.name = _enqueue.endpoint;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', _enqueue.endpoint
            USING ERRCODE = 'undefined_object';
    END IF;
    -- The send right: privileged (a superuser or the extension's owner, which
    -- outbox.enqueue works out in C) or the privileges of a granted role, or PUBLIC.
    -- pg_has_role is false, not an error, for a role dropped since it was granted.
    IF NOT _enqueue.privileged
       AND NOT EXISTS (SELECT FROM outbox.endpoint_senders s
                        WHERE s.endpoint = _enqueue.endpoint
                          AND (s.role = 0 OR pg_catalog.pg_has_role(_enqueue.caller, s.role, 'USAGE'))) THEN
        RAISE EXCEPTION 'permission denied to send to endpoint "%"', _enqueue.endpoint
            USING ERRCODE = 'insufficient_privilege',
                  HINT = format('An operator grants it with outbox.grant_send(%L, %L).',
                                _enqueue.endpoint, _enqueue.caller::text);
    END IF;

    IF _enqueue.headers IS NOT NULL THEN
        PERFORM outbox._check_headers(_enqueue.headers);
    END IF;
    IF _enqueue.idempotency_key IS NOT NULL THEN
        PERFORM outbox._check_idempotency_key(_enqueue.idempotency_key);
    END IF;
    -- event_type travels in the outbox-event-type header and is indexed in the DLQ.
    IF _enqueue.event_type ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'event_type must not contain control characters (CR, LF, ...)'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF char_length(_enqueue.event_type) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'event_type must be 1 to 200 characters long'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF char_length(_enqueue.ordering_key) NOT BETWEEN 1 AND 200 THEN
        RAISE EXCEPTION 'ordering_key must be 1 to 200 characters long'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF _enqueue.deliver_at = 'infinity' THEN
        RAISE EXCEPTION 'deliver_at must not be infinity'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pause the endpoint to hold its messages back.';
    END IF;

    -- Backpressure: count no more than max_pending undelivered rows (the queue holds
    -- nothing else).
    IF v_max_pending IS NOT NULL
       AND (SELECT count(*)
              FROM (SELECT 1 FROM outbox.messages m
                     WHERE m.endpoint = _enqueue.endpoint
                     LIMIT v_max_pending) s) >= v_max_pending THEN
        -- A retried enqueue of a message that is already in is not new work.
        IF _enqueue.idempotency_key IS NOT NULL THEN
            SELECT m.id INTO v_id FROM outbox.messages m
             WHERE m.endpoint = _enqueue.endpoint AND m.idempotency_key = _enqueue.idempotency_key;
            IF FOUND THEN
                RETURN v_id;
            END IF;
        END IF;
        RAISE EXCEPTION 'endpoint "%" has reached max_pending (%)', _enqueue.endpoint, v_max_pending
            USING ERRCODE = 'configuration_limit_exceeded',
                  DETAIL = 'The endpoint''s undelivered messages (pending or in flight) are at its limit.',
                  HINT = 'Retry later, check that the endpoint is receiving (outbox.endpoint_stats), or raise max_pending with outbox.alter_endpoint().';
    END IF;

    -- Without a key there is nothing to deduplicate: a plain INSERT, which costs far
    -- less than ON CONFLICT's speculative insertion (this is the hot path).
    IF _enqueue.idempotency_key IS NULL THEN
        INSERT INTO outbox.messages AS m (endpoint, event_type, payload, headers,
                                          ordering_key, next_attempt_at)
        VALUES (_enqueue.endpoint, _enqueue.event_type, _enqueue.payload, _enqueue.headers,
                _enqueue.ordering_key, greatest(now(), _enqueue.deliver_at))
        RETURNING m.id INTO v_id;
        RETURN v_id;
    END IF;

    -- Idempotency: a message with the same key still in the outbox wins.  The loop only
    -- repeats if that message left the outbox between the INSERT and the SELECT.
    FOR i IN 1..3 LOOP
        INSERT INTO outbox.messages AS m (endpoint, event_type, payload, headers,
                                          ordering_key, idempotency_key, next_attempt_at)
        VALUES (_enqueue.endpoint, _enqueue.event_type, _enqueue.payload, _enqueue.headers,
                _enqueue.ordering_key, _enqueue.idempotency_key,
                greatest(now(), _enqueue.deliver_at))
        ON CONFLICT (endpoint, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
        RETURNING m.id INTO v_id;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
        SELECT m.id INTO v_id FROM outbox.messages m
         WHERE m.endpoint = _enqueue.endpoint AND m.idempotency_key = _enqueue.idempotency_key;
        IF v_id IS NOT NULL THEN
            RETURN v_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'could not enqueue: the message with the same idempotency key keeps changing'
        USING ERRCODE = 'serialization_failure',
              HINT = 'Retry the transaction.';
END
$fn$;
COMMENT ON FUNCTION outbox._enqueue(text, jsonb, text, jsonb, text, text, timestamptz, regrole, boolean) IS
    'the work of outbox.enqueue(), for the role given; reached only through outbox.enqueue()';

-- The producer's entry.  In C and NOT security definer: it takes the identity of the
-- role that really calls it (SET ROLE and callers inside other SECURITY DEFINER
-- functions included), then runs outbox._enqueue() as the extension's owner, as a
-- SECURITY DEFINER function would.  A producer needs EXECUTE on this function, a send
-- right on the endpoint (outbox.grant_send) and no table privilege.
CREATE OR REPLACE FUNCTION outbox.enqueue(endpoint text,
                               payload jsonb,
                               event_type text DEFAULT NULL,
                               headers jsonb DEFAULT NULL,
                               ordering_key text DEFAULT NULL,
                               idempotency_key text DEFAULT NULL,
                               deliver_at timestamptz DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'pg_outbox_enqueue'
    LANGUAGE C VOLATILE;
COMMENT ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) IS
    'adds a message to the outbox in the current transaction and returns its id; delivered after commit';

-- Deletes delivered messages older than older_than, or than pg_outbox.sent_retention
-- when NULL ('0' = every delivered message), from outbox.history.  Returns how many.
CREATE OR REPLACE FUNCTION outbox.purge(older_than interval DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_keep interval;
BEGIN
    -- SHOW gives '1d', '5min', '0'...: all valid interval input.  Without the library
    -- loaded the GUC is unknown; fall back to its default.
    v_keep := coalesce(purge.older_than,
                       nullif(current_setting('pg_outbox.sent_retention', true), '')::interval,
                       interval '1 day');
    IF v_keep < interval '0' THEN
        RAISE EXCEPTION 'older_than must not be negative'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass how long sent messages are kept, e.g. interval ''1 day''; NULL uses pg_outbox.sent_retention.';
    END IF;
    -- Rows exactly at the cutoff go too ("older than 0" is every row).
    RETURN outbox._history_retire(now() - v_keep + interval '1 microsecond', true);
END
$fn$;
COMMENT ON FUNCTION outbox.purge(interval) IS
    'deletes delivered messages older than older_than (default pg_outbox.sent_retention) from the history; returns the count';

-- Where a message stands, wherever its row lives now: the queue (pending, or in flight
-- while a claim of the worker lists it), the history (sent) or the DLQ (dead).  No row
-- for an id that is in none of them (never existed, or its history was purged).
CREATE OR REPLACE FUNCTION outbox.message(message_id bigint,
        OUT id bigint, OUT endpoint text, OUT status text, OUT attempts int,
        OUT last_error text, OUT last_http_status int, OUT created_at timestamptz,
        OUT sent_at timestamptz, OUT dead_letter_id bigint)
    RETURNS SETOF record
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    ROWS 1
AS $fn$
    (SELECT m.id, m.endpoint,
            CASE WHEN EXISTS (SELECT FROM outbox.claims c WHERE m.id = ANY (c.message_ids))
                 THEN 'in_flight' ELSE 'pending' END,
            m.attempts, m.last_error, m.last_http_status, m.created_at, NULL::timestamptz, NULL::bigint
       FROM outbox.messages m WHERE m.id = $1)
    UNION ALL
    (SELECT h.id, h.endpoint, 'sent', h.attempts, NULL, h.last_http_status, h.created_at, h.sent_at, NULL
       FROM outbox.history h WHERE h.id = $1 LIMIT 1)
    UNION ALL
    (SELECT d.message_id, d.endpoint, 'dead', d.attempts, d.error_message, d.http_status,
            d.message_created_at, NULL, d.id
       FROM dlq.dead_letters d WHERE d.message_id = $1 ORDER BY d.id DESC LIMIT 1)
    LIMIT 1
$fn$;
COMMENT ON FUNCTION outbox.message(bigint) IS
    'where a message stands: pending, in_flight, sent (kept in the history) or dead (in the DLQ)';
