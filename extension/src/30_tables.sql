------------------------------------------------------------------------------------------
-- Tables
------------------------------------------------------------------------------------------

-- One row per destination.  NULL timeout_ms / max_attempts / concurrency mean "use the
-- GUC" (pg_outbox.http_timeout, pg_outbox.max_attempts, pg_outbox.endpoint_concurrency);
-- NULL max_pending and rate_limit mean no limit.
-- The breaker_* columns belong to the worker's circuit breaker.  paused_reason says why
-- the worker paused the endpoint (docs/operations.md, Endpoints that retire themselves;
-- NULL when an operator paused it), failing_since when its current streak of nothing
-- but failures began, resumed_at when an operator last resumed it (the worker forgets
-- failures before that).
CREATE TABLE outbox.endpoints (
    name                text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_.-]{0,62}$'),
    url                 text,
    channel             text,
    headers             jsonb NOT NULL DEFAULT '{}',
    timeout_ms          int CHECK (timeout_ms > 0 AND timeout_ms <= 300000),  -- at most 5 minutes
    max_attempts        int CHECK (max_attempts > 0),
    ordered             boolean NOT NULL DEFAULT false,
    max_pending         bigint CHECK (max_pending > 0),
    paused              boolean NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now(),
    breaker_state       text NOT NULL DEFAULT 'closed'
                        CHECK (breaker_state IN ('closed', 'open', 'half_open')),
    breaker_failures    int NOT NULL DEFAULT 0,          -- consecutive retryable failures
    breaker_open_until  timestamptz,
    breaker_cooldown_ms bigint NOT NULL DEFAULT 0,
    concurrency         int CHECK (concurrency > 0),     -- most requests in flight (0.3.0)
    rate_limit          int CHECK (rate_limit > 0),      -- most messages per second; NULL: none (0.3.0)
    -- What a request looks like (docs/delivery.md, CloudEvents and Batches) (0.4.0):
    -- the body's format, the CloudEvents source (NULL: /pg_outbox/<database>/<endpoint>),
    -- and the most messages one request carries.
    format              text NOT NULL DEFAULT 'standard-webhooks'
                        CHECK (format IN ('standard-webhooks', 'cloudevents-binary', 'cloudevents-structured')),
    source              text CHECK (char_length(source) BETWEEN 1 AND 1000 AND source !~ '[[:cntrl:]]'),
    batch_size          int NOT NULL DEFAULT 1 CHECK (batch_size BETWEEN 1 AND 1000),
    paused_reason       text CONSTRAINT endpoints_paused_reason_check
                        CHECK (paused_reason IN ('FAILING', 'GONE')),                        -- (0.4.0)
    failing_since       timestamptz,                                                          -- (0.4.0)
    resumed_at          timestamptz,                                                          -- (0.4.0)
    CONSTRAINT endpoints_url_xor_channel
        CHECK ((url IS NULL) <> (channel IS NULL)),      -- HTTP or NOTIFY, never both
    CONSTRAINT endpoints_notify_format                   -- a NOTIFY carries its own envelope, one message each
        CHECK (channel IS NULL OR (format = 'standard-webhooks' AND source IS NULL AND batch_size = 1))
);
COMMENT ON TABLE outbox.endpoints IS
    'pg_outbox destinations: an http(s) url or a NOTIFY channel; manage with outbox.create_endpoint() and friends';

-- Webhook signing secrets, apart from the endpoints so that reading the endpoints never
-- reveals one.  Nobody but the table's owner (the superuser that created the extension,
-- whom the worker and the SECURITY DEFINER functions act as) may read it.
-- An endpoint has at most one current secret (expires_at NULL) and, while a rotation's
-- grace lasts (outbox.rotate_secret), the one it replaced, which signs until expires_at
-- (0.4.0).  The worker stops signing with a secret at its expiry and then deletes it.
CREATE TABLE outbox.endpoint_secrets (
    endpoint   text NOT NULL REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    secret     text NOT NULL,
    expires_at timestamptz,
    PRIMARY KEY (endpoint, secret)
);
CREATE UNIQUE INDEX endpoint_secrets_current ON outbox.endpoint_secrets (endpoint) WHERE expires_at IS NULL;
COMMENT ON TABLE outbox.endpoint_secrets IS
    'pg_outbox webhook secrets (Standard Webhooks); readable by the extension owner only';

-- Who may send to which endpoint (outbox.grant_send / outbox.revoke_send).  A role may
-- enqueue to an endpoint when it has the privileges of a role listed for it (as for a
-- GRANT: membership with INHERIT, or SET ROLE), or when PUBLIC ('-', oid 0) is listed.
-- regrole, so that pg_dump writes role names, not oids; a row of a role since dropped
-- grants nothing.
CREATE TABLE outbox.endpoint_senders (
    endpoint text    NOT NULL REFERENCES outbox.endpoints (name) ON DELETE CASCADE,
    role     regrole NOT NULL,
    PRIMARY KEY (endpoint, role)
);
COMMENT ON TABLE outbox.endpoint_senders IS
    'pg_outbox send rights: the roles that may enqueue to each endpoint; manage with outbox.grant_send()';

