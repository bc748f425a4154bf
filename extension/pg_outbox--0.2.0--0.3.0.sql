-- pg_outbox 0.2.0 -> 0.3.0: the queue holds only undelivered messages.
--
-- Built by `make` as: this file, extension/src/35_engine_tables.sql (the new tables),
-- 0.2.0--0.3.0.post.sql (moving the data), then every function, view and privilege
-- file of extension/src (CREATE OR REPLACE), so that an updated database equals a
-- fresh install (test/t/095_upgrade.pl compares them).

\echo Use "ALTER EXTENSION pg_outbox UPDATE" to load this file. \quit

-- Reads the columns that go; created again below.
DROP VIEW outbox.endpoint_stats;

-- create_endpoint and alter_endpoint gain the concurrency option: a new signature, so
-- the old functions are dropped and created again below. The EXECUTE grants an
-- administrator gave on them (the operator role of docs/operations.md) are kept aside here, in
-- a setting local to the update's transaction (a table would become a member of the
-- extension), and given again on the new ones at the end (0.2.0--0.3.0.final.sql).
SELECT pg_catalog.set_config('pg_outbox_upgrade.grants', coalesce((
    SELECT pg_catalog.json_agg(pg_catalog.json_build_object(
               'function', CASE p.proname
                           WHEN 'create_endpoint'
                           THEN 'outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int)'
                           ELSE 'outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int)' END,
               'grantee', a.grantee, 'grantable', a.is_grantable))::text
      FROM pg_catalog.pg_proc p
           CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
     WHERE p.pronamespace = 'outbox'::regnamespace
       AND p.proname IN ('create_endpoint', 'alter_endpoint')
       AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner), '[]'), true);
DROP FUNCTION outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint);
DROP FUNCTION outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint);
DROP FUNCTION outbox._check_endpoint_options(jsonb, text, int, int, bigint);
------------------------------------------------------------------------------------------
-- The engine's tables of 0.3.0: the worker's claims and the history of delivered
-- messages (in the install script and in the update from 0.2.0)
------------------------------------------------------------------------------------------

-- The worker's claims: one row per batch of HTTP messages handed to libcurl, written in
-- the claim's transaction and deleted in the transaction that settles the batch's last
-- message.  It replaces a per-message "in flight" write: a message is in flight while
-- a claim lists it.  attempts[i] is the attempt message_ids[i] is on; a worker that
-- starts again finds the claims of the one before it and records those attempts on the
-- messages (the requests may have reached the receiver), so a message that keeps
-- crashing the worker still ends in the DLQ.  Only one worker serves a database, so
-- nothing else claims rows; NOTIFY messages are claimed, sent and settled in one
-- transaction and need no claim row.
CREATE TABLE outbox.claims (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_ids bigint[] NOT NULL,
    attempts    int[] NOT NULL,
    claimed_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (cardinality(message_ids) = cardinality(attempts))
) WITH (toast_tuple_target = 8160);  -- a batch of 500 (6 kB) stays in its row, uncompressed
COMMENT ON TABLE outbox.claims IS
    'pg_outbox: batches of messages the worker has claimed and not yet fully settled';

-- Delivered messages, kept for pg_outbox.sent_retention (never when it is 0).  The
-- worker moves a message here in the transaction that records its delivery.  Range
-- partitions by sent_at are created ahead by the worker (outbox._history_prepare) and
-- dropped whole once retention has passed (outbox._history_retire): retention costs
-- one DROP per partition whatever the rate, and never a DELETE per row.  The default
-- partition catches what no partition covers (rows carried over by an upgrade, or a
-- partition that could not be created in time); its rows are deleted one by one.
CREATE TABLE outbox.history (
    id               bigint NOT NULL,
    endpoint         text NOT NULL,
    event_type       text,
    payload          jsonb NOT NULL,
    headers          jsonb,
    ordering_key     text,
    idempotency_key  text,
    attempts         int NOT NULL,
    last_http_status int,
    created_at       timestamptz NOT NULL,
    sent_at          timestamptz NOT NULL
) PARTITION BY RANGE (sent_at);
COMMENT ON TABLE outbox.history IS
    'pg_outbox delivered messages, kept for pg_outbox.sent_retention; partitioned by sent_at';
