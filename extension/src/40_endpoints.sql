------------------------------------------------------------------------------------------
-- Endpoints
------------------------------------------------------------------------------------------

-- Validation shared by create_endpoint and alter_endpoint.  Not SECURITY DEFINER and
-- not granted: only the functions below call it.
CREATE OR REPLACE FUNCTION outbox._check_endpoint_options(headers jsonb, secret text, timeout_ms int,
                                               max_attempts int, max_pending bigint,
                                               concurrency int, rate_limit int)
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
    IF _check_endpoint_options.timeout_ms > 300000 THEN
        RAISE EXCEPTION 'timeout_ms must be at most 300000 (5 minutes)'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('timeout_ms is %s.', _check_endpoint_options.timeout_ms),
                  HINT = 'A request that may run longer keeps its message claimed for as long.';
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
    IF _check_endpoint_options.concurrency <= 0 THEN
        RAISE EXCEPTION 'concurrency must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('concurrency is %s.', _check_endpoint_options.concurrency),
                  HINT = 'Pass NULL to use pg_outbox.endpoint_concurrency.';
    END IF;
    IF _check_endpoint_options.rate_limit <= 0 THEN
        RAISE EXCEPTION 'rate_limit must be greater than zero'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('rate_limit is %s.', _check_endpoint_options.rate_limit),
                  HINT = 'Pass NULL for no limit.';
    END IF;
END
$fn$;

-- The request's format, the CloudEvents source and the batch size (docs/delivery.md,
-- CloudEvents and Batches), for create_endpoint and alter_endpoint: `notify` says the
-- endpoint delivers by NOTIFY, whose envelope has no other format and carries one
-- message.  NULL arguments are not checked (alter_endpoint leaves them as they are).
CREATE OR REPLACE FUNCTION outbox._check_endpoint_format(no_requests boolean, format text, source text,
                                              batch_size int)
    RETURNS void
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF _check_endpoint_format.format NOT IN ('standard-webhooks', 'cloudevents-binary',
                                             'cloudevents-structured') THEN
        RAISE EXCEPTION 'unknown format "%"', _check_endpoint_format.format
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use standard-webhooks, cloudevents-binary or cloudevents-structured.';
    END IF;
    IF _check_endpoint_format.batch_size < 1 OR _check_endpoint_format.batch_size > 1000 THEN
        RAISE EXCEPTION 'batch_size must be between 1 and 1000'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('batch_size is %s.', _check_endpoint_format.batch_size);
    END IF;
    -- '' is accepted by alter_endpoint to go back to the default source.
    IF _check_endpoint_format.source <> ''
       AND (char_length(_check_endpoint_format.source) > 1000
            OR _check_endpoint_format.source ~ '[[:cntrl:]]') THEN
        RAISE EXCEPTION 'source must be at most 1000 characters, without control characters'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A URI-reference, such as /billing or https://example.com/billing.';
    END IF;
    IF _check_endpoint_format.no_requests
       AND (_check_endpoint_format.format <> 'standard-webhooks' OR _check_endpoint_format.source <> ''
            OR _check_endpoint_format.batch_size <> 1) THEN
        RAISE EXCEPTION 'format, source and batch_size can only be set on a url endpoint'
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'A NOTIFY carries one message in its own envelope, and readers of a pull endpoint take theirs with outbox.read.';
    END IF;
END
$fn$;

