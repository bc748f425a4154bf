------------------------------------------------------------------------------------------
-- Publish and subscribe (0.4.0): which endpoints receive which event types of
-- outbox.publish (docs/delivery.md, Publish and subscribe); in the install script, and
-- run as it is by the update from 0.3.0 (the Makefile's UPDATE_TABLES).
------------------------------------------------------------------------------------------

-- One row per endpoint and event type pattern: an exact event type ('order.created') or
-- a prefix ('order.*': every event type that starts with 'order.').  outbox.subscribe
-- and outbox.unsubscribe manage it; an endpoint's subscriptions go with it.
CREATE TABLE outbox.endpoint_subscriptions (
    endpoint   text NOT NULL REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    event_type text NOT NULL CHECK (char_length(event_type) BETWEEN 1 AND 200
                                    AND event_type ~ '^[^*[:space:][:cntrl:]]+(\.\*)?$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint, event_type)
);
COMMENT ON TABLE outbox.endpoint_subscriptions IS
    'pg_outbox subscriptions: the event types (exact or prefix.*) each endpoint receives from outbox.publish';
-- outbox.publish: the subscribers of an event type's patterns, in one index scan.
CREATE INDEX endpoint_subscriptions_event_type_idx ON outbox.endpoint_subscriptions (event_type);
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_subscriptions', '');
