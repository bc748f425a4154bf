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
-- outbox.message(id) probes each partition's index on id: a BRIN since 0.4.0, so that
-- keeping a delivered message writes its heap row and no index entry
-- (outbox._partition_layout).  Each partition gets its own
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
-- but for rows carried over by an upgrade).  slot (0.4.0): each settling backend adds
-- to the row of its own slot (its pid modulo 8), so that the readers of a pull
-- endpoint, which acknowledge concurrently, do not wait for each other's commit on one
-- row; the count is the sum over the slots.
CREATE TABLE outbox.history_counts (
    partition regclass NOT NULL,
    endpoint  text NOT NULL,
    sent      bigint NOT NULL,
    slot      smallint NOT NULL DEFAULT 0,
    PRIMARY KEY (partition, endpoint, slot)
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
