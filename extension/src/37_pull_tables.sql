------------------------------------------------------------------------------------------
-- Pull endpoints (0.4.0): endpoints nobody pushes to, whose messages application workers
-- take with outbox.read (docs/delivery.md, Pull endpoints).  The update from 0.3.0 runs
-- this file as it is (the Makefile's UPDATE_TABLES).
------------------------------------------------------------------------------------------

-- An endpoint is reached by exactly one of: an http(s) url, a NOTIFY channel, or its
-- readers (pull).  pull is set at creation only.
ALTER TABLE outbox.endpoints ADD COLUMN pull boolean NOT NULL DEFAULT false;
ALTER TABLE outbox.endpoints DROP CONSTRAINT endpoints_url_xor_channel;
ALTER TABLE outbox.endpoints ADD CONSTRAINT endpoints_one_destination
    CHECK (num_nonnulls(url, channel, nullif(pull, false)) = 1);

-- What the readers of pull endpoints hold: one row per outbox.read that took messages
-- (docs/delivery.md, Pull endpoints).  A message listed in a row is held while
-- held_until is ahead of the clock: invisible to other reads, and its reader may
-- acknowledge or refuse it.  One row per read rather than a new version of each message:
-- a read writes this row and a row lock per message, and leaves the message rows as they
-- were until they are answered.  Once held_until has passed, the row is an attempt that
-- ended unanswered; the next read of the endpoint counts it (or dead-letters the
-- messages that had no attempt left) before it takes any.  A message is listed in at
-- most one row.  Not dumped, as the worker's claims: a restored message is not held.
CREATE TABLE outbox.holds (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint    text        NOT NULL REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    message_ids bigint[]    NOT NULL,
    read_at     timestamptz NOT NULL,
    held_until  timestamptz NOT NULL
);
CREATE INDEX holds_endpoint_idx ON outbox.holds (endpoint, held_until);
COMMENT ON TABLE outbox.holds IS
    'pg_outbox: the messages each outbox.read of a pull endpoint holds, until held_until';

-- Who may read, acknowledge and refuse the messages of which pull endpoint
-- (outbox.grant_consume / outbox.revoke_consume), kept as the send rights are
-- (outbox.endpoint_senders): a role with the privileges of a listed role, or PUBLIC
-- ('-', oid 0) when listed.
CREATE TABLE outbox.endpoint_consumers (
    endpoint text    NOT NULL REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    role     regrole NOT NULL,
    PRIMARY KEY (endpoint, role)
);
COMMENT ON TABLE outbox.endpoint_consumers IS
    'pg_outbox consume rights: the roles that may read each pull endpoint; manage with outbox.grant_consume()';
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_consumers', '');
