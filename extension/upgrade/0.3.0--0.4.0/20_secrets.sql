
-- Secret rotation (0.4.0): an endpoint keeps, beside its current secret, the one a
-- rotation replaced until its grace ends (extension/src/30_tables.sql,
-- outbox.endpoint_secrets; outbox.rotate_secret in extension/src/42_secrets.sql).
-- Every secret of 0.3.0 is an endpoint's current one.
ALTER TABLE outbox.endpoint_secrets
    DROP CONSTRAINT endpoint_secrets_pkey,
    ADD COLUMN expires_at timestamptz,
    ADD PRIMARY KEY (endpoint, secret);
CREATE UNIQUE INDEX endpoint_secrets_current ON outbox.endpoint_secrets (endpoint) WHERE expires_at IS NULL;
