-- pg_outbox 0.2.0: the transactional outbox and dead letter queue, as SQL.
--
-- What this script creates:
--   schema outbox   endpoints, their secrets, the messages waiting for delivery, the
--                   producer's enqueue(), endpoint administration, stats, metrics, purge
--   schema dlq      the dead letters and the functions that requeue or discard them
--
-- Conventions:
--   * Every function a producer or an operator calls is SECURITY DEFINER with
--     search_path = pg_catalog, pg_temp, and names every object with its schema, so a
--     caller's search_path can never redirect it.
--   * Nothing is granted to PUBLIC (see the end of the file, with the grants a
--     deployment needs).
--   * Functions whose parameters share a name with a column use
--     "#variable_conflict use_column" and always qualify their parameters with the
--     function's name (enqueue.endpoint), so a column reference is never mistaken for
--     a parameter or the other way round.
--   * Errors follow PostgreSQL's style: a fitting SQLSTATE, a lower-case message,
--     DETAIL/HINT as sentences.  A failed call changes nothing.

\echo Use "CREATE EXTENSION pg_outbox" to load this file. \quit

CREATE SCHEMA outbox;
COMMENT ON SCHEMA outbox IS 'pg_outbox: messages waiting for delivery and their endpoints';
CREATE SCHEMA dlq;
COMMENT ON SCHEMA dlq IS 'pg_outbox: messages that could not be delivered';

------------------------------------------------------------------------------------------
-- Validators written in C++ (src/pg).  They return nothing and raise an error when the
-- value is not acceptable.  They are STRICT: callers handle NULL themselves, so that a
-- NULL never reaches C code that does not expect it.
------------------------------------------------------------------------------------------