CREATE OR REPLACE FUNCTION outbox.create_endpoint(name text,
                                       url text DEFAULT NULL,
                                       channel text DEFAULT NULL,
                                       headers jsonb DEFAULT '{}',
                                       secret text DEFAULT NULL,
                                       timeout_ms int DEFAULT NULL,
                                       max_attempts int DEFAULT NULL,
                                       ordered boolean DEFAULT false,
                                       max_pending bigint DEFAULT NULL,
                                       concurrency int DEFAULT NULL,
                                       rate_limit int DEFAULT NULL,
                                       pull boolean DEFAULT false,
                                       format text DEFAULT 'standard-webhooks',
                                       source text DEFAULT NULL,
                                       batch_size int DEFAULT 1)
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

    IF create_endpoint.pull IS NULL THEN
        RAISE EXCEPTION 'pull must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF num_nonnulls(create_endpoint.url, create_endpoint.channel, nullif(create_endpoint.pull, false)) <> 1 THEN
        RAISE EXCEPTION 'exactly one of url, channel or pull => true must be given'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Give url for HTTP delivery, channel for NOTIFY, or pull => true for readers (outbox.read).';
    END IF;
    IF create_endpoint.pull THEN
        -- Pull endpoints (docs/delivery.md, Pull endpoints): nothing is sent, so nothing is signed.
        IF create_endpoint.secret IS NOT NULL THEN
            RAISE EXCEPTION 'a secret can only be set on a url endpoint'
                USING ERRCODE = 'invalid_parameter_value',
                      DETAIL = 'Readers of a pull endpoint take its messages from the database.';
        END IF;
    ELSIF create_endpoint.url IS NOT NULL THEN
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
                                           create_endpoint.max_pending, create_endpoint.concurrency,
                                           create_endpoint.rate_limit);
    IF create_endpoint.source = '' THEN
        RAISE EXCEPTION 'source must not be empty'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Pass NULL for the default, /pg_outbox/<database>/<endpoint>.';
    END IF;
    PERFORM outbox._check_endpoint_format(create_endpoint.channel IS NOT NULL OR create_endpoint.pull,
                                          coalesce(create_endpoint.format, 'standard-webhooks'),
                                          coalesce(create_endpoint.source, ''),
                                          coalesce(create_endpoint.batch_size, 1));

    INSERT INTO outbox.endpoints (name, url, channel, headers, timeout_ms, max_attempts,
                                  ordered, max_pending, concurrency, rate_limit, pull, format, source,
                                  batch_size)
    VALUES (create_endpoint.name, create_endpoint.url, create_endpoint.channel,
            coalesce(create_endpoint.headers, '{}'), create_endpoint.timeout_ms,
            create_endpoint.max_attempts, coalesce(create_endpoint.ordered, false),
            create_endpoint.max_pending, create_endpoint.concurrency, create_endpoint.rate_limit,
            create_endpoint.pull, coalesce(create_endpoint.format, 'standard-webhooks'), create_endpoint.source,
            coalesce(create_endpoint.batch_size, 1))
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
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int, boolean, text, text, int) IS
    'creates an endpoint: exactly one of url (http/https), channel (NOTIFY) or pull => true (outbox.read); NULL options use the GUCs';