-- outbox.message(id) probes each partition's index on id.  Each partition gets its own
-- (outbox._history_prepare), not one inherited from a partitioned index: the
-- partitions are ordinary tables that pg_dump dumps with their indexes, and an index
-- on the extension's parent would make pg_restore create every one of them twice.
CREATE TABLE outbox.history_default PARTITION OF outbox.history DEFAULT;
CREATE INDEX history_default_id_idx ON outbox.history_default (id);
-- Retention deletes the default partition's rows one by one, by sent_at.
CREATE INDEX history_default_sent_at_idx ON outbox.history_default (sent_at);

-- Delivered messages per history partition and endpoint, kept by the worker as it
-- settles (one row per endpoint and batch, not per message), so that endpoint_stats
-- and metrics() count the retained history without reading it.  A partition's rows go
-- when it is dropped.  The default partition is counted by reading it (it is empty
-- but for rows carried over by an upgrade).
CREATE TABLE outbox.history_counts (
    partition regclass NOT NULL,
    endpoint  text NOT NULL,
    sent      bigint NOT NULL,
    PRIMARY KEY (partition, endpoint)
);
COMMENT ON TABLE outbox.history_counts IS
    'pg_outbox: delivered messages per history partition and endpoint (kept by the worker)';

-- outbox.message(id) of a dead message.
CREATE INDEX dead_letters_message_id_idx ON dlq.dead_letters (message_id);