-- The outbox proper: the queue, holding only the messages not yet delivered (pending,
-- or claimed by the worker and in flight).  A delivered message leaves it in the
-- transaction that records the delivery (to outbox.history, or nowhere when
-- pg_outbox.sent_retention is 0); a dead one moves to dlq.dead_letters.  Its size is
-- the backlog, never the history.
--
-- There is deliberately no foreign key to outbox.endpoints: every producer's INSERT
-- would lock the endpoint row FOR KEY SHARE, and one hot endpoint shared by many
-- concurrent producers turns that into multixact contention.  Instead
-- outbox.enqueue() checks that the endpoint exists, and the worker dead-letters a row
-- whose endpoint has gone (reason INVALID_MESSAGE).
--
-- The worker writes nothing to a row when it claims it (see outbox.claims): a message
-- costs one INSERT, one DELETE and, when kept, one INSERT into the history.  A retry
-- is the only UPDATE.  A queue table deletes its rows soon after inserting them, so
-- autovacuum is asked to look at it far more often than at an ordinary table.
CREATE TABLE outbox.messages (
    id               bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    endpoint         text NOT NULL,
    -- The bounds below hold for every row, however it was inserted: a row the worker
    -- could not index, header or schedule would stall the settle of a whole batch.
    event_type       text CHECK (char_length(event_type) BETWEEN 1 AND 200 AND event_type !~ '[[:cntrl:]]'),
    payload          jsonb NOT NULL,
    headers          jsonb,
    ordering_key     text CHECK (char_length(ordering_key) BETWEEN 1 AND 200),
    idempotency_key  text CHECK (char_length(idempotency_key) BETWEEN 1 AND 200),
    attempts         int NOT NULL DEFAULT 0,           -- attempts started so far
    next_attempt_at  timestamptz NOT NULL DEFAULT now() CHECK (isfinite(next_attempt_at)),
    last_error       text,
    last_http_status int,
    first_failed_at  timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- Ordered endpoints: NULL for the head of its ordering key (and for every message
    -- that has no key or whose endpoint is not ordered); for a message waiting behind
    -- the head, its place in the key's commit order (src/pg/ordering/).
    ordering_seq     bigint CHECK (ordering_seq IS NULL OR ordering_key IS NOT NULL)
) WITH (autovacuum_vacuum_scale_factor = 0.02,
        autovacuum_vacuum_insert_scale_factor = 0.05,
        autovacuum_analyze_scale_factor = 0.05);
COMMENT ON TABLE outbox.messages IS
    'pg_outbox messages waiting for delivery (the backlog); outbox.message(id) finds any message';

