------------------------------------------------------------------------------------------
-- Publish and subscribe (docs/delivery.md, Publish and subscribe)
------------------------------------------------------------------------------------------

-- The producer's fan-out (src/pg/producer/publish.cpp): one message per endpoint
-- subscribed to event_type, in the caller's transaction, all with the same webhook-id;
-- returns how many.  Not SECURITY DEFINER, as outbox.enqueue: the caller needs EXECUTE
-- and the send right on every endpoint the event goes to.
CREATE OR REPLACE FUNCTION outbox.publish(event_type text,
                                          payload jsonb,
                                          headers jsonb DEFAULT NULL,
                                          ordering_key text DEFAULT NULL,
                                          idempotency_key text DEFAULT NULL,
                                          deliver_at timestamptz DEFAULT NULL)
    RETURNS bigint
    AS 'MODULE_PATHNAME', 'pg_outbox_publish'
    LANGUAGE C VOLATILE;
COMMENT ON FUNCTION outbox.publish(text, jsonb, jsonb, text, text, timestamptz) IS
    'sends an event to every endpoint subscribed to its type, in the current transaction; returns how many deliveries';

-- Statement trigger on outbox.endpoint_subscriptions: every backend forgets the
-- subscribers it cached once the change commits (src/pg/producer/subscribers.cpp).
CREATE OR REPLACE FUNCTION outbox._subscriptions_changed() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_subscriptions_changed'
    LANGUAGE C;
CREATE OR REPLACE TRIGGER subscriptions_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON outbox.endpoint_subscriptions
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._subscriptions_changed();

-- Publishes that found no subscriber in this database since the server started (kept in
-- shared memory; 0 while no worker serves the database).
CREATE OR REPLACE FUNCTION outbox._unmatched_publishes() RETURNS bigint
    AS 'MODULE_PATHNAME', 'pg_outbox_unmatched_publishes'
    LANGUAGE C VOLATILE;

-- The event_types argument of subscribe/unsubscribe: a non-empty array of patterns, each
-- an exact event type or 'prefix.*' (1-200 characters, no whitespace, no control
-- character, '*' only as the last segment after a dot).
CREATE OR REPLACE FUNCTION outbox._check_event_patterns(event_types text[])
    RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_pattern text;
BEGIN
    IF _check_event_patterns.event_types IS NULL THEN
        RAISE EXCEPTION 'event_types must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF cardinality(_check_event_patterns.event_types) = 0 THEN
        RAISE EXCEPTION 'event_types must not be empty' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF cardinality(_check_event_patterns.event_types) > 1000 THEN
        RAISE EXCEPTION 'at most 1000 event types at once' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH v_pattern IN ARRAY _check_event_patterns.event_types LOOP
        IF v_pattern IS NULL THEN
            RAISE EXCEPTION 'event_types must not contain NULL' USING ERRCODE = 'null_value_not_allowed';
        END IF;
        IF char_length(v_pattern) NOT BETWEEN 1 AND 200 OR v_pattern !~ '^[^*[:space:][:cntrl:]]+(\.\*)?$' THEN
            RAISE EXCEPTION 'invalid event type pattern "%"', v_pattern
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'A pattern is an event type (1 to 200 characters, no whitespace, no control '
                               'character, no "*"), or a prefix followed by ".*".',
                      HINT = 'For example ''order.created'' or ''order.*''.';
        END IF;
    END LOOP;
END
$fn$;

-- The endpoint receives every later publish of these event types.  Subscribing twice is
-- not an error.  Returns how many subscriptions are new.  42704 for an unknown endpoint,
-- 22023 for a malformed pattern, 22004 for NULL.
CREATE OR REPLACE FUNCTION outbox.subscribe(endpoint text, event_types text[])
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_count bigint;
BEGIN
    PERFORM outbox._sending_endpoint(subscribe.endpoint);
    PERFORM outbox._check_event_patterns(subscribe.event_types);
    -- KEY SHARE: a concurrent drop_endpoint waits, so no subscription outlives its endpoint.
    PERFORM 1 FROM outbox.endpoints e WHERE e.name = subscribe.endpoint FOR KEY SHARE;
    INSERT INTO outbox.endpoint_subscriptions (endpoint, event_type)
    SELECT DISTINCT subscribe.endpoint, t FROM unnest(subscribe.event_types) t
    ON CONFLICT DO NOTHING;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$fn$;
COMMENT ON FUNCTION outbox.subscribe(text, text[]) IS
    'the endpoint receives every outbox.publish of these event types (exact, or prefix.*); returns how many are new';

-- Ends the endpoint's subscriptions to these patterns (as written when subscribing), or
-- all of them when event_types is NULL.  Returns how many ended; ending a subscription
-- that does not exist is not an error.
CREATE OR REPLACE FUNCTION outbox.unsubscribe(endpoint text, event_types text[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_count bigint;
BEGIN
    PERFORM outbox._sending_endpoint(unsubscribe.endpoint);
    IF unsubscribe.event_types IS NOT NULL THEN
        PERFORM outbox._check_event_patterns(unsubscribe.event_types);
    END IF;
    DELETE FROM outbox.endpoint_subscriptions s
     WHERE s.endpoint = unsubscribe.endpoint
       AND (unsubscribe.event_types IS NULL OR s.event_type = ANY (unsubscribe.event_types));
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$fn$;
COMMENT ON FUNCTION outbox.unsubscribe(text, text[]) IS
    'ends an endpoint''s subscriptions to these event types (all of them when NULL); returns how many';

-- Who receives what.
CREATE OR REPLACE VIEW outbox.subscriptions AS
SELECT s.endpoint, s.event_type, s.event_type LIKE '%.*' AS prefix, s.created_at
  FROM outbox.endpoint_subscriptions s;
COMMENT ON VIEW outbox.subscriptions IS
    'pg_outbox subscriptions: which endpoint receives which event types of outbox.publish (prefix: a prefix.* pattern)';