-- The history is user data that pg_dump must keep: the default partition and the
-- counts are the extension's; the time partitions, created by the worker, are ordinary
-- tables that pg_dump dumps whole.  The claims are not dumped: a restored message is
-- pending.
SELECT pg_catalog.pg_extension_config_dump('outbox.history_default', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.history_counts', '');


-- Where webhook-ids come from (docs/delivery.md, Webhook id): "msg_<id>" repeats across databases, clusters
-- and re-created extensions, and a receiver that deduplicates on webhook-id would drop
-- a different message.  One random instance id per database and installation (a
-- template copy or a restored database gets its own, outbox._instance()); a message
-- without an idempotency key goes out as "msg_<instance>_<id>".  legacy_below: the
-- messages enqueued before 0.3.0 keep the "msg_<id>" they were first sent with (set by
-- the update).  Not dumped: a restored database is another installation.
CREATE TABLE outbox.instance (
    database_oid oid PRIMARY KEY,
    id           text NOT NULL CHECK (id ~ '^[0-9a-f]{16}$'),
    legacy_below bigint NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.instance IS
    'pg_outbox: the instance id in the webhook-ids of this database''s messages';
INSERT INTO outbox.instance (database_oid, id)
SELECT d.oid, pg_catalog.substr(pg_catalog.md5(pg_catalog.gen_random_uuid()::text), 1, 16)
  FROM pg_catalog.pg_database d WHERE d.datname = pg_catalog.current_database();
-- Sent messages move to the history's default partition, where the worker's retention
-- deletes them once pg_outbox.sent_retention has passed.  Messages in flight under a
-- 0.2.0 worker are pending again: their attempt was counted when they were claimed.
INSERT INTO outbox.history (id, endpoint, event_type, payload, headers, ordering_key, idempotency_key,
                            attempts, last_http_status, created_at, sent_at)
SELECT m.id, m.endpoint, m.event_type, m.payload, m.headers, m.ordering_key, m.idempotency_key,
       m.attempts, m.last_http_status, m.created_at, coalesce(m.sent_at, now())
  FROM outbox.messages m
 WHERE m.status = 'sent';
DELETE FROM outbox.messages m WHERE m.status = 'sent';

DROP INDEX outbox.messages_claim_idx, outbox.messages_lease_idx, outbox.messages_ordering_idx,
           outbox.messages_endpoint_status_idx, outbox.messages_sent_at_idx;
ALTER TABLE outbox.messages DROP COLUMN status, DROP COLUMN lease_until, DROP COLUMN sent_at;
-- Messages enqueued before the update keep the webhook-id they were sent with (msg_<id>);
-- the ones after carry the instance id (outbox.instance, created above).
UPDATE outbox.instance SET legacy_below = coalesce(pg_catalog.pg_sequence_last_value(
    pg_catalog.pg_get_serial_sequence('outbox.messages', 'id')::regclass), 0) + 1;
-- A request's timeout is bounded (5 minutes): a claim lasts as long as its request can.
UPDATE outbox.endpoints SET timeout_ms = 300000 WHERE timeout_ms > 300000;
ALTER TABLE outbox.endpoints DROP CONSTRAINT endpoints_timeout_ms_check,
    ADD CONSTRAINT endpoints_timeout_ms_check CHECK (timeout_ms > 0 AND timeout_ms <= 300000);
ALTER TABLE outbox.endpoints ADD COLUMN concurrency int CHECK (concurrency > 0),
                             ADD COLUMN rate_limit int CHECK (rate_limit > 0);
COMMENT ON TABLE outbox.messages IS
    'pg_outbox messages waiting for delivery (the backlog); outbox.message(id) finds any message';
-- Per-key commit order: a message waiting behind its key's head has a place in the
-- key's commit order and is not in the claim index (outbox._order_queued, called for
-- every ordered endpoint at the end of the update, numbers them).
ALTER TABLE outbox.messages
    ADD COLUMN ordering_seq bigint CHECK (ordering_seq IS NULL OR ordering_key IS NOT NULL);
CREATE SEQUENCE outbox.commit_order;
CREATE INDEX messages_claim_idx ON outbox.messages (endpoint, next_attempt_at) WHERE ordering_seq IS NULL;
CREATE INDEX messages_ordering_idx ON outbox.messages (endpoint, ordering_key, ordering_seq NULLS FIRST)
    WHERE ordering_key IS NOT NULL;

-- outbox.enqueue does its work in C now (src/pg/producer/enqueue.cpp).
DROP FUNCTION outbox._enqueue(text, jsonb, text, jsonb, text, text, timestamptz, regrole, boolean);
------------------------------------------------------------------------------------------
-- Validators written in C++ (src/pg).  They return nothing and raise an error when the
-- value is not acceptable.  They are STRICT: callers handle NULL themselves, so that a
-- NULL never reaches C code that does not expect it.
------------------------------------------------------------------------------------------

-- 42602 invalid_name unless name matches ^[a-z0-9][a-z0-9_.-]{0,62}$.
CREATE OR REPLACE FUNCTION outbox._check_endpoint_name(name text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_endpoint_name'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless url is an absolute http:// or https:// URL with a host.
CREATE OR REPLACE FUNCTION outbox._check_url(url text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_url'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 42501 when the egress policy (pg_outbox.egress_allow / egress_deny) refuses the URL's
-- host as written: an address literal, or a name a host pattern denies.  Names are
-- checked again, with the addresses they resolve to, whenever the worker connects.
CREATE OR REPLACE FUNCTION outbox._check_egress(url text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_egress'
    LANGUAGE C STABLE STRICT;

-- 22023 unless headers is a JSON object of string values whose names are HTTP tokens,
-- with no CR, LF or NUL in any name or value.
CREATE OR REPLACE FUNCTION outbox._check_headers(headers jsonb) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_headers'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless secret is a Standard Webhooks secret ("whsec_" + base64).  The error
-- never contains the secret.
CREATE OR REPLACE FUNCTION outbox._check_secret(secret text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_secret'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless key has 1-200 characters, no ".", no whitespace, no control character
-- (it becomes the webhook-id header).
CREATE OR REPLACE FUNCTION outbox._check_idempotency_key(key text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_idempotency_key'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- 22023 unless channel is a name LISTEN/NOTIFY can use.
CREATE OR REPLACE FUNCTION outbox._check_channel(channel text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_channel'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

------------------------------------------------------------------------------------------
-- The worker's side, in C++: waking it, its status and its counters.
------------------------------------------------------------------------------------------

-- Statement trigger on outbox.messages: wakes the worker when the transaction commits
-- (nothing happens on rollback, and many inserts in one transaction wake it once).
CREATE OR REPLACE FUNCTION outbox._wake_at_commit() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_wake_at_commit'
    LANGUAGE C;

-- Per-key commit order on ordered endpoints (src/pg/ordering/ordering.cpp).  The triggers of
-- outbox.messages that call them run as the extension's owner: a producer has no right
-- on the table or the sequence.
CREATE OR REPLACE FUNCTION outbox._order_at_commit() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_order_at_commit'
    LANGUAGE C SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
CREATE OR REPLACE FUNCTION outbox._moved_message() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_moved_message'
    LANGUAGE C;
CREATE OR REPLACE FUNCTION outbox._trigger_promotes() RETURNS boolean
    AS 'MODULE_PATHNAME', 'pg_outbox_trigger_promotes'
    LANGUAGE C STABLE;
CREATE OR REPLACE FUNCTION outbox._next_in_order() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_next_in_order'
    LANGUAGE C SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
-- The advisory lock (second key) that orders the commits of one key.
CREATE OR REPLACE FUNCTION outbox._ordering_lock(endpoint text, ordering_key text) RETURNS int
    AS 'MODULE_PATHNAME', 'pg_outbox_ordering_lock'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- What plain SQL did to the queue (src/pg/producer/queue_triggers.cpp): the rows an INSERT
-- statement added (their keys' order, their endpoints' max_pending counts), and rows
-- that left otherwise than by the worker (its counts are made again).
CREATE OR REPLACE FUNCTION outbox._note_inserts() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_note_inserts'
    LANGUAGE C;
CREATE OR REPLACE FUNCTION outbox._queue_changed() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_queue_changed'
    LANGUAGE C;

-- Asks the worker, at commit, to wake up and re-read the endpoints.
CREATE OR REPLACE FUNCTION outbox._request_wake() RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_request_wake'
    LANGUAGE C VOLATILE;

-- config_loaded_at: when the configuration the worker runs with was read (its own
-- re-read after a SIGHUP, or the server's last load before the worker started; the
-- worker's pg_conf_load_time()).  A change made with ALTER SYSTEM + pg_reload_conf()
-- has reached the worker once this is later than the moment ALTER SYSTEM returned.
CREATE OR REPLACE FUNCTION outbox.worker_status(
        OUT pid int, OUT database text, OUT state text,
        OUT started_at timestamptz, OUT last_loop_at timestamptz, OUT in_flight int,
        OUT sent bigint, OUT retried bigint, OUT dead_lettered bigint,
        OUT config_loaded_at timestamptz)
    RETURNS record
    AS 'MODULE_PATHNAME', 'pg_outbox_worker_status'
    LANGUAGE C VOLATILE;
COMMENT ON FUNCTION outbox.worker_status() IS
    'the background worker: pid, database, state, start and last loop time, messages in flight, counters since start, when it last read its configuration';

-- max_pending's counts kept in shared memory (src/pg/producer/queued_count.cpp): per endpoint
-- with a max_pending, whether the worker has counted it, its committed undelivered
-- messages, and those of transactions still open.  enqueue refuses at committed +
-- reserved = max_pending.
CREATE OR REPLACE FUNCTION outbox._queued_counts(OUT endpoint text, OUT counted boolean, OUT committed bigint,
                                                 OUT reserved bigint)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'pg_outbox_queued_counts'
    LANGUAGE C VOLATILE;

-- Deliveries since the worker started, per endpoint and result ('sent', 'retry', 'dead').
CREATE OR REPLACE FUNCTION outbox._delivery_counters(OUT endpoint text, OUT result text, OUT count bigint)
    RETURNS SETOF record
    AS 'MODULE_PATHNAME', 'pg_outbox_delivery_counters'
    LANGUAGE C VOLATILE ROWS 30;

-- Test-only: proves that C++ exceptions and PostgreSQL errors cross the C++/PostgreSQL
-- boundary as ordinary errors and leave the backend usable.  Kinds: 'ok',
-- 'std_exception', 'bad_alloc', 'unknown' (XX000 "pg_outbox internal error: ...") and
-- 'pg_error_in_cpp' (the PostgreSQL error keeps its own SQLSTATE).
CREATE OR REPLACE FUNCTION outbox._boundary_selftest(kind text) RETURNS text
    AS 'MODULE_PATHNAME', 'pg_outbox_boundary_selftest'
    LANGUAGE C VOLATILE STRICT;

-- The size in bytes of a payload as stored, uncompressed, read from its header: a
-- 50 MB payload is measured without being read.  The worker's byte budget and
-- pg_outbox.max_payload_size are counted in it.
CREATE OR REPLACE FUNCTION outbox._payload_size(payload jsonb) RETURNS bigint
    AS 'MODULE_PATHNAME', 'pg_outbox_payload_size'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

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
                                       rate_limit int DEFAULT NULL)
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
                                           create_endpoint.max_pending, create_endpoint.concurrency,
                                           create_endpoint.rate_limit);

    INSERT INTO outbox.endpoints (name, url, channel, headers, timeout_ms, max_attempts,
                                  ordered, max_pending, concurrency, rate_limit)
    VALUES (create_endpoint.name, create_endpoint.url, create_endpoint.channel,
            coalesce(create_endpoint.headers, '{}'), create_endpoint.timeout_ms,
            create_endpoint.max_attempts, coalesce(create_endpoint.ordered, false),
            create_endpoint.max_pending, create_endpoint.concurrency, create_endpoint.rate_limit)
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
COMMENT ON FUNCTION outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int) IS
    'creates an endpoint: exactly one of url (http/https) or channel (NOTIFY); NULL options use the GUCs';

-- Changes only the arguments that are not NULL.  secret => '' removes the secret (the
-- endpoint's deliveries are no longer signed); any other secret replaces it.  An
-- endpoint cannot change between url and channel delivery: drop and create it.
-- timeout_ms, max_attempts, max_pending, concurrency and rate_limit cannot be set back to
-- NULL here.
CREATE OR REPLACE FUNCTION outbox.alter_endpoint(name text,
                                      url text DEFAULT NULL,
                                      headers jsonb DEFAULT NULL,
                                      secret text DEFAULT NULL,
                                      timeout_ms int DEFAULT NULL,
                                      max_attempts int DEFAULT NULL,
                                      ordered boolean DEFAULT NULL,
                                      max_pending bigint DEFAULT NULL,
                                      concurrency int DEFAULT NULL,
                                      rate_limit int DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_channel text;
    v_ordered boolean;
BEGIN
    IF alter_endpoint.name IS NULL THEN
        RAISE EXCEPTION 'endpoint name must not be NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT e.channel, e.ordered INTO v_channel, v_ordered
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
                                           alter_endpoint.max_pending, alter_endpoint.concurrency,
                                           alter_endpoint.rate_limit);

    UPDATE outbox.endpoints e
       SET url          = coalesce(alter_endpoint.url, e.url),
           headers      = coalesce(alter_endpoint.headers, e.headers),
           timeout_ms   = coalesce(alter_endpoint.timeout_ms, e.timeout_ms),
           max_attempts = coalesce(alter_endpoint.max_attempts, e.max_attempts),
           ordered      = coalesce(alter_endpoint.ordered, e.ordered),
           max_pending  = coalesce(alter_endpoint.max_pending, e.max_pending),
           concurrency  = coalesce(alter_endpoint.concurrency, e.concurrency),
           rate_limit   = coalesce(alter_endpoint.rate_limit, e.rate_limit)
     WHERE e.name = alter_endpoint.name;
    IF alter_endpoint.ordered <> v_ordered THEN
        PERFORM outbox._order_queued(alter_endpoint.name, alter_endpoint.ordered);
    END IF;

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
COMMENT ON FUNCTION outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int) IS
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
        SELECT count(*) INTO v_undelivered
          FROM outbox.messages m
         WHERE m.endpoint = drop_endpoint.name;
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

    DELETE FROM outbox.endpoints e WHERE e.name = drop_endpoint.name;  -- and its secret

    PERFORM outbox._request_wake();
END
$fn$;
COMMENT ON FUNCTION outbox.drop_endpoint(text, boolean) IS
    'drops an endpoint; with force => true its undelivered messages move to the DLQ (ENDPOINT_DROPPED)';

-- A paused endpoint keeps accepting messages but the worker delivers none of them.
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
-- msg_<instance>_<id> (msg_<id> for a message enqueued before 0.3.0).
CREATE OR REPLACE FUNCTION outbox._webhook_id(message_id bigint, idempotency_key text)
    RETURNS text
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT coalesce(_webhook_id.idempotency_key,
                    CASE WHEN _webhook_id.message_id < i.legacy_below THEN 'msg_' || _webhook_id.message_id
                         ELSE 'msg_' || i.id || '_' || _webhook_id.message_id END)
      FROM outbox._instance() i
$fn$;
------------------------------------------------------------------------------------------
-- History partitions: created ahead and dropped whole by the worker's housekeeping
------------------------------------------------------------------------------------------

-- The partitions of outbox.history with their bounds (the default partition is not one
-- of them).  The bounds come from the catalog, printed and read back in the same
-- session, so no naming convention is relied on.
CREATE OR REPLACE FUNCTION outbox._history_partitions(OUT partition regclass, OUT from_at timestamptz,
                                                      OUT to_at timestamptz)
    RETURNS SETOF record
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    SELECT c.oid::regclass, b[1]::timestamptz, b[2]::timestamptz
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
     CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                     '^FOR VALUES FROM \(''([^'']*)''\) TO \(''([^'']*)''\)$') AS b
     WHERE i.inhparent = 'outbox.history'::regclass
       AND b IS NOT NULL  -- the default partition has no bounds
$fn$;

-- Makes sure that partitions of width_s seconds, aligned on multiples of it since the
-- epoch, cover the history from now to at least three widths ahead (from the end of the
-- current partition, if it was made for a longer retention); returns until when the
-- history is covered.  A range that cannot get its partition (the default
-- partition already holds rows of it, or a reader holds the history longer than the
-- lock timeout) is left to the default partition, and the next range is tried.
CREATE OR REPLACE FUNCTION outbox._history_prepare(width_s int)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '200ms'
AS $fn$
DECLARE
    v_from    timestamptz;
    v_to      timestamptz;
    v_covered timestamptz;
    v_name    text;
    v_old     record;
    v_empty   boolean;
BEGIN
    IF width_s IS NULL OR width_s < 1 THEN
        RAISE EXCEPTION 'width_s must be a positive number of seconds'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Partitions made for a longer retention (wider), the current one included, go while
    -- they are still empty: the coming rows belong in partitions of today's width.  (The
    -- worker is the only writer of the history, and it is the one running this.)
    FOR v_old IN SELECT * FROM outbox._history_partitions() p
                  WHERE p.to_at > now() AND p.to_at - p.from_at > make_interval(secs => width_s) LOOP
        BEGIN
            EXECUTE format('SELECT NOT EXISTS (SELECT FROM %s)', v_old.partition) INTO v_empty;
            IF v_empty THEN
                DELETE FROM outbox.history_counts hc WHERE hc.partition = v_old.partition;
                EXECUTE format('DROP TABLE IF EXISTS %s', v_old.partition);
            END IF;
        EXCEPTION WHEN lock_not_available OR undefined_table THEN
            EXIT;
        END;
    END LOOP;
    v_from := to_timestamp(floor(extract(epoch FROM now()) / width_s) * width_s);
    SELECT max(p.to_at) INTO v_covered FROM outbox._history_partitions() p;
    IF v_covered > v_from THEN
        v_from := v_covered;
    END IF;
    WHILE v_from < now() + make_interval(secs => 3 * width_s) LOOP
        v_to := to_timestamp((floor(extract(epoch FROM v_from) / width_s) + 1) * width_s);
        v_name := 'history_' || to_char(v_from AT TIME ZONE 'UTC', 'YYYYMMDD_HH24MISS');
        BEGIN
            EXECUTE format('CREATE TABLE outbox.%I PARTITION OF outbox.history FOR VALUES FROM (%L) TO (%L)',
                           v_name, v_from, v_to);
            EXECUTE format('CREATE INDEX ON outbox.%I (id)', v_name);
        EXCEPTION WHEN lock_not_available OR check_violation OR duplicate_table THEN
            NULL;
        END;
        v_from := v_to;
    END LOOP;
    RETURN (SELECT max(p.to_at) FROM outbox._history_partitions() p);
END
$fn$;

-- Removes the delivered messages sent before cutoff: each partition wholly before it is
-- dropped (its count read from outbox.history_counts, not from its rows), and the
-- default partition's rows before it are deleted.  The rows before cutoff in the
-- partition that straddles it are deleted too when exact (outbox.purge), or when that
-- partition is wider than trim_wider_than: it was made for a longer retention than
-- today's, and waiting for its end would keep rows hours too long.  Otherwise the worker
-- leaves them for the drop of their partition.  A partition that cannot be locked within
-- the lock timeout (a long reader of the history) waits for the next call.  Returns how
-- many messages were removed.
CREATE OR REPLACE FUNCTION outbox._history_retire(cutoff timestamptz, exact boolean,
                                                  trim_wider_than interval DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET lock_timeout = '200ms'
AS $fn$
DECLARE
    p       record;
    v_count bigint := 0;
    v_n     bigint;
BEGIN
    FOR p IN SELECT * FROM outbox._history_partitions() hp
              WHERE hp.from_at < cutoff ORDER BY hp.from_at LOOP
        IF p.to_at <= cutoff THEN
            BEGIN
                SELECT coalesce(sum(hc.sent), 0) INTO v_n
                  FROM outbox.history_counts hc WHERE hc.partition = p.partition;
                DELETE FROM outbox.history_counts hc WHERE hc.partition = p.partition;
                EXECUTE format('DROP TABLE IF EXISTS %s', p.partition);
                v_count := v_count + v_n;
            EXCEPTION WHEN lock_not_available OR undefined_table THEN
                EXIT;  -- locked by a reader, or dropped by a concurrent purge(): next call
            END;
        ELSIF exact OR p.to_at - p.from_at > trim_wider_than THEN
            EXECUTE format('WITH gone AS (DELETE FROM %s h WHERE h.sent_at < $1 RETURNING h.endpoint),'
                           '     n AS (SELECT g.endpoint, count(*) AS n FROM gone g GROUP BY g.endpoint),'
                           '     counted AS (UPDATE outbox.history_counts hc SET sent = hc.sent - n.n FROM n'
                           '                  WHERE hc.partition = $2 AND hc.endpoint = n.endpoint RETURNING 1)'
                           ' SELECT coalesce(sum(n.n), 0) FROM n', p.partition)
               INTO v_n USING cutoff, p.partition;
            v_count := v_count + v_n;
        END IF;
    END LOOP;
    DELETE FROM outbox.history_default h WHERE h.sent_at < cutoff;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_count + v_n;
END
$fn$;
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
-- idempotency key still in the outbox 23505.
CREATE OR REPLACE FUNCTION dlq.requeue(id bigint, payload jsonb DEFAULT NULL)
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

------------------------------------------------------------------------------------------
-- Observability
------------------------------------------------------------------------------------------

-- Open dead letters by endpoint, reason and event type.
CREATE OR REPLACE VIEW dlq.summary AS
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

-- Messages per endpoint, for endpoint_stats and metrics() (a view, not a function: a
-- view's tables are read with its owner's rights, so operators who may read
-- endpoint_stats need no right on the tables behind it): undelivered ones read from
-- the queue (its size is the backlog), in-flight ones from the worker's claims, and
-- delivered ones from the counts the worker keeps per history partition, so that the
-- cost never depends on the retained history.  oldest_due: when the oldest waiting
-- message first became due (its created_at, or its deliver_at for a scheduled message
-- not yet attempted); a message whose deliver_at is still in the future is not waiting
-- yet.  In-flight messages count as waiting.  Every endpoint that appears anywhere has
-- a row, whether or not it still exists.
CREATE OR REPLACE VIEW outbox._message_counts AS
SELECT n.endpoint,
       coalesce(q.undelivered, 0) - coalesce(f.in_flight, 0) AS pending,
       coalesce(f.in_flight, 0)                              AS in_flight,
       coalesce(h.sent, 0)                                   AS sent,
       q.oldest_due
  FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
        UNION SELECT DISTINCT m.endpoint FROM outbox.messages m
        UNION SELECT DISTINCT hc.endpoint FROM outbox.history_counts hc WHERE hc.sent > 0
        UNION SELECT DISTINCT hd.endpoint FROM outbox.history_default hd) n
  LEFT JOIN (SELECT m.endpoint, count(*) AS undelivered,
                    min(CASE WHEN m.attempts = 0 THEN m.next_attempt_at ELSE m.created_at END)
                        FILTER (WHERE m.attempts > 0 OR m.next_attempt_at <= now()) AS oldest_due
               FROM outbox.messages m GROUP BY m.endpoint) q ON q.endpoint = n.endpoint
  LEFT JOIN (SELECT m.endpoint, count(DISTINCT m.id) AS in_flight
               FROM outbox.claims c CROSS JOIN unnest(c.message_ids) AS i(id)
               JOIN outbox.messages m ON m.id = i.id
              GROUP BY m.endpoint) f ON f.endpoint = n.endpoint
  LEFT JOIN (SELECT x.endpoint, sum(x.sent)::bigint AS sent
               FROM (SELECT hc.endpoint, hc.sent FROM outbox.history_counts hc
                     UNION ALL
                     SELECT hd.endpoint, 1 FROM outbox.history_default hd) x
              GROUP BY x.endpoint) h ON h.endpoint = n.endpoint;
COMMENT ON VIEW outbox._message_counts IS
    'pg_outbox: messages per endpoint (pending, in flight, delivered and kept) for endpoint_stats and metrics()';

-- Per endpoint: messages waiting, in flight and delivered (kept in the history), open
-- dead letters, the age of the oldest waiting message, pause and circuit breaker.
CREATE OR REPLACE VIEW outbox.endpoint_stats AS
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
  LEFT JOIN outbox._message_counts m ON m.endpoint = e.name
  LEFT JOIN (SELECT dl.endpoint, count(*) AS dead
               FROM dlq.dead_letters dl
              WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
              GROUP BY dl.endpoint) d ON d.endpoint = e.name;
COMMENT ON VIEW outbox.endpoint_stats IS
    'per endpoint: pending, in_flight, sent (retained), dead (open), oldest pending age, paused, circuit breaker';

-- A Prometheus label value: backslash, double quote and line feed escaped.
CREATE OR REPLACE FUNCTION outbox._prom_label(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN replace(replace(replace(value, E'\\', E'\\\\'), '"', E'\\"'), E'\n', E'\\n');

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
                                      outbox._prom_label(c.endpoint), st.status,
                                      CASE st.ord WHEN 1 THEN c.pending WHEN 2 THEN c.in_flight ELSE c.sent END),
                               E'\n' ORDER BY c.endpoint, st.ord), '')
      INTO v_family
      FROM outbox._message_counts c
     CROSS JOIN (VALUES (1, 'pending'), (2, 'in_flight'), (3, 'sent')) st(ord, status);
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

-- The grants a deployment needs (documented in docs/operations.md, Privileges; the regress suite applies
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
--       outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int),
--       outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int),
--       outbox.drop_endpoint(text, boolean),
--       outbox.pause_endpoint(text),
--       outbox.resume_endpoint(text),
--       outbox.purge(interval),
--       outbox.metrics(),
--       outbox.message(bigint),
--       outbox.worker_status(),
--       outbox.grant_send(text, name),
--       outbox.revoke_send(text, name),
--       dlq.requeue(bigint, jsonb),
--       dlq.requeue_all(text, text, timestamptz),
--       dlq.discard(bigint, text)
--     TO operator;
--   GRANT SELECT ON outbox.endpoints, outbox.endpoint_senders, outbox.messages, outbox.history,
--                   outbox.endpoint_stats, dlq.dead_letters, dlq.summary
--     TO operator;

