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

-- 22023 unless secret is a Standard Webhooks signing secret: "whsec_" + base64 of an
-- HMAC key, or "whsk_" + base64 of an ed25519 private key.  The error never contains the
-- secret.
CREATE OR REPLACE FUNCTION outbox._check_secret(secret text) RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_check_secret'
    LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

-- The "whpk_" public key of a "whsk_" secret; NULL for a "whsec_" one, which has none.
-- Not granted: outbox.endpoint_public_key calls it with a secret only the owner reads.
CREATE OR REPLACE FUNCTION outbox._public_key(secret text) RETURNS text
    AS 'MODULE_PATHNAME', 'pg_outbox_public_key'
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
-- on the table or the sequence.  _order_at_commit switches to the owner itself, only
-- for its first call of a commit, the one that does the work.
CREATE OR REPLACE FUNCTION outbox._order_at_commit() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_order_at_commit'
    LANGUAGE C;
CREATE OR REPLACE FUNCTION outbox._moved_message() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_moved_message'
    LANGUAGE C;
CREATE OR REPLACE FUNCTION outbox._trigger_promotes() RETURNS boolean
    AS 'MODULE_PATHNAME', 'pg_outbox_trigger_promotes'
    LANGUAGE C STABLE;
-- The promotions look keys up by index whatever the queue's statistics say (as the
-- worker's and _order_at_commit's statements do: ordering.cpp, with_index_plans).
CREATE OR REPLACE FUNCTION outbox._next_in_order() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_next_in_order'
    LANGUAGE C SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off;
CREATE OR REPLACE FUNCTION outbox._heads_gone() RETURNS trigger
    AS 'MODULE_PATHNAME', 'pg_outbox_heads_gone'
    LANGUAGE C SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET enable_seqscan = off SET enable_bitmapscan = off;
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

-- Asks the worker, at commit, to move the replayed messages of outbox.replay_queue into
-- the queue (outbox.replay).
CREATE OR REPLACE FUNCTION outbox._replays_at_commit() RETURNS void
    AS 'MODULE_PATHNAME', 'pg_outbox_replays_at_commit'
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


-- Whether the claim may take a row of outbox.messages (its tableoid and ctid) that some
-- transaction has touched since its INSERT: not while another transaction changes,
-- deletes or locks it (src/pg/store/row_locks.cpp). The claim's FOR UPDATE SKIP LOCKED
-- without the row lock it wrote.
CREATE OR REPLACE FUNCTION outbox._claimable(queue oid, row_id tid) RETURNS boolean
    AS 'MODULE_PATHNAME', 'pg_outbox_claimable'
    LANGUAGE C VOLATILE STRICT;
