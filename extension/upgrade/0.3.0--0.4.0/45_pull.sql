-- Pull endpoints (docs/delivery.md, Pull endpoints): the tables' changes, as
-- extension/src/37_pull_tables.sql makes them on a fresh install. create_endpoint's new
-- signature (its pull option) replaces the one 30_formats.sql drops.

ALTER TABLE outbox.endpoints ADD COLUMN pull boolean NOT NULL DEFAULT false;
ALTER TABLE outbox.endpoints DROP CONSTRAINT endpoints_url_xor_channel;
ALTER TABLE outbox.endpoints ADD CONSTRAINT endpoints_one_destination
    CHECK (num_nonnulls(url, channel, nullif(pull, false)) = 1);

ALTER TABLE outbox.messages ADD COLUMN read_until timestamptz;

CREATE TABLE outbox.endpoint_consumers (
    endpoint text    NOT NULL REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    role     regrole NOT NULL,
    PRIMARY KEY (endpoint, role)
);
COMMENT ON TABLE outbox.endpoint_consumers IS
    'pg_outbox consume rights: the roles that may read each pull endpoint; manage with outbox.grant_consume()';
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_consumers', '');