-- The EXECUTE grants kept aside by 0.2.0--0.3.0.pre.sql, given again on the new
-- create_endpoint and alter_endpoint (grantee 0 is PUBLIC). A GRANT run by an extension
-- script is also recorded as the extension's own initial privilege (pg_init_privs),
-- which pg_dump leaves out: the functions' initial privileges are put back as the
-- script's privileges file left them, so that pg_dump dumps these grants like any other
-- grant of an administrator.
DO $grants$
DECLARE
    f pg_catalog.regprocedure;
    initial pg_catalog.aclitem[];
    g record;
BEGIN
    FOREACH f IN ARRAY ARRAY[
        'outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int)',
        'outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int)']::pg_catalog.regprocedure[]
    LOOP
        SELECT i.initprivs INTO initial
          FROM pg_catalog.pg_init_privs i
         WHERE i.objoid = f AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
        FOR g IN SELECT *
                   FROM pg_catalog.json_to_recordset(pg_catalog.current_setting('pg_outbox_upgrade.grants')::json)
                        AS x(function text, grantee oid, grantable boolean)
                  WHERE x.function::pg_catalog.regprocedure = f
        LOOP
            EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %s%s', f,
                CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::pg_catalog.regrole::text END,
                CASE WHEN g.grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
        IF initial IS NULL THEN
            DELETE FROM pg_catalog.pg_init_privs i
             WHERE i.objoid = f AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
        ELSE
            UPDATE pg_catalog.pg_init_privs i SET initprivs = initial
             WHERE i.objoid = f AND i.classoid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND i.objsubid = 0;
        END IF;
    END LOOP;
