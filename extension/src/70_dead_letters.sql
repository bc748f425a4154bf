------------------------------------------------------------------------------------------
-- Dead letters
------------------------------------------------------------------------------------------

-- The open dead letter with this id, locked FOR UPDATE for the caller's change; the
-- refusals shared by requeue and discard: NULL id 22004, unknown id 42704, already
-- requeued or discarded 55000.
CREATE OR REPLACE FUNCTION dlq._lock_open(id bigint)
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
-- message's idempotency_key is the original key, or the original's msg_<instance>_<id>
-- (outbox._webhook_id) when it had none,
-- so a receiver that saw an earlier attempt can recognise it.  A requeue bypasses the
-- endpoint's max_pending (it is an operator's decision).
-- Errors: NULL id 22004; unknown id 42704 (undefined_object, as for unknown endpoints);
-- requeued or discarded already 55000; endpoint gone 42704; a message with the same
-- idempotency key still in the outbox 23505; no event type for a CloudEvents endpoint
-- 22004.
CREATE OR REPLACE FUNCTION dlq.requeue(id bigint, payload jsonb DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    d        dlq.dead_letters%ROWTYPE;
    v_key    text;
    v_id     bigint;
    v_format text;
BEGIN
    d := dlq._lock_open(requeue.id);

    -- KEY SHARE: a concurrent drop_endpoint waits, so the new message is never orphaned.
    SELECT e.format INTO v_format FROM outbox.endpoints e WHERE e.name = d.endpoint FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'endpoint "%" of dead letter % does not exist', d.endpoint, requeue.id
            USING ERRCODE = 'undefined_object',
                  HINT = 'Create the endpoint again, or discard the dead letter.';
    END IF;
    -- The endpoint may have become a CloudEvents endpoint since (docs/delivery.md, CloudEvents).
    IF d.event_type IS NULL AND v_format LIKE 'cloudevents-%' THEN
        RAISE EXCEPTION 'cannot requeue dead letter % to CloudEvents endpoint "%": it has no event type',
                        requeue.id, d.endpoint
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'Discard it, or enqueue its payload again with an event type.';
    END IF;

    v_key := outbox._webhook_id(d.message_id, d.idempotency_key);
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
                  HINT = 'Wait until that message is delivered, or discard this dead letter.';
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
                                           'ENDPOINT_DROPPED', 'INVALID_MESSAGE', 'EGRESS_DENIED',
                                           'ABORTED_BY_RECEIVER', 'REJECTED_BY_CONSUMER') THEN
        RAISE EXCEPTION 'unknown reason_code "%"', requeue_all.reason_code
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'Use one of HTTP_CLIENT_ERROR, PAYLOAD_TOO_LARGE, RETRY_EXHAUSTED, ENDPOINT_DROPPED, INVALID_MESSAGE, EGRESS_DENIED, ABORTED_BY_RECEIVER, REJECTED_BY_CONSUMER.';
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
        -- back in the outbox, it has no event type for a CloudEvents endpoint) stays open
        -- and is counted; the redrive goes on.
        BEGIN
            PERFORM dlq.requeue(r.id);
            v_count := v_count + 1;
        EXCEPTION WHEN undefined_object OR unique_violation OR null_value_not_allowed THEN
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
CREATE OR REPLACE FUNCTION dlq.discard(id bigint, note text DEFAULT NULL)
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