-- The worker's claim, one endpoint at a time: that endpoint's due messages, oldest
-- first (endpoint = $1 AND next_attempt_at <= now() ORDER BY next_attempt_at); messages
-- due at the same moment come in storage order, which is enqueue order but for the rare
-- row that moved.  The id is deliberately not a column: with it, "id = ANY (...)"
-- (the settle, the fetch after the claim) could be planned as a scan of this whole index
-- whenever the statistics call the queue empty (just after a VACUUM of the drained
-- queue), and only the primary key must ever answer that.
-- Leading with the endpoint keeps the claim's cost proportional to what it takes,
-- whatever backlog paused or circuit-open endpoints hold; the leading column also
-- answers "how many undelivered messages has this endpoint?" (max_pending,
-- drop_endpoint), with messages_ordering_idx for those waiting behind their key's head:
-- they are not in it, so that a blocked key costs the claim nothing, however many
-- messages wait behind it.
CREATE INDEX messages_claim_idx ON outbox.messages (endpoint, next_attempt_at) WHERE ordering_seq IS NULL;
-- Idempotent enqueue: INSERT ... ON CONFLICT (endpoint, idempotency_key) DO NOTHING.
CREATE UNIQUE INDEX messages_idempotency_key_idx ON outbox.messages (endpoint, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
-- Ordered endpoints: a key's head first, then the messages waiting behind it in commit
-- order (who follows whom at commit, who is next when the head leaves).
CREATE INDEX messages_ordering_idx ON outbox.messages (endpoint, ordering_key, ordering_seq NULLS FIRST)
    WHERE ordering_key IS NOT NULL;
-- The commit order of the messages of each ordering key (outbox.messages.ordering_seq).
CREATE SEQUENCE outbox.commit_order;

-- Wake the worker at commit after every INSERT statement (enqueue, requeue, or a plain
-- INSERT by a privileged role).
CREATE TRIGGER messages_wake
    AFTER INSERT ON outbox.messages
    FOR EACH STATEMENT EXECUTE FUNCTION outbox._wake_at_commit();
-- Per-key commit order (docs/delivery.md, Ordering; src/pg/ordering/ordering.cpp): at commit, a new
-- message of an ordered endpoint follows its key's head if there is one; when a head
-- leaves the queue or changes key, the next message of the key becomes the head (the
-- worker's settle does that for the heads it moves, in the same statement).  The
-- keyed rows of a plain INSERT are noted at once, so that the commit places all of a
-- transaction's rows together (outbox.enqueue notes its own); so are its rows' counts
-- for max_pending, kept in shared memory, which rows removed by anyone but the worker
-- make the worker count again (src/pg/producer/queued_count.cpp).  A message moved to another
-- endpoint or key keeps no place in the old one; it takes its place in the new one at the
-- move's commit, as an inserted message does (behind the key's messages, or its head).
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
CREATE CONSTRAINT TRIGGER messages_moved_at_commit
    AFTER UPDATE OF endpoint, ordering_key ON outbox.messages DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW WHEN (NEW.ordering_key IS NOT NULL
                       AND (OLD.endpoint IS DISTINCT FROM NEW.endpoint OR OLD.ordering_key IS DISTINCT FROM NEW.ordering_key))
    EXECUTE FUNCTION outbox._order_at_commit();
CREATE TRIGGER messages_next_in_order
    AFTER UPDATE OF endpoint, ordering_key ON outbox.messages
    FOR EACH ROW WHEN (OLD.ordering_key IS NOT NULL AND outbox._trigger_promotes())
    EXECUTE FUNCTION outbox._next_in_order();
CREATE TRIGGER messages_heads_gone
    AFTER DELETE ON outbox.messages REFERENCING OLD TABLE AS gone
    FOR EACH STATEMENT WHEN (outbox._trigger_promotes())
    EXECUTE FUNCTION outbox._heads_gone();

-- Messages that will not be delivered as they stand, with what is needed to understand
-- why and to put them back (dlq.requeue).  "Open" = neither requeued nor discarded.
-- A row stays after requeue/discard as evidence, until pg_outbox.dlq_retention has
-- passed since it was handled; an open row stays until someone handles it.
CREATE TABLE dlq.dead_letters (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id         bigint NOT NULL,                 -- its id in outbox.messages
    endpoint           text NOT NULL,
    event_type         text,
    payload            jsonb NOT NULL,
    headers            jsonb,
    ordering_key       text,
    idempotency_key    text,
    reason_code        text NOT NULL CHECK (reason_code IN ('HTTP_CLIENT_ERROR', 'PAYLOAD_TOO_LARGE',
                                                        'RETRY_EXHAUSTED', 'ENDPOINT_DROPPED',
                                                        'INVALID_MESSAGE', 'EGRESS_DENIED',
                                                        'ABORTED_BY_RECEIVER', 'REJECTED_BY_CONSUMER')),
    error_message      text,
    http_status        int,
    response_body      text,                            -- the first 1 KiB
    attempts           int NOT NULL DEFAULT 0,
    first_failed_at    timestamptz,
    last_failed_at     timestamptz,
    message_created_at timestamptz NOT NULL,
    dead_at            timestamptz NOT NULL DEFAULT now(),
    requeued_at        timestamptz,
    requeued_as        bigint,                          -- the new outbox.messages id
    discarded_at       timestamptz,
    note               text
);
COMMENT ON TABLE dlq.dead_letters IS
    'pg_outbox dead letters: inspect, then dlq.requeue() or dlq.discard()';

-- "What is dead for this endpoint?" (open rows), also dlq.requeue_all(endpoint => ...).
CREATE INDEX dead_letters_endpoint_idx ON dlq.dead_letters (endpoint, dead_at)
    WHERE requeued_at IS NULL AND discarded_at IS NULL;
-- "What died for this reason?" (open rows), also dlq.requeue_all(reason_code => ...).
CREATE INDEX dead_letters_reason_idx ON dlq.dead_letters (reason_code, dead_at)
    WHERE requeued_at IS NULL AND discarded_at IS NULL;
-- "Which events of this type died, and when?" (open or not).
CREATE INDEX dead_letters_event_type_idx ON dlq.dead_letters (event_type, dead_at);
-- Retention (pg_outbox.dlq_retention) of handled dead letters, by when they were
-- handled.  Open ones are never deleted automatically, so they are not in it.
CREATE INDEX dead_letters_handled_idx ON dlq.dead_letters ((COALESCE(requeued_at, discarded_at)))
    WHERE requeued_at IS NOT NULL OR discarded_at IS NOT NULL;
-- "What died since ...?".
CREATE INDEX dead_letters_dead_at_idx ON dlq.dead_letters (dead_at);

-- The tables hold user data: pg_dump must dump their rows (not their definitions).
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoints', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_secrets', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.endpoint_senders', '');
SELECT pg_catalog.pg_extension_config_dump('outbox.messages', '');
SELECT pg_catalog.pg_extension_config_dump('dlq.dead_letters', '');
-- ... and the identity sequences' positions, so restored ids are never handed out again.
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('outbox.messages', 'id'), '');
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('dlq.dead_letters', 'id'), '');

-- ... and the commit order's, so that a restored key's next message comes after its
-- restored ones.
SELECT pg_catalog.pg_extension_config_dump('outbox.commit_order', '');
