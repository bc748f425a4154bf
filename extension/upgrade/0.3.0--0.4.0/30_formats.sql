-- Formats and batches (docs/delivery.md, CloudEvents and Batches): three columns of
-- outbox.endpoints, and create_endpoint / alter_endpoint with the arguments that set
-- them (a new signature: the old functions go, their grants are given back by
-- 50_give_back_grants.sql).
ALTER TABLE outbox.endpoints
    ADD COLUMN format text NOT NULL DEFAULT 'standard-webhooks'
        CHECK (format IN ('standard-webhooks', 'cloudevents-binary', 'cloudevents-structured')),
    ADD COLUMN source text CHECK (char_length(source) BETWEEN 1 AND 1000 AND source !~ '[[:cntrl:]]'),
    ADD COLUMN batch_size int NOT NULL DEFAULT 1 CHECK (batch_size BETWEEN 1 AND 1000),
    ADD CONSTRAINT endpoints_notify_format
        CHECK (channel IS NULL OR (format = 'standard-webhooks' AND source IS NULL AND batch_size = 1));

DROP FUNCTION outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int);
DROP FUNCTION outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int);
