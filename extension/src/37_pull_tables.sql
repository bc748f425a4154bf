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

-- Until when a reader holds the message (set by outbox.read to its visibility, NULL
-- until the first read and again after a nack).  While it is ahead of the clock the
-- message is invisible to other reads and may be acknowledged; next_attempt_at is set
-- to the same moment, so that the message comes back by itself when nobody answers.
ALTER TABLE outbox.messages ADD COLUMN read_until timestamptz;

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
