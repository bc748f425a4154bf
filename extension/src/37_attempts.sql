------------------------------------------------------------------------------------------
-- The attempt log of 0.4.0 (in the install script, and run as it is by the update from
-- 0.3.0: the Makefile's UPDATE_TABLES)
------------------------------------------------------------------------------------------

-- Every delivery attempt, HTTP or NOTIFY, kept for pg_outbox.attempt_retention (never
-- when it is 0): the worker writes a settle's attempts in the transaction that records
-- their outcome, one INSERT per settle (docs/operations.md, The attempt log).  Range
-- partitions by attempted_at are created ahead and dropped whole like the history's
-- (outbox._partitions_prepare, outbox._partitions_retire); the default partition
-- catches what no partition covers.  A time partition's only index is a BRIN on
-- message_id (outbox._partition_layout): appending costs no index record per row, and
-- the ids of a partition's attempts are mostly one range (a message's first attempt
-- comes soon after its enqueue), which minmax-multi keeps apart from the retries.
CREATE TABLE outbox.attempts (
    attempted_at  timestamptz NOT NULL,
    endpoint      text NOT NULL,
    message_id    bigint NOT NULL,
    attempt       int NOT NULL,
    http_status   int,
    error         text,
    duration_ms   double precision,
    response_body text
) PARTITION BY RANGE (attempted_at);
COMMENT ON TABLE outbox.attempts IS
    'pg_outbox delivery attempts, kept for pg_outbox.attempt_retention; partitioned by attempted_at';
CREATE TABLE outbox.attempts_default PARTITION OF outbox.attempts DEFAULT;
CREATE INDEX attempts_default_message_id_idx ON outbox.attempts_default (message_id);
-- Retention deletes the default partition's rows one by one, by attempted_at.
CREATE INDEX attempts_default_attempted_at_idx ON outbox.attempts_default (attempted_at);

-- Dumped like the history: the time partitions are ordinary tables pg_dump dumps whole.
SELECT pg_catalog.pg_extension_config_dump('outbox.attempts_default', '');