-- Changes only the arguments that are not NULL.  secret => '' removes the secret (the
-- endpoint's deliveries are no longer signed); any other secret replaces it, and the
-- secret a rotation still signs with, at once (outbox.rotate_secret keeps both).  An
-- endpoint cannot change between url and channel delivery: drop and create it.
-- timeout_ms, max_attempts, max_pending, concurrency and rate_limit cannot be set back to
-- NULL here; source => '' goes back to the default source.  A CloudEvents format is
-- refused while the endpoint has queued messages without an event type (they could not
-- be sent in it: docs/delivery.md, CloudEvents).
CREATE OR REPLACE FUNCTION outbox.alter_endpoint(name text,
                                      url text DEFAULT NULL,
                                      headers jsonb DEFAULT NULL,
                                      secret text DEFAULT NULL,
                                      timeout_ms int DEFAULT NULL,
                                      max_attempts int DEFAULT NULL,
                                      ordered boolean DEFAULT NULL,
                                      max_pending bigint DEFAULT NULL,
                                      concurrency int DEFAULT NULL,
                                      rate_limit int DEFAULT NULL,
                                      format text DEFAULT NULL,
                                      source text DEFAULT NULL,
                                      batch_size int DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_channel text;
    v_ordered boolean;
    v_pull boolean;
    v_untyped bigint;
BEGIN
    IF alter_endpoint.name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT e.channel, e.ordered, e.pull INTO v_channel, v_ordered, v_pull
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
    IF v_pull AND (alter_endpoint.url IS NOT NULL OR alter_endpoint.secret IS NOT NULL) THEN
        RAISE EXCEPTION 'endpoint "%" is a pull endpoint and cannot be given a url or a secret', alter_endpoint.name
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'pull is set at creation only: drop the endpoint and create it again with a url.';
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
                                           alter_endpoint.max_pending, alter_endpoint.concurrency,
                                           alter_endpoint.rate_limit);
    PERFORM outbox._check_endpoint_format(v_channel IS NOT NULL OR v_pull, alter_endpoint.format,
                                          alter_endpoint.source, alter_endpoint.batch_size);
    IF alter_endpoint.format LIKE 'cloudevents-%' THEN
        SELECT count(*) INTO v_untyped
          FROM outbox.messages m
         WHERE m.endpoint = alter_endpoint.name AND m.event_type IS NULL;
        IF v_untyped > 0 THEN
            RAISE EXCEPTION 'endpoint "%" has % queued message(s) without an event type', alter_endpoint.name,
                            v_untyped
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = 'A CloudEvents request needs the event type (ce-type).',
                      HINT = 'Change the format once they are delivered.';
        END IF;
    END IF;

    UPDATE outbox.endpoints e
       SET url          = coalesce(alter_endpoint.url, e.url),
           headers      = coalesce(alter_endpoint.headers, e.headers),
           timeout_ms   = coalesce(alter_endpoint.timeout_ms, e.timeout_ms),
           max_attempts = coalesce(alter_endpoint.max_attempts, e.max_attempts),
           ordered      = coalesce(alter_endpoint.ordered, e.ordered),
           max_pending  = coalesce(alter_endpoint.max_pending, e.max_pending),
           concurrency  = coalesce(alter_endpoint.concurrency, e.concurrency),
           rate_limit   = coalesce(alter_endpoint.rate_limit, e.rate_limit),
           format       = coalesce(alter_endpoint.format, e.format),
           source       = CASE WHEN alter_endpoint.source = '' THEN NULL
                               ELSE coalesce(alter_endpoint.source, e.source) END,
           batch_size   = coalesce(alter_endpoint.batch_size, e.batch_size)
     WHERE e.name = alter_endpoint.name;
    IF alter_endpoint.ordered <> v_ordered THEN
        -- Replayed messages still waiting for the worker's move are queued first: moved
        -- later, a keyed one would take its place behind messages committed after this
        -- change (an ordered endpoint's replays queue their messages themselves:
        -- extension/src/65_replay.sql).
        IF alter_endpoint.ordered THEN
            PERFORM outbox._replays_move(NULL, alter_endpoint.name);
        END IF;
        PERFORM outbox._order_queued(alter_endpoint.name, alter_endpoint.ordered);
    END IF;

    -- A new secret replaces every secret of the endpoint at once, a rotation's old one
    -- too; outbox.rotate_secret is the way without an outage.
    IF alter_endpoint.secret IS NOT NULL THEN
        DELETE FROM outbox.endpoint_secrets s WHERE s.endpoint = alter_endpoint.name;
    END IF;
    IF alter_endpoint.secret <> '' THEN
        INSERT INTO outbox.endpoint_secrets (endpoint, secret)
        VALUES (alter_endpoint.name, alter_endpoint.secret);
    END IF;

    PERFORM outbox._request_wake();
END
$fn$;
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int, text, text, int) IS
    'changes the arguments that are not NULL; secret => '''' removes the secret';

-- The queued messages of an endpoint that becomes ordered (or stops being so): ordered,
-- each key's first message by id stays its head and the others wait behind it in id
-- order, as the endpoint's ordering had it before 0.3.0 (the update calls this for every
-- ordered endpoint); unordered, every message is a head again.  A message a producer
-- commits while the endpoint changes may make a second head of its key for a while: the
-- key goes back to one head as those leave (outbox._next_in_order promotes only when no
-- head is left).
CREATE OR REPLACE FUNCTION outbox._order_queued(endpoint text, ordered boolean)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_lock int;
BEGIN
    IF NOT _order_queued.ordered THEN
        UPDATE outbox.messages m SET ordering_seq = NULL
         WHERE m.endpoint = _order_queued.endpoint AND m.ordering_key IS NOT NULL AND m.ordering_seq IS NOT NULL;
        RETURN;
    END IF;
    -- The keys' locks first, lowest first, as everyone takes them (src/pg/ordering/ordering.cpp;
    -- 1868724335 is core::kOrderingLockSpace): no head leaves meanwhile without its next
    -- message seeing this.  The UPDATE below then reads what committed before.
    FOR v_lock IN SELECT DISTINCT outbox._ordering_lock(m.endpoint, m.ordering_key)
                    FROM outbox.messages m
                   WHERE m.endpoint = _order_queued.endpoint AND m.ordering_key IS NOT NULL
                   ORDER BY 1
    LOOP
        PERFORM pg_catalog.pg_advisory_xact_lock(1868724335, v_lock);
    END LOOP;
    -- nextval is evaluated after the sort (volatile target entries are), so the
    -- numbers follow the ids.
    UPDATE outbox.messages m SET ordering_seq = f.seq
      FROM (SELECT q.id, CASE WHEN q.n > 1 THEN nextval('outbox.commit_order'::regclass) END AS seq
              FROM (SELECT x.id, row_number() OVER (PARTITION BY x.ordering_key ORDER BY x.id) AS n
                      FROM outbox.messages x
                     WHERE x.endpoint = _order_queued.endpoint AND x.ordering_key IS NOT NULL) q
             ORDER BY q.id) f
     WHERE m.id = f.id AND m.ordering_seq IS DISTINCT FROM f.seq;
END
$fn$;

-- Refuses while the endpoint has undelivered (pending or in-flight) messages.  With
-- force they are moved to the DLQ as ENDPOINT_DROPPED, and then the endpoint and its
-- secret go.  Its delivered messages stay in outbox.history until retention.
CREATE OR REPLACE FUNCTION outbox.drop_endpoint(name text, force boolean DEFAULT false)
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
        SELECT (SELECT count(*) FROM outbox.messages m WHERE m.endpoint = drop_endpoint.name)
             + (SELECT count(*) FROM outbox.replay_queue r WHERE r.endpoint = drop_endpoint.name)
          INTO v_undelivered;
        IF v_undelivered > 0 THEN
            RAISE EXCEPTION 'cannot drop endpoint "%" because it has undelivered messages', drop_endpoint.name
                USING ERRCODE = 'dependent_objects_still_exist',
                      DETAIL = format('%s message(s) are pending or in flight.', v_undelivered),
                      HINT = 'Wait for them to be delivered, or use force => true to move them to the dead letter queue.';
        END IF;
    END IF;

    -- One statement: every message of the endpoint leaves the outbox and arrives in
    -- the DLQ, in id order.
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
     ORDER BY g.id;

    -- Replayed messages not yet moved into the queue are copies of delivered ones (the
    -- history keeps them): they go without a dead letter.
    DELETE FROM outbox.replay_queue r WHERE r.endpoint = drop_endpoint.name;
    DELETE FROM outbox.endpoints e WHERE e.name = drop_endpoint.name;  -- and its secret

    PERFORM outbox._request_wake();
END
$fn$;
COMMENT ON FUNCTION outbox.drop_endpoint(text, boolean) IS
    'drops an endpoint; with force => true its undelivered messages move to the DLQ (ENDPOINT_DROPPED)';

-- A paused endpoint keeps accepting messages but the worker delivers none of them.  A
-- reason the worker gave when it paused the endpoint (paused_reason) stays.
CREATE OR REPLACE FUNCTION outbox.pause_endpoint(name text)
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

CREATE OR REPLACE FUNCTION outbox.resume_endpoint(name text)
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
    -- The worker's reason goes, and so do the failures before now: the endpoint is judged
    -- afresh (docs/operations.md, Endpoints that retire themselves).  resumed_at is the
    -- moment that lets a worker that decided to pause the endpoint from failures seen
    -- before it see that it may no longer (clock time: a failure seen while this
    -- transaction runs is after the resume).
    UPDATE outbox.endpoints e
       SET paused = false, paused_reason = NULL, failing_since = NULL, resumed_at = clock_timestamp()
     WHERE e.name = resume_endpoint.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" does not exist', resume_endpoint.name
            USING ERRCODE = 'undefined_object';
    END IF;
    PERFORM outbox._request_wake();   -- deliver what waited, at commit
END
$fn$;
COMMENT ON FUNCTION outbox.resume_endpoint(text) IS
    'resumes deliveries to a paused endpoint, clearing the reason the worker paused it for';

------------------------------------------------------------------------------------------
-- Send rights
------------------------------------------------------------------------------------------

-- Lets role (a role name, or 'public') enqueue to endpoint.  Granting twice is not an
-- error.  42704 for an unknown endpoint or role.
CREATE OR REPLACE FUNCTION outbox.grant_send(endpoint text, role name)
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
CREATE OR REPLACE FUNCTION outbox.revoke_send(endpoint text, role name)
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
CREATE OR REPLACE FUNCTION outbox._sending_endpoint(endpoint text)
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
CREATE OR REPLACE FUNCTION outbox._sending_role(role name)
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