END
$grants$;

-- Per-key commit order (src/pg/ordering/ordering.cpp): the triggers, now that their functions
-- exist, and the queued messages of ordered endpoints put in the order 0.2.0 kept (ids).
CREATE TRIGGER messages_note_inserts
    AFTER INSERT ON outbox.messages REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._note_inserts();
CREATE TRIGGER messages_queue_changed
    AFTER DELETE OR UPDATE OF endpoint OR TRUNCATE ON outbox.messages
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._queue_changed();
CREATE CONSTRAINT TRIGGER messages_order_at_commit
    AFTER INSERT ON outbox.messages DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL) EXECUTE FUNCTION outbox._order_at_commit();
CREATE TRIGGER messages_moved
    BEFORE UPDATE OF endpoint, ordering_key ON outbox.messages
    FOR EACH ROW WHEN (OLD.endpoint IS DISTINCT FROM NEW.endpoint OR OLD.ordering_key IS DISTINCT FROM NEW.ordering_key)
    EXECUTE FUNCTION outbox._moved_message();
CREATE TRIGGER messages_next_in_order
    AFTER DELETE OR UPDATE OF endpoint, ordering_key ON outbox.messages
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL AND outbox._trigger_promotes())
    EXECUTE FUNCTION outbox._next_in_order();
SELECT outbox._order_queued(e.name, true) FROM outbox.endpoints e WHERE e.ordered;
SELECT pg_catalog.pg_extension_config_dump('outbox.commit_order', '');
