------------------------------------------------------------------------------------------
-- Messages
------------------------------------------------------------------------------------------

-- The producer's entry.  In C and NOT security definer: it takes the identity of the
-- role that really calls it (SET ROLE and callers inside other SECURITY DEFINER
-- functions included), reads the endpoint and the send right as the extension's owner,
-- checks its arguments and inserts the row through the executor, without a statement
-- (src/pg/producer/enqueue.cpp).  A producer needs EXECUTE on this function, a send right on the
-- endpoint (outbox.grant_send) and no table privilege.
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
        OUT sent_at timestamptz, OUT dead_letter_id bigint, OUT attempts_logged bigint)
    RETURNS SETOF record
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    ROWS 1
AS $fn$
    -- attempts_logged: the message's rows in the attempt log (each partition's index on
    -- message_id answers; fewer than attempts once retention dropped older ones).
    SELECT s.*, (SELECT count(*) FROM outbox.attempts a WHERE a.message_id = $1)
      FROM ((SELECT m.id, m.endpoint,
                    CASE WHEN r.held_until > clock_timestamp()  -- held by a pull endpoint's reader
                              OR EXISTS (SELECT FROM outbox.claims c WHERE m.id = ANY (c.message_ids))
                         THEN 'in_flight' ELSE 'pending' END,
                    -- a read's attempt counts from the read on, answered or not
                    m.attempts + (r.held_until IS NOT NULL)::int,
                    m.last_error, m.last_http_status, m.created_at, NULL::timestamptz, NULL::bigint
               FROM outbox.messages m
               LEFT JOIN LATERAL (SELECT o.held_until FROM outbox.holds o
                                   WHERE o.endpoint = m.endpoint AND m.id = ANY (o.message_ids) LIMIT 1) r ON true
              WHERE m.id = $1)
            UNION ALL
            (SELECT h.id, h.endpoint, 'sent', h.attempts, NULL, h.last_http_status, h.created_at, h.sent_at, NULL
               FROM outbox.history h WHERE h.id = $1 LIMIT 1)
            UNION ALL
            (SELECT d.message_id, d.endpoint, 'dead', d.attempts, d.error_message, d.http_status,
                    d.message_created_at, NULL, d.id
               FROM dlq.dead_letters d WHERE d.message_id = $1 ORDER BY d.id DESC LIMIT 1)
            LIMIT 1) s
$fn$;
COMMENT ON FUNCTION outbox.message(bigint) IS
    'where a message stands: pending, in_flight, sent (kept in the history) or dead (in the DLQ)';

-- This database's instance id and the first id of the webhook-ids that carry it (see
-- outbox.instance), made on first use in a database that has none (a copy of a template,
-- a restored dump).  For the worker and dlq.requeue; not granted.
CREATE OR REPLACE FUNCTION outbox._instance(OUT id text, OUT legacy_below bigint)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_db oid := (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database());
BEGIN
    SELECT i.id, i.legacy_below INTO id, legacy_below FROM outbox.instance i WHERE i.database_oid = v_db;
    IF NOT FOUND THEN
        INSERT INTO outbox.instance AS i (database_oid, id)
        VALUES (v_db, pg_catalog.substr(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 1, 16))
        ON CONFLICT (database_oid) DO NOTHING;
        SELECT i.id, i.legacy_below INTO id, legacy_below FROM outbox.instance i WHERE i.database_oid = v_db;
    END IF;
END
$fn$;

-- The webhook-id of a message (what the worker sends): its idempotency key, else
-- msg_<instance>_<id> (msg_<id> for a message enqueued before 0.3.0), given the instance
-- (outbox._instance(), read once by a statement that makes many: outbox.read,
-- outbox.replay): src/pg/producer/webhook_id.cpp.
CREATE OR REPLACE FUNCTION outbox._webhook_id(message_id bigint, idempotency_key text, instance text,
                                              legacy_below bigint)
    RETURNS text
    AS 'MODULE_PATHNAME', 'pg_outbox_webhook_id'
    LANGUAGE C IMMUTABLE;
-- The same, with this database's instance.
CREATE OR REPLACE FUNCTION outbox._webhook_id(message_id bigint, idempotency_key text)
    RETURNS text
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT outbox._webhook_id(_webhook_id.message_id, _webhook_id.idempotency_key, i.id, i.legacy_below)
      FROM outbox._instance() i
$fn$;