-- 42602 invalid_name unless name matches ^[a-z0-9][a-z0-9_.-]{0,62}$.
CREATE FUNCTION outbox._check_endpoint_name(name text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_endpoint_name'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless url is an absolute http:// or https:// URL with a host.
CREATE FUNCTION outbox._check_url(url text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_url'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 42501 when the egress policy (pg_outbox.egress_allow / egress_deny) refuses the URL's
-- host as written: an address literal, or a name a host pattern denies.  Names are
-- checked again, with the addresses they resolve to, whenever the worker connects.
CREATE FUNCTION outbox._check_egress(url text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_egress'
    LANGUAGE C STABLE STRICT;

-- 22023 unless headers is a JSON object of string values whose names are HTTP tokens,
-- with no CR, LF or NUL in any name or value.
CREATE FUNCTION outbox._check_headers(headers jsonb) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_headers'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless secret is a Standard Webhooks secret ("whsec_" + base64).  The error
-- never contains the secret.
CREATE FUNCTION outbox._check_secret(secret text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_secret'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless key has 1-200 characters, no ".", no whitespace, no control character
-- (it becomes the webhook-id header).
CREATE FUNCTION outbox._check_idempotency_key(key text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_idempotency_key'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless channel is a name LISTEN/NOTIFY can use.
CREATE FUNCTION outbox._check_channel(channel text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_channel'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

------------------------------------------------------------------------------------------
-- The worker's side, in C++: waking it, its status and its counters.
------------------------------------------------------------------------------------------

-- Statement trigger on outbox.messages: wakes the worker when the transaction commits
-- (nothing happens on rollback, and many inserts in one transaction wake it once).
CREATE FUNCTION outbox._wake_at_commit() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_wake_at_commit'
    LANGUAGE C;

-- Asks the worker, at commit, to wake up and re-read the endpoints.
CREATE FUNCTION outbox._request_wake() RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_request_wake'
    LANGUAGE C VOLATILE;

-- config_loaded_at: when the configuration the worker runs with was read (its own
-- re-read after a SIGHUP, or the server's last load before the worker started; the
-- worker's pg_conf_load_time()).  A change made with ALTER SYSTEM + pg_reload_conf()
-- has reached the worker once this is later than the moment ALTER SYSTEM returned.
CREATE FUNCTION outbox.worker_status(
        OUT pid int, OUT database text, OUT state text,
        OUT started_at timestamptz, OUT last_loop_at timestamptz, OUT in_flight int,
        OUT sent bigint, OUT retried bigint, OUT dead_lettered bigint,
        OUT config_loaded_at timestamptz)
    RETURNS record
    AS 'MODULE_PATHNAME', 'pg_outbox_worker_status'
    LANGUAGE C VOLATILE;
COMMENT ON FUNCTION outbox.worker_status() IS
    'the background worker: pid, database, state, start and last loop time, messages in flight, counters since start, when it last read its configuration';

-- Deliveries since the worker started, per endpoint and result ('sent', 'retry', 'dead').
CREATE FUNCTION outbox._delivery_counters(OUT endpoint text, OUT result text, OUT count bigint)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'pg_outbox_delivery_counters'
    LANGUAGE C VOLATILE ROWS 30;

-- Test-only: proves that C++ exceptions and PostgreSQL errors cross the C++/PostgreSQL
-- boundary as ordinary errors and leave the backend usable.  Kinds: 'ok',
-- 'std_exception', 'bad_alloc', 'unknown' (XX000 "pg_outbox internal error: ...") and
-- 'pg_error_in_cpp' (the PostgreSQL error keeps its own SQLSTATE).
CREATE FUNCTION outbox._boundary_selftest(kind text) RETURNS text
    AS 'MODULE_PATHNAME', 'pg_outbox_boundary_selftest'
    LANGUAGE C VOLATILE STRICT;

------------------------------------------------------------------------------------------
-- Tables
------------------------------------------------------------------------------------------

-- One row per destination.  NULL timeout_ms / max_attempts mean "use the GUC"
-- (pg_outbox.http_timeout, pg_outbox.max_attempts); NULL max_pending means no limit.
-- The breaker_* columns belong to the worker's circuit breaker.
CREATE TABLE outbox.endpoints (
    name                text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    url                 text,
    channel             text,
    headers             jsonb NOT NULL DEFAULT '{}',
    timeout_ms          int CHECK (timeout_ms > 0),
    max_attempts        int CHECK (max_attempts > 0),
    ordered             boolean NOT NULL DEFAULT false,
    max_pending         bigint CHECK (max_pending > 0),
    paused              boolean NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now(),
    breaker_state       text NOT NULL DEFAULT 'closed'
                        CHECK (breaker_state IN ('closed', 'open', 'half_open')),
    breaker_failures    int NOT NULL DEFAULT 0,          -- consecutive retryable failures
    breaker_open_until  timestamptz,
    breaker_cooldown_ms bigint NOT NULL DEFAULT 0,
    CONSTRAINT endpoints_url_xor_channel
        CHECK ((url IS NULL) <> (channel IS NULL))       -- HTTP or NOTIFY, never both
);
COMMENT ON TABLE outbox.endpoints IS
    'pg_outbox destinations: an http(s) url or a NOTIFY channel; manage with outbox.create_endpoint() and friends';

-- Webhook signing secrets, apart from the endpoints so that reading the endpoints never
-- reveals one.  Nobody but the table's owner (the superuser that created the extension,
-- whom the worker and the SECURITY DEFINER functions act as) may read it.
CREATE TABLE outbox.endpoint_secrets (
    endpoint text PRIMARY KEY REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    secret   text NOT NULL
);
COMMENT ON TABLE outbox.endpoint_secrets IS
    'pg_outbox webhook secrets (Standard Webhooks); readable by the extension owner only';

-- Who may send to which endpoint (outbox.grant_send / outbox.revoke_send).  A role may
-- enqueue to an endpoint when it has the privileges of a role listed for it (as for a
-- GRANT: membership with INHERIT, or SET ROLE), or when PUBLIC ('-', oid 0) is listed.
-- regrole, so that pg_dump writes role names, not oids; a row of a role since dropped
-- grants nothing.
CREATE TABLE outbox.endpoint_senders (
    endpoint text    NOT NULL REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    role     regrole NOT NULL,
    PRIMARY KEY (endpoint, role)
);
COMMENT ON TABLE outbox.endpoint_senders IS
    'pg_outbox send rights: the roles that may enqueue to each endpoint; manage with outbox.grant_send()';

-- The outbox proper.  There is deliberately no foreign key to outbox.endpoints: every
-- producer's INSERT would lock the endpoint row FOR KEY SHARE, and one hot endpoint
-- shared by many concurrent producers turns that into multixact contention.  Instead
-- outbox.enqueue() checks that the endpoint exists, and the worker dead-letters a row
-- whose endpoint has gone (reason INVALID_MESSAGE).
--
-- A queue table updates and deletes most of its rows soon after inserting them, so
-- autovacuum is asked to look at it far more often than at an ordinary table.
CREATE TABLE outbox.messages (
    id               bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    endpoint         text NOT NULL,
    -- The bounds below hold for every row, however it was inserted: a row the worker
    -- could not index, header or schedule would stall the settle of a whole batch.
    event_type       text CHECK (char_length(event_type) BETWEEN 1 AND 200 AND event_type !~ '[[:cntrl:]]'),
    payload          jsonb NOT NULL,
    headers          jsonb,
    ordering_key     text CHECK (char_length(ordering_key) BETWEEN 1 AND 200),
    idempotency_key  text CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    status           text NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'in_flight', 'sent')),
    attempts         int NOT NULL DEFAULT 0,           -- counted when the worker claims it
    next_attempt_at  timestamptz NOT NULL DEFAULT now() CHECK (isfinite(next_attempt_at)),
    lease_until      timestamptz,                      -- in_flight: claim expires then
    last_error       text,
    last_http_status int,
    first_failed_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    sent_at          timestamptz
) WITH (autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_vacuum_insert_scale_factor = 0.05,
        autovacuum_analyze_scale_factor = 0.05);
COMMENT ON TABLE outbox.messages IS
    'pg_outbox messages waiting for delivery (and, for pg_outbox.sent_retention, the sent ones)';

-- The worker's claim, one endpoint at a time: that endpoint's due pending messages,
-- oldest first (endpoint = $1 AND status = 'pending' AND next_attempt_at <= now()
-- ORDER BY next_attempt_at, id). Leading with the endpoint keeps the claim's cost
-- proportional to what it takes, whatever backlog paused or circuit-open endpoints hold.
CREATE INDEX messages_claim_idx ON outbox.messages (endpoint, next_attempt_at, id)
    WHERE status = 'pending';
-- Lease expiry: in-flight messages whose claim ran out (a worker that died mid-delivery).
CREATE INDEX messages_lease_idx ON outbox.messages (lease_until)
    WHERE status = 'in_flight';
-- Idempotent enqueue: INSERT ... ON CONFLICT (endpoint, idempotency_key) DO NOTHING.
CREATE UNIQUE INDEX messages_idempotency_key_idx ON outbox.messages (endpoint, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Ordered endpoints: is this message the head of its (endpoint, ordering_key) queue,
-- i.e. is there an undelivered message of the same key with a smaller id?
CREATE INDEX messages_ordering_idx ON outbox.messages (endpoint, ordering_key, id)
    WHERE ordering_key IS NOT NULL AND status <> 'sent';
-- Undelivered messages per endpoint: enqueue's max_pending check and drop_endpoint's
-- "undelivered messages?" check. Partial, so that marking a message sent (the most
-- frequent write) adds nothing to it.
CREATE INDEX messages_endpoint_status_idx ON outbox.messages (endpoint, status)
    WHERE status <> 'sent';
-- Retention: purge of sent messages older than pg_outbox.sent_retention.
CREATE INDEX messages_sent_at_idx ON outbox.messages (sent_at)
    WHERE status = 'sent';

-- Wake the worker at commit after every INSERT statement (enqueue, requeue, or a plain
-- INSERT by a privileged role).
CREATE TRIGGER messages_wake
    AFTER INSERT ON outbox.messages
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._wake_at_commit();

-- Messages that will not be delivered as they stand, with what is needed to understand
-- why and to put them back (dlq.requeue).  "Open" = neither requeued nor discarded.
-- A row stays after requeue/discard as evidence, until pg_outbox.dlq_retention has
-- passed since it was handled; an open row stays until someone handles it.
CREATE TABLE dlq.dead_letters (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id         bigint NOT NULL,                 -- its id in outbox.messages
    endpoint           text NOT NULL,
    event_type         text,
    payload            jsonb NOT NULL,
    headers            jsonb,
    ordering_key       text,
    idempotency_key    text,
    reason_code        text NOT NULL CHECK (reason_code IN ('HTTP_CLIENT_ERROR', 'PAYLOAD_TOO_LARGE',
                                                        'RETRY_EXHAUSTED', 'ENDPOINT_DROPPED',
                                                        'INVALID_MESSAGE', 'EGRESS_DENIED')),
    error_message      text,
    http_status        int,
    response_body      text,                            -- the first 1 KiB
    attempts           int NOT NULL DEFAULT 0,
    first_failed_at    timestamptz,
    last_failed_at     timestamptz,
    message_created_at timestamptz NOT NULL,
    dead_at            timestamptz NOT NULL DEFAULT now(),
    requeued_at        timestamptz,
    requeued_as        bigint,                          -- the new outbox.messages id
    discarded_at       timestamptz,
    note               text
);
COMMENT ON TABLE dlq.dead_letters IS
    'pg_outbox dead letters: inspect, then dlq.requeue() or dlq.discard()';

-- "What is dead for this endpoint?" (open rows), also dlq.requeue_all(endpoint => ...).
CREATE INDEX dead_letters_endpoint_idx ON dlq.dead_letters (endpoint, dead_at)
    WHERE requeued_at IS NULL AND discarded_at IS NULL;
-- "What died for this reason?" (open rows), also dlq.requeue_all(reason_code => ...).
CREATE INDEX dead_letters_reason_idx ON dlq.dead_letters (reason_code, dead_at)
    WHERE requeued_at IS NULL AND discarded_at IS NULL;
-- "Which events of this type died, and when?" (open or not).
CREATE INDEX dead_letters_event_type_idx ON dlq.dead_letters (event_type, dead_at);
-- Retention (pg_outbox.dlq_retention) of handled dead letters, by when they were
-- handled.  Open ones are never deleted automatically, so they are not in it.
CREATE INDEX dead_letters_handled_idx ON dlq.dead_letters ((COALESCE(requeued_at, discarded_at)))
    WHERE requeued_at IS NOT NULL OR discarded_at IS NOT NULL;
-- "What died since ...?".
CREATE INDEX dead_letters_dead_at_idx ON dlq.dead_letters (dead_at);

-- The tables hold user data: pg_dump must dump their rows (not their definitions).
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoints', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_senders', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.messages', '');
SELECT pg_catalog.pg_extension_config_dump('dlq.dead_letters', '');
-- ... and the identity sequences' positions, so restored ids are never handed out again.
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('outbox.messages', 'id'), '');
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('dlq.dead_letters', 'id'), '');

------------------------------------------------------------------------------------------
-- Endpoints
------------------------------------------------------------------------------------------

-- Validation shared by create_endpoint and alter_endpoint.  Not SECURITY DEFINER and
-- not granted: only the functions below call it.
CREATE FUNCTION outbox._check_endpoint_options(headers jsonb, secret text, timeout_ms int,
                                               max_attempts int, max_pending bigint)
    RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF _check_endpoint_options.headers IS NOT NULL THEN
        PERFORM outbox._check_headers(_check_endpoint_options.headers);
    END IF;
    -- '' is accepted by alter_endpoint to clear the secret; it is never stored.
    IF _check_endpoint_options.secret IS NOT NULL AND _check_endpoint_options.secret <> '' THEN
        PERFORM outbox._check_secret(_check_endpoint_options.secret);
    END IF;
    IF _check_endpoint_options.timeout_ms <= 0 THEN
        RAISE EXCEPTION 'timeout_ms must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('timeout_ms is %s.', _check_endpoint_options.timeout_ms),
                  HINT = 'Pass NULL to use pg_outbox.http_timeout.';
    END IF;
    IF _check_endpoint_options.max_attempts <= 0 THEN
        RAISE EXCEPTION 'max_attempts must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('max_attempts is %s.', _check_endpoint_options.max_attempts),
                  HINT = 'Pass NULL to use pg_outbox.max_attempts.';
    END IF;
    IF _check_endpoint_options.max_pending <= 0 THEN
        RAISE EXCEPTION 'max_pending must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('max_pending is %s.', _check_endpoint_options.max_pending),
                  HINT = 'Pass NULL for no limit.';
    END IF;
END
$fn$;

CREATE FUNCTION outbox.create_endpoint(name text,
                                       url text DEFAULT NULL,
                                       channel text DEFAULT NULL,
                                       headers jsonb DEFAULT '{}',
                                       secret text DEFAULT NULL,
                                       timeout_ms int DEFAULT NULL,
                                       max_attempts int DEFAULT NULL,
                                       ordered boolean DEFAULT false,
                                       max_pending bigint DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF create_endpoint.name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM outbox._check_endpoint_name(create_endpoint.name);

    IF (create_endpoint.url IS NULL) = (create_endpoint.channel IS NULL) THEN
        RAISE EXCEPTION 'exactly one of url or channel must be given'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give url for HTTP delivery, or channel for NOTIFY.';
    END IF;
    IF create_endpoint.url IS NOT NULL THEN
        PERFORM outbox._check_url(create_endpoint.url);
        PERFORM outbox._check_egress(create_endpoint.url);
    ELSE
        PERFORM outbox._check_channel(create_endpoint.channel);
        IF create_endpoint.secret IS NOT NULL THEN
            RAISE EXCEPTION 'a secret can only be set on a url endpoint'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'NOTIFY deliveries are not signed.';
        END IF;
    END IF;
    IF create_endpoint.secret = '' THEN
        RAISE EXCEPTION 'secret must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL for an endpoint without a secret.';
    END IF;
    PERFORM outbox._check_endpoint_options(create_endpoint.headers, create_endpoint.secret,
                                           create_endpoint.timeout_ms, create_endpoint.max_attempts,
                                           create_endpoint.max_pending);

    INSERT INTO outbox.endpoints (name, url, channel, headers, timeout_ms, max_attempts,
                                  ordered, max_pending)
    VALUES (create_endpoint.name, create_endpoint.url, create_endpoint.channel,
            coalesce(create_endpoint.headers, '{}'), create_endpoint.timeout_ms,
            create_endpoint.max_attempts, coalesce(create_endpoint.ordered, false),
            create_endpoint.max_pending)
    ON CONFLICT (name) DO NOTHING;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" already exists', create_endpoint.name
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Use outbox.alter_endpoint() to change it.';
    END IF;

    IF create_endpoint.secret IS NOT NULL THEN
        INSERT INTO outbox.endpoint_secrets (endpoint, secret)
        VALUES (create_endpoint.name, create_endpoint.secret);
    END IF;

    PERFORM outbox._request_wake();
END
$fn$;
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint) IS
    'creates an endpoint: exactly one of url (http/https) or channel (NOTIFY); NULL options use the GUCs';

-- Changes only the arguments that are not NULL.  secret => '' removes the secret (the
-- endpoint's deliveries are no longer signed); any other secret replaces it.  An
-- endpoint cannot change between url and channel delivery: drop and create it.
-- timeout_ms, max_attempts and max_pending cannot be set back to NULL here.
CREATE FUNCTION outbox.alter_endpoint(name text,
                                      url text DEFAULT NULL,
                                      headers jsonb DEFAULT NULL,
                                      secret text DEFAULT NULL,
                                      timeout_ms int DEFAULT NULL,
                                      max_attempts int DEFAULT NULL,
                                      ordered boolean DEFAULT NULL,
                                      max_pending bigint DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_channel text;
BEGIN
    IF alter_endpoint.name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT e.channel INTO v_channel
      FROM outbox.endpoints e
     WHERE e.name = alter_endpoint.name
       FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', alter_endpoint.name
            USING ERRCODE = 'undefined_object';
    END IF;

    IF v_channel IS NOT NULL AND alter_endpoint.url IS NOT NULL THEN
        RAISE EXCEPTION 'endpoint "%" delivers by NOTIFY and cannot be given a url', alter_endpoint.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Drop the endpoint and create it again with a url.';
    END IF;
    IF v_channel IS NOT NULL AND alter_endpoint.secret IS NOT NULL THEN
        RAISE EXCEPTION 'a secret can only be set on a url endpoint'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'NOTIFY deliveries are not signed.';
    END IF;
    IF alter_endpoint.url IS NOT NULL THEN
        PERFORM outbox._check_url(alter_endpoint.url);
        PERFORM outbox._check_egress(alter_endpoint.url);
    END IF;
    PERFORM outbox._check_endpoint_options(alter_endpoint.headers, alter_endpoint.secret,
                                           alter_endpoint.timeout_ms, alter_endpoint.max_attempts,
                                           alter_endpoint.max_pending);

    UPDATE outbox.endpoints e
       SET url          = coalesce(alter_endpoint.url, e.url),
           headers      = coalesce(alter_endpoint.headers, e.headers),
           timeout_ms   = coalesce(alter_endpoint.timeout_ms, e.timeout_ms),
           max_attempts = coalesce(alter_endpoint.max_attempts, e.max_attempts),
           ordered      = coalesce(alter_endpoint.ordered, e.ordered),
           max_pending  = coalesce(alter_endpoint.max_pending, e.max_pending)
     WHERE e.name = alter_endpoint.name;

    IF alter_endpoint.secret = '' THEN
        DELETE FROM outbox.endpoint_secrets s WHERE s.endpoint = alter_endpoint.name;
    ELSIF alter_endpoint.secret IS NOT NULL THEN
        INSERT INTO outbox.endpoint_secrets AS s (endpoint, secret)
        VALUES (alter_endpoint.name, alter_endpoint.secret)
        ON CONFLICT (endpoint) DO UPDATE SET secret = excluded.secret;
    END IF;

    PERFORM outbox._request_wake();
END
$fn$;
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint) IS
    'changes the arguments that are not NULL; secret => '''' removes the secret';

-- Refuses while the endpoint has undelivered (pending or in-flight) messages.  With
-- force they are moved to the DLQ as ENDPOINT_DROPPED, retained sent messages are
-- deleted, and then the endpoint and its secret.
CREATE FUNCTION outbox.drop_endpoint(name text, force boolean DEFAULT false)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_undelivered bigint;
BEGIN
    IF drop_endpoint.name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- Lock the endpoint first: a concurrent alter/drop/requeue waits for us.
    PERFORM 1 FROM outbox.endpoints e WHERE e.name = drop_endpoint.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', drop_endpoint.name
            USING ERRCODE = 'undefined_object';
    END IF;

    IF NOT coalesce(drop_endpoint.force, false) THEN
        SELECT count(*) INTO v_undelivered
          FROM outbox.messages m
         WHERE m.endpoint = drop_endpoint.name AND m.status <> 'sent';
        IF v_undelivered > 0 THEN
            RAISE EXCEPTION 'cannot drop endpoint "%" because it has undelivered messages', drop_endpoint.name
                USING ERRCODE = 'dependent_objects_still_exist',
                      DETAIL = format('%s message(s) are pending or in flight.', v_undelivered),
                      HINT = 'Wait for them to be delivered, or use force => true to move them to the dead letter queue.';
        END IF;
    END IF;

    -- One statement: every message of the endpoint leaves the outbox, and the
    -- undelivered ones arrive in the DLQ, in id order.
    WITH gone AS (
        DELETE FROM outbox.messages m
         WHERE m.endpoint = drop_endpoint.name
        RETURNING m.*
    )
    INSERT INTO dlq.dead_letters (message_id, endpoint, event_type, payload, headers,
                                  ordering_key, idempotency_key, reason_code, error_message,
                                  http_status, attempts, first_failed_at, message_created_at)
    SELECT g.id, g.endpoint, g.event_type, g.payload, g.headers,
           g.ordering_key, g.idempotency_key, 'ENDPOINT_DROPPED',
           'endpoint dropped' || coalesce(' (last delivery error: ' || g.last_error || ')', ''),
           g.last_http_status, g.attempts, g.first_failed_at, g.created_at
      FROM gone g
     WHERE g.status <> 'sent'
     ORDER BY g.id;

    DELETE FROM outbox.endpoints e WHERE e.name = drop_endpoint.name;  -- and its secret

    PERFORM outbox._request_wake();
END
$fn$;
COMMENT ON FUNCTION outbox.drop_endpoint(text, boolean) IS
    'drops an endpoint; with force => true its undelivered messages move to the DLQ (ENDPOINT_DROPPED)';

-- A paused endpoint keeps accepting messages but the worker delivers none of them.
CREATE FUNCTION outbox.pause_endpoint(name text)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF pause_endpoint.name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE outbox.endpoints e SET paused = true WHERE e.name = pause_endpoint.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', pause_endpoint.name
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._request_wake();
END
$fn$;
COMMENT ON FUNCTION outbox.pause_endpoint(text) IS
    'stops deliveries to an endpoint; enqueue still accepts messages';

CREATE FUNCTION outbox.resume_endpoint(name text)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    IF resume_endpoint.name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE outbox.endpoints e SET paused = false WHERE e.name = resume_endpoint.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', resume_endpoint.name
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._request_wake();   -- deliver what waited, at commit
END
$fn$;
COMMENT ON FUNCTION outbox.resume_endpoint(text) IS
    'resumes deliveries to a paused endpoint';

------------------------------------------------------------------------------------------
-- Send rights
------------------------------------------------------------------------------------------

-- Lets role (a role name, or 'public') enqueue to endpoint.  Granting twice is not an
-- error.  42704 for an unknown endpoint or role.
CREATE FUNCTION outbox.grant_send(endpoint text, role name)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    INSERT INTO outbox.endpoint_senders (endpoint, role)
    VALUES (outbox._sending_endpoint(grant_send.endpoint), outbox._sending_role(grant_send.role))
    ON CONFLICT DO NOTHING;
END
$fn$;
COMMENT ON FUNCTION outbox.grant_send(text, name) IS
    'lets a role (or public) enqueue to an endpoint';

-- Takes the right back.  Revoking what was not granted is not an error (as REVOKE).
CREATE FUNCTION outbox.revoke_send(endpoint text, role name)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    DELETE FROM outbox.endpoint_senders s
     WHERE s.endpoint = outbox._sending_endpoint(revoke_send.endpoint)
       AND s.role = outbox._sending_role(revoke_send.role);
END
$fn$;
COMMENT ON FUNCTION outbox.revoke_send(text, name) IS
    'takes back a role''s right to enqueue to an endpoint';

-- The endpoint argument of grant_send/revoke_send: must exist.
CREATE FUNCTION outbox._sending_endpoint(endpoint text)
    RETURNS text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF _sending_endpoint.endpoint IS NULL THEN
        RAISE EXCEPTION 'endpoint must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF NOT EXISTS (SELECT FROM outbox.endpoints e WHERE e.name = _sending_endpoint.endpoint) THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', _sending_endpoint.endpoint
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN _sending_endpoint.endpoint;
END
$fn$;

-- The role argument of grant_send/revoke_send: an existing role, or 'public' (0).
CREATE FUNCTION outbox._sending_role(role name)
    RETURNS regrole
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_oid oid;
BEGIN
    IF _sending_role.role IS NULL THEN
        RAISE EXCEPTION 'role must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF _sending_role.role = 'public' THEN
        RETURN 0::oid::regrole;
    END IF;
    SELECT r.oid INTO v_oid FROM pg_catalog.pg_roles r WHERE r.rolname = _sending_role.role;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'role "%" does not exist', _sending_role.role
            USING ERRCODE = 'undefined_object';
    END IF;
    RETURN v_oid::regrole;
END
$fn$;

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
CREATE FUNCTION outbox._enqueue(endpoint text,
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

    -- Backpressure: count no more than max_pending undelivered rows.
    IF v_max_pending IS NOT NULL
       AND (SELECT count(*)
              FROM (SELECT 1 FROM outbox.messages m
                     WHERE m.endpoint = _enqueue.endpoint AND m.status <> 'sent'
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
CREATE FUNCTION outbox.enqueue(endpoint text,
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

-- Deletes sent messages older than older_than, or than pg_outbox.sent_retention when
-- NULL ('0' = every sent message).  Returns how many were deleted.
CREATE FUNCTION outbox.purge(older_than interval DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_keep   interval;
    v_cutoff timestamptz;
    v_count  bigint;
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
    v_cutoff := now() - v_keep;

    DELETE FROM outbox.messages m
     WHERE m.status = 'sent'
       AND (m.sent_at <= v_cutoff OR m.sent_at IS NULL);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$fn$;
COMMENT ON FUNCTION outbox.purge(interval) IS
    'deletes sent messages older than older_than (default pg_outbox.sent_retention); returns the count';

------------------------------------------------------------------------------------------
-- Dead letters
------------------------------------------------------------------------------------------

-- The open dead letter with this id, locked FOR UPDATE for the caller's change; the
-- refusals shared by requeue and discard: NULL id 22004, unknown id 42704, already
-- requeued or discarded 55000.
CREATE FUNCTION dlq._lock_open(id bigint)
    RETURNS dlq.dead_letters
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    d dlq.dead_letters%ROWTYPE;
BEGIN
    IF _lock_open.id IS NULL THEN
        RAISE EXCEPTION 'dead letter id must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT * INTO d FROM dlq.dead_letters dl WHERE dl.id = _lock_open.id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'dead letter % does not exist', _lock_open.id
            USING ERRCODE = 'undefined_object';
    END IF;
    IF d.requeued_at IS NOT NULL THEN
        RAISE EXCEPTION 'dead letter % has already been requeued', _lock_open.id
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = format('It was requeued as message %s.', d.requeued_as);
    END IF;
    IF d.discarded_at IS NOT NULL THEN
        RAISE EXCEPTION 'dead letter % has already been discarded', _lock_open.id
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    RETURN d;
END
$fn$;

-- Puts a dead letter back in the outbox as a new message (new id, attempts 0, due now),
-- optionally with a corrected payload.  It keeps the original webhook-id: the new
-- message's idempotency_key is the original key, or msg_<original id> when it had none,
-- so a receiver that saw an earlier attempt can recognise it.  A requeue bypasses the
-- endpoint's max_pending (it is an operator's decision).
-- Errors: NULL id 22004; unknown id 42704 (undefined_object, as for unknown endpoints);
-- requeued or discarded already 55000; endpoint gone 42704; a message with the same
-- idempotency key still in the outbox 23505.
CREATE FUNCTION dlq.requeue(id bigint, payload jsonb DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    d     dlq.dead_letters%ROWTYPE;
    v_key text;
    v_id  bigint;
BEGIN
    d := dlq._lock_open(requeue.id);

    -- KEY SHARE: a concurrent drop_endpoint waits, so the new message is never orphaned.
    PERFORM 1 FROM outbox.endpoints e WHERE e.name = d.endpoint FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" of dead letter % does not exist', d.endpoint, requeue.id
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create the endpoint again, or discard the dead letter.';
    END IF;

    v_key := coalesce(d.idempotency_key, 'msg_' || d.message_id);
    INSERT INTO outbox.messages AS m (endpoint, event_type, payload, headers, ordering_key,
                                      idempotency_key)
    VALUES (d.endpoint, d.event_type, coalesce(requeue.payload, d.payload), d.headers,
            d.ordering_key, v_key)
    ON CONFLICT (endpoint, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING m.id INTO v_id;
    IF v_id IS NULL THEN
        RAISE EXCEPTION 'cannot requeue dead letter %: a message with idempotency key "%" is still in the outbox',
                        requeue.id, v_key
            USING ERRCODE = 'unique_violation',
                  HINT = 'Wait until that message is delivered and purged, or discard this dead letter.';
    END IF;

    UPDATE dlq.dead_letters dl
       SET requeued_at = now(), requeued_as = v_id
     WHERE dl.id = requeue.id;
    RETURN v_id;
END
$fn$;
COMMENT ON FUNCTION dlq.requeue(bigint, jsonb) IS
    'puts an open dead letter back in the outbox (optionally with a corrected payload); returns the new message id';

-- Requeues every open dead letter matching all the filters that are not NULL
-- (since: dead_at >= since), in id order, all or nothing; returns how many.
CREATE FUNCTION dlq.requeue_all(endpoint text DEFAULT NULL,
                                reason_code text DEFAULT NULL,
                                since timestamptz DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    r         record;
    v_count   bigint := 0;
    v_skipped bigint := 0;
    v_first   text;
BEGIN
    IF requeue_all.reason_code IS NOT NULL
       AND requeue_all.reason_code NOT IN ('HTTP_CLIENT_ERROR', 'PAYLOAD_TOO_LARGE', 'RETRY_EXHAUSTED',
                                           'ENDPOINT_DROPPED', 'INVALID_MESSAGE', 'EGRESS_DENIED') THEN
        RAISE EXCEPTION 'unknown reason_code "%"', requeue_all.reason_code
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use one of HTTP_CLIENT_ERROR, PAYLOAD_TOO_LARGE, RETRY_EXHAUSTED, ENDPOINT_DROPPED, INVALID_MESSAGE, EGRESS_DENIED.';
    END IF;

    FOR r IN
        SELECT dl.id
          FROM dlq.dead_letters dl
         WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
           AND (requeue_all.endpoint IS NULL OR dl.endpoint = requeue_all.endpoint)
           AND (requeue_all.reason_code IS NULL OR dl.reason_code = requeue_all.reason_code)
           AND (requeue_all.since IS NULL OR dl.dead_at >= requeue_all.since)
         ORDER BY dl.id
           FOR UPDATE
    LOOP
        -- One that cannot be requeued now (its endpoint is gone, its idempotency key is
        -- back in the outbox) stays open and is counted; the redrive goes on.
        BEGIN
            PERFORM dlq.requeue(r.id);
            v_count := v_count + 1;
        EXCEPTION WHEN undefined_object OR unique_violation THEN
            v_skipped := v_skipped + 1;
            v_first := coalesce(v_first, format('dead letter %s: %s', r.id, SQLERRM));
        END;
    END LOOP;
    IF v_skipped > 0 THEN
        RAISE WARNING 'requeue_all requeued %, skipped % that cannot be requeued now', v_count, v_skipped
            USING DETAIL = 'The first: ' || v_first || '.',
                  HINT = 'They stay open: fix the cause, then requeue or discard them.';
    END IF;
    RETURN v_count;
END
$fn$;
COMMENT ON FUNCTION dlq.requeue_all(text, text, timestamptz) IS
    'requeues the open dead letters matching every filter given; returns how many; skips (and counts) the ones it cannot requeue now';

-- Marks an open dead letter as handled without sending it; the row stays as evidence.
CREATE FUNCTION dlq.discard(id bigint, note text DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    d dlq.dead_letters%ROWTYPE;
BEGIN
    d := dlq._lock_open(discard.id);

    UPDATE dlq.dead_letters dl
       SET discarded_at = now(), note = coalesce(discard.note, dl.note)
     WHERE dl.id = discard.id;
END
$fn$;
COMMENT ON FUNCTION dlq.discard(bigint, text) IS
    'marks an open dead letter as handled without sending it';

------------------------------------------------------------------------------------------
-- Observability
------------------------------------------------------------------------------------------

-- Open dead letters by endpoint, reason and event type.
CREATE VIEW dlq.summary AS
SELECT dl.endpoint,
       dl.reason_code,
       dl.event_type,
       count(*)        AS count,
       min(dl.dead_at) AS oldest,
       max(dl.dead_at) AS newest
  FROM dlq.dead_letters dl
 WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
 GROUP BY dl.endpoint, dl.reason_code, dl.event_type;
COMMENT ON VIEW dlq.summary IS 'open dead letters by endpoint, reason_code and event_type';

-- Per endpoint: messages by status, open dead letters, the age of the oldest message
-- waiting for delivery, and the endpoint's state.  The age is counted from when the
-- message first became due: its created_at, or its deliver_at for a scheduled message
-- not yet attempted (next_attempt_at while attempts = 0); a message whose deliver_at is
-- still in the future is not waiting yet.  In-flight messages count as waiting.
CREATE VIEW outbox.endpoint_stats AS
SELECT e.name                              AS endpoint,
       coalesce(m.pending, 0)              AS pending,
       coalesce(m.in_flight, 0)            AS in_flight,
       coalesce(m.sent, 0)                 AS sent,
       coalesce(d.dead, 0)                 AS dead,
       now() - m.oldest_due                AS oldest_pending_age,
       e.paused,
       e.breaker_state,
       e.breaker_failures,
       e.breaker_open_until
  FROM outbox.endpoints e
  LEFT JOIN (SELECT mm.endpoint,
                    count(*) FILTER (WHERE mm.status = 'pending')   AS pending,
                    count(*) FILTER (WHERE mm.status = 'in_flight') AS in_flight,
                    count(*) FILTER (WHERE mm.status = 'sent')      AS sent,
                    min(CASE WHEN mm.attempts = 0 THEN mm.next_attempt_at ELSE mm.created_at END)
                        FILTER (WHERE mm.status <> 'sent'
                                  AND (mm.attempts > 0 OR mm.next_attempt_at <= now())) AS oldest_due
               FROM outbox.messages mm
              GROUP BY mm.endpoint) m ON m.endpoint = e.name
  LEFT JOIN (SELECT dl.endpoint, count(*) AS dead
               FROM dlq.dead_letters dl
              WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
              GROUP BY dl.endpoint) d ON d.endpoint = e.name;
COMMENT ON VIEW outbox.endpoint_stats IS
    'per endpoint: pending, in_flight, sent (retained), dead (open), oldest pending age, paused, circuit breaker';

-- A Prometheus label value: backslash, double quote and line feed escaped.
CREATE FUNCTION outbox._prom_label(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN replace(replace(replace(value, E'\\', E'\\\\'), '"', E'\\"'), E'\n', E'\\n');

-- Prometheus text exposition format (version 0.0.4).  Every endpoint gets every series
-- of the gauges, zeros included, so an alert never sees a series vanish.  Series of
-- endpoints that no longer exist appear while they still have messages, dead letters or
-- counters.  pg_outbox_circuit_open is 1 while the breaker is open or half-open.
-- Never contains a secret.
CREATE FUNCTION outbox.metrics()
    RETURNS text
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_out text := '';
    v_family text;
BEGIN
    -- pg_outbox_messages{endpoint,status}
    SELECT coalesce(string_agg(format('pg_outbox_messages{endpoint="%s",status="%s"} %s',
                                      outbox._prom_label(n.endpoint), st.status,
                                      coalesce(c.n, 0)),
                               E'\n' ORDER BY n.endpoint, st.ord), '')
      INTO v_family
      FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
            UNION
            SELECT DISTINCT m.endpoint FROM outbox.messages m) n
     CROSS JOIN (VALUES (1, 'pending'), (2, 'in_flight'), (3, 'sent')) st(ord, status)
      LEFT JOIN (SELECT m.endpoint, m.status, count(*) AS n
                   FROM outbox.messages m GROUP BY m.endpoint, m.status) c
             ON c.endpoint = n.endpoint AND c.status = st.status;
    v_out := v_out
          || E'# HELP pg_outbox_messages Messages in the outbox by endpoint and status.\n'
          || E'# TYPE pg_outbox_messages gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_oldest_pending_age_seconds{endpoint}
    SELECT coalesce(string_agg(format('pg_outbox_oldest_pending_age_seconds{endpoint="%s"} %s',
                                      outbox._prom_label(s.endpoint),
                                      coalesce(round(extract(epoch FROM s.oldest_pending_age), 3), 0)),
                               E'\n' ORDER BY s.endpoint), '')
      INTO v_family
      FROM outbox.endpoint_stats s;
    v_out := v_out
          || E'# HELP pg_outbox_oldest_pending_age_seconds Age of the oldest message waiting for delivery (0 if none).\n'
          || E'# TYPE pg_outbox_oldest_pending_age_seconds gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_deliveries_total{endpoint,result}
    SELECT coalesce(string_agg(format('pg_outbox_deliveries_total{endpoint="%s",result="%s"} %s',
                                      outbox._prom_label(n.endpoint), r.result,
                                      coalesce(c.count, 0)),
                               E'\n' ORDER BY n.endpoint, r.ord), '')
      INTO v_family
      FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
            UNION
            SELECT dc.endpoint FROM outbox._delivery_counters() dc) n
     CROSS JOIN (VALUES (1, 'sent'), (2, 'retry'), (3, 'dead')) r(ord, result)
      LEFT JOIN (SELECT dc.endpoint, dc.result, sum(dc.count) AS count
                   FROM outbox._delivery_counters() dc GROUP BY dc.endpoint, dc.result) c
             ON c.endpoint = n.endpoint AND c.result = r.result;
    v_out := v_out
          || E'# HELP pg_outbox_deliveries_total Delivery attempts by result since the worker started.\n'
          || E'# TYPE pg_outbox_deliveries_total counter\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_dead_letters{endpoint,reason_code}
    SELECT coalesce(string_agg(format('pg_outbox_dead_letters{endpoint="%s",reason_code="%s"} %s',
                                      outbox._prom_label(n.endpoint), rc.reason_code,
                                      coalesce(c.n, 0)),
                               E'\n' ORDER BY n.endpoint, rc.reason_code), '')
      INTO v_family
      FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
            UNION
            SELECT DISTINCT dl.endpoint FROM dlq.dead_letters dl
             WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL) n
     CROSS JOIN (VALUES ('EGRESS_DENIED'), ('ENDPOINT_DROPPED'), ('HTTP_CLIENT_ERROR'), ('INVALID_MESSAGE'),
                        ('PAYLOAD_TOO_LARGE'), ('RETRY_EXHAUSTED')) rc(reason_code)
      LEFT JOIN (SELECT dl.endpoint, dl.reason_code, count(*) AS n
                   FROM dlq.dead_letters dl
                  WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
                  GROUP BY dl.endpoint, dl.reason_code) c
             ON c.endpoint = n.endpoint AND c.reason_code = rc.reason_code;
    v_out := v_out
          || E'# HELP pg_outbox_dead_letters Open dead letters (neither requeued nor discarded).\n'
          || E'# TYPE pg_outbox_dead_letters gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_dead_letter_oldest_age_seconds{endpoint}
    SELECT coalesce(string_agg(format('pg_outbox_dead_letter_oldest_age_seconds{endpoint="%s"} %s',
                                      outbox._prom_label(n.endpoint),
                                      coalesce(round(extract(epoch FROM now() - c.oldest), 3), 0)),
                               E'\n' ORDER BY n.endpoint), '')
      INTO v_family
      FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
            UNION
            SELECT DISTINCT dl.endpoint FROM dlq.dead_letters dl
             WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL) n
      LEFT JOIN (SELECT dl.endpoint, min(dl.dead_at) AS oldest
                   FROM dlq.dead_letters dl
                  WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
                  GROUP BY dl.endpoint) c
             ON c.endpoint = n.endpoint;
    v_out := v_out
          || E'# HELP pg_outbox_dead_letter_oldest_age_seconds Age of the oldest open dead letter (0 if none).\n'
          || E'# TYPE pg_outbox_dead_letter_oldest_age_seconds gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_circuit_open{endpoint} and pg_outbox_endpoint_paused{endpoint}
    SELECT coalesce(string_agg(format('pg_outbox_circuit_open{endpoint="%s"} %s',
                                      outbox._prom_label(e.name),
                                      CASE WHEN e.breaker_state = 'closed' THEN 0 ELSE 1 END),
                               E'\n' ORDER BY e.name), '')
      INTO v_family
      FROM outbox.endpoints e;
    v_out := v_out
          || E'# HELP pg_outbox_circuit_open 1 while the endpoint''s circuit breaker is open or half-open.\n'
          || E'# TYPE pg_outbox_circuit_open gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    SELECT coalesce(string_agg(format('pg_outbox_endpoint_paused{endpoint="%s"} %s',
                                      outbox._prom_label(e.name),
                                      CASE WHEN e.paused THEN 1 ELSE 0 END),
                               E'\n' ORDER BY e.name), '')
      INTO v_family
      FROM outbox.endpoints e;
    v_out := v_out
          || E'# HELP pg_outbox_endpoint_paused 1 while the endpoint is paused.\n'
          || E'# TYPE pg_outbox_endpoint_paused gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    RETURN v_out;
END
$fn$;
COMMENT ON FUNCTION outbox.metrics() IS 'pg_outbox metrics in the Prometheus text exposition format';

------------------------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC.
------------------------------------------------------------------------------------------

REVOKE ALL ON SCHEMA outbox, dlq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA outbox, dlq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA outbox, dlq FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox, dlq FROM PUBLIC;

-- The grants a deployment needs (documented in the README; the regress suite applies
-- exactly these to its roles).  Replace producer/operator with your roles.
--
--   -- producer: enqueues in its own transactions, to the endpoints it was granted;
--   -- reads nothing, creates nothing.
--   GRANT USAGE ON SCHEMA outbox TO producer;
--   GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) TO producer;
--   SELECT outbox.grant_send('billing', 'producer');     -- per endpoint
--
--   -- operator: manages endpoints, inspects and redrives dead letters, reads stats and
--   -- metrics.  Never the secrets (outbox.endpoint_secrets stays owner-only).
--   GRANT USAGE ON SCHEMA outbox, dlq TO operator;
--   GRANT EXECUTE ON FUNCTION
--       outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint),
--       outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint),
--       outbox.drop_endpoint(text, boolean),
--       outbox.pause_endpoint(text),
--       outbox.resume_endpoint(text),
--       outbox.purge(interval),
--       outbox.metrics(),
--       outbox.worker_status(),
--       outbox.grant_send(text, name),
--       outbox.revoke_send(text, name),
--       dlq.requeue(bigint, jsonb),
--       dlq.requeue_all(text, text, timestamptz),
--       dlq.discard(bigint, text)
--     TO operator;
--   GRANT SELECT ON outbox.endpoints, outbox.endpoint_senders, outbox.messages,
--                   outbox.endpoint_stats, dlq.dead_letters, dlq.summary
--     TO operator;
