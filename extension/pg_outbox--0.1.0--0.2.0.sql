-- pg_outbox 0.1.0 -> 0.2.0 (ALTER EXTENSION pg_outbox UPDATE).
--
-- Changes:
--   * outbox.worker_status() gains config_loaded_at: when the worker last read its
--     configuration.  A function's result columns cannot be changed in place, so it is
--     dropped and created again, and every role that could execute it still can.
--   * pg_outbox.dlq_retention deletes only handled (requeued or discarded) dead letters,
--     counted from when they were handled; an index serves that purge.
--   * The egress policy (pg_outbox.egress_allow / egress_deny): create_endpoint and
--     alter_endpoint refuse a host it denies; dead letters may have reason_code
--     EGRESS_DENIED (it refused the address at connect time).
--   * dlq.requeue_all skips (and counts, in a WARNING) a dead letter it cannot requeue
--     instead of failing whole.
--   * Send rights per endpoint (outbox.grant_send / outbox.revoke_send).  So that an
--     installation keeps working, every role that could execute outbox.enqueue before
--     the update (PUBLIC included, if it was granted) is granted every endpoint that
--     exists at the update; endpoints created afterwards need their own grants.
--     outbox.enqueue becomes a C function that takes its caller's identity (CREATE OR
--     REPLACE keeps its grants) and runs the new outbox._enqueue as the owner.
--
-- Every message, endpoint and dead letter stays where it is: no row is touched.  The 0.2.0 library also serves a database still on 0.1.0 (worker_status()
-- then shows its first nine columns), so the new library can be installed and the
-- server restarted before the update is run.

\echo Use "ALTER EXTENSION pg_outbox UPDATE TO '0.2.0'" to load this file. \quit

DO $upgrade$
DECLARE
    grants text[];
    g text;
BEGIN
    SELECT pg_catalog.array_agg(pg_catalog.format(
               'GRANT EXECUTE ON FUNCTION outbox.worker_status() TO %s%s',
               a.grantee::pg_catalog.regrole,
               CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END))
      INTO grants
      FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
     WHERE p.oid = 'outbox.worker_status()'::pg_catalog.regprocedure
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner AND a.grantee <> 0;

    DROP FUNCTION outbox.worker_status();
    -- config_loaded_at: when the configuration the worker runs with was read (its
    -- own re-read after a SIGHUP, or the server's last load before the worker
    -- started; the worker's pg_conf_load_time()).  A change made with ALTER SYSTEM +
    -- pg_reload_conf() has reached the worker once this is later than the moment
    -- ALTER SYSTEM returned.
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
    REVOKE ALL ON FUNCTION outbox.worker_status() FROM PUBLIC;

    FOREACH g IN ARRAY COALESCE(grants, '{}') LOOP
        EXECUTE g;
    END LOOP;
END
$upgrade$;

-- Retention (pg_outbox.dlq_retention) of handled dead letters, by when they were
-- handled.  Open ones are never deleted automatically, so they are not in it.
CREATE INDEX dead_letters_handled_idx ON dlq.dead_letters ((COALESCE(requeued_at, discarded_at)))
    WHERE requeued_at IS NOT NULL OR discarded_at IS NOT NULL;

-- Send rights.
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
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_senders', '');

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

-- New functions are executable by PUBLIC until told otherwise.
REVOKE ALL ON outbox.endpoint_senders FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION outbox.grant_send(text, name), outbox.revoke_send(text, name),
    outbox._sending_endpoint(text), outbox._sending_role(name),
    outbox._enqueue(text, jsonb, text, jsonb, text, text, timestamptz, regrole, boolean) FROM PUBLIC;

-- Rights carried over: whoever could enqueue before may still send to every endpoint
-- that exists now.
INSERT INTO outbox.endpoint_senders (endpoint, role)
SELECT e.name, a.grantee::pg_catalog.regrole
  FROM outbox.endpoints e,
       pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
 WHERE p.oid = 'outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz)'::pg_catalog.regprocedure
   AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
ON CONFLICT DO NOTHING;

-- The egress policy's dead letters.
ALTER TABLE dlq.dead_letters
    DROP CONSTRAINT dead_letters_reason_code_check,
    ADD CONSTRAINT dead_letters_reason_code_check
        CHECK (reason_code IN ('HTTP_CLIENT_ERROR', 'PAYLOAD_TOO_LARGE', 'RETRY_EXHAUSTED',
                               'ENDPOINT_DROPPED', 'INVALID_MESSAGE', 'EGRESS_DENIED'));

-- Requeues every open dead letter matching all the filters that are not NULL
-- (since: dead_at >= since), in id order, all or nothing; returns how many.
CREATE OR REPLACE FUNCTION dlq.requeue_all(endpoint text DEFAULT NULL,
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

-- Prometheus text exposition format (version 0.0.4).  Every endpoint gets every series
-- of the gauges, zeros included, so an alert never sees a series vanish.  Series of
-- endpoints that no longer exist appear while they still have messages, dead letters or
-- counters.  pg_outbox_circuit_open is 1 while the breaker is open or half-open.
-- Never contains a secret.
CREATE OR REPLACE FUNCTION outbox.metrics()
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

-- The egress policy at create_endpoint and alter_endpoint.
-- 42501 when the egress policy (pg_outbox.egress_allow / egress_deny) refuses the URL's
-- host as written: an address literal, or a name a host pattern denies.  Names are
-- checked again, with the addresses they resolve to, whenever the worker connects.
CREATE FUNCTION outbox._check_egress(url text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_egress'
    LANGUAGE C STABLE STRICT;
REVOKE EXECUTE ON FUNCTION outbox._check_egress(text) FROM PUBLIC;

CREATE OR REPLACE FUNCTION outbox.create_endpoint(name text,
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
CREATE OR REPLACE FUNCTION outbox.alter_endpoint(name text,
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

