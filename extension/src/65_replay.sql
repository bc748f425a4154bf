------------------------------------------------------------------------------------------
-- Replay (docs/delivery.md, Replay): the messages delivered to an endpoint in a window
-- of time, sent again from the history
------------------------------------------------------------------------------------------

-- How far back the history of delivered messages is sure to go: pg_outbox.sent_retention
-- back from now, or the start of the oldest partition if that is later (a retention
-- raised recently); NULL when the retention is 0 (no history is kept).
CREATE OR REPLACE FUNCTION outbox._history_start()
    RETURNS timestamptz
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_retention interval := current_setting('pg_outbox.sent_retention')::interval;  -- '1d', '90s', '0'...
    v_oldest timestamptz;
BEGIN
    IF v_retention = interval '0' THEN
        RETURN NULL;
    END IF;
    SELECT min(p.from_at) INTO v_oldest FROM outbox._history_partitions() p;
    RETURN greatest(now() - v_retention, v_oldest);
END
$fn$;

-- Re-sends the messages delivered to endpoint with since <= sent_at < until (and of
-- event_type, when given) that are still in the history, as new messages with their
-- original webhook-id (as dlq.requeue keeps it: the original idempotency key, or its
-- msg_<instance>_<id>), in the order they were delivered (sent_at, then id): on an
-- ordered endpoint each key's replayed messages follow one another in that order.  One
-- whose webhook-id is still queued at the endpoint is not queued twice.  Like a requeue
-- it is an operator's decision: max_pending does not refuse it.  The messages are
-- written to outbox.replay_queue, which the worker moves into the queue in batches
-- (outbox._replays_move), woken at commit; those of a pull endpoint (its readers need no
-- worker) and of an ordered endpoint (its keys' commit order is this transaction's: a
-- later move would let a message committed to the key meanwhile go out before them) go
-- into the queue in this transaction.  Returns how many were queued.  Errors: NULL
-- arguments 22004; unknown endpoint 42704; since later than until, or a window that
-- starts before the history (the error says where it starts) 22023; no history kept
-- (sent_retention = 0) 55000.
CREATE OR REPLACE FUNCTION outbox.replay(endpoint text, since timestamptz, until timestamptz DEFAULT now(),
                                         event_type text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    v_start    timestamptz;
    v_instance text;
    v_legacy   bigint;
    v_count    bigint;
    v_direct   boolean;  -- into the queue now, not through outbox.replay_queue
BEGIN
    PERFORM outbox._sending_endpoint(replay.endpoint);
    IF replay.since IS NULL OR replay.until IS NULL THEN
        RAISE EXCEPTION 'since and until must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF replay.since > replay.until THEN
        RAISE EXCEPTION 'since must not be later than until' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_start := outbox._history_start();
    IF v_start IS NULL THEN
        RAISE EXCEPTION 'no history to replay: pg_outbox.sent_retention is 0'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  DETAIL = 'Delivered messages are deleted at once, so none can be sent again.',
                  HINT = 'Set pg_outbox.sent_retention to keep delivered messages for a while.';
    END IF;
    IF replay.since < v_start THEN
        RAISE EXCEPTION 'the window starts before the history: it goes back to %', v_start
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = format('Delivered messages are kept for pg_outbox.sent_retention (%s); since is %s.',
                                  current_setting('pg_outbox.sent_retention'), replay.since),
                  HINT = 'Replay from that moment on, or raise pg_outbox.sent_retention for the future.';
    END IF;

    -- KEY SHARE: a concurrent drop_endpoint waits, so the new messages are never orphaned.
    SELECT e.pull OR e.ordered INTO v_direct FROM outbox.endpoints e WHERE e.name = replay.endpoint FOR KEY SHARE;
    IF NOT FOUND THEN  -- dropped since the check above
        RAISE EXCEPTION 'endpoint "%" does not exist', replay.endpoint USING ERRCODE = 'undefined_object';
    END IF;
    -- The replays of an endpoint that go into the queue itself take turns (until their
    -- commit): two windows that overlap can hold the same webhook-ids in different
    -- orders (one replayed before: each window picks its earliest delivery), and two
    -- such INSERTs at once would wait for each other on the queue's unique index (a
    -- deadlock, 40P01).  The one that waits then finds the other's messages queued and
    -- leaves them.  (1868724337: the replays' lock, beside the ordering keys' 1868724335
    -- and the partitions' 1868724336.)  Those into replay_queue, which has no such
    -- index, need no turns: the worker's move queues a webhook-id once.
    IF v_direct THEN
        PERFORM pg_catalog.pg_advisory_xact_lock(1868724337, pg_catalog.hashtext(replay.endpoint));
    END IF;
    SELECT i.id, i.legacy_below INTO v_instance, v_legacy FROM outbox._instance() i;
    -- The window's partitions only (pruned by sent_at), in the history's order, which the
    -- commit order of an ordered endpoint follows (the new rows' ids, or replay_queue's
    -- n, are drawn in it).  A webhook-id delivered twice in the window (replayed before)
    -- is queued once, and one still queued at the endpoint is left alone (and the
    -- worker's move leaves alone one that a producer queues meanwhile).  One statement
    -- for both destinations, which differ in the table, the webhook-id's column and the
    -- conflict clause.
    EXECUTE format($q$
        INSERT INTO %s (endpoint, event_type, payload, headers, ordering_key, %I)
        SELECT r.endpoint, r.event_type, r.payload, r.headers, r.ordering_key, r.webhook_id
          FROM (SELECT DISTINCT ON (w.webhook_id) w.*
                  FROM (SELECT h.*, outbox._webhook_id(h.id, h.idempotency_key, $5, $6) AS webhook_id
                          FROM outbox.history h
                         WHERE h.endpoint = $1 AND h.sent_at >= $2 AND h.sent_at < $3
                           AND ($4 IS NULL OR h.event_type = $4)) w
                 ORDER BY w.webhook_id, w.sent_at, w.id) r
         WHERE NOT EXISTS (SELECT FROM outbox.messages q
                            WHERE q.endpoint = r.endpoint AND q.idempotency_key = r.webhook_id)
         ORDER BY r.sent_at, r.id %s$q$,
        CASE WHEN v_direct THEN 'outbox.messages' ELSE 'outbox.replay_queue' END,
        CASE WHEN v_direct THEN 'idempotency_key' ELSE 'webhook_id' END,
        CASE WHEN v_direct THEN 'ON CONFLICT (endpoint, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING' END)
        USING replay.endpoint, replay.since, replay.until, replay.event_type, v_instance, v_legacy;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    IF v_count > 0 AND NOT v_direct THEN
        PERFORM outbox._replays_at_commit();
    END IF;
    RETURN v_count;
END
$fn$;
COMMENT ON FUNCTION outbox.replay(text, timestamptz, timestamptz, text) IS
    'sends again the messages delivered to an endpoint in [since, until) that are still in the history, with their webhook-ids; returns how many';

-- The worker's move of replayed messages into the queue: the first max_rows of
-- outbox.replay_queue in their order (NULL: all; of one endpoint's, when given:
-- alter_endpoint's, for an endpoint that becomes ordered), in one transaction (a crash
-- undoes the move, never half of it).  A webhook-id queued at the endpoint meanwhile is
-- not queued twice, and the messages of an endpoint dropped meanwhile go (drop_endpoint
-- also removes them itself; this is for the drop that committed while the move waited):
-- the endpoints are locked as replay locks them, so that a drop waits for the move and
-- then finds its messages.
-- Returns how many rows it took from the replay queue.
CREATE OR REPLACE FUNCTION outbox._replays_move(max_rows bigint, endpoint text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
AS $fn$
    WITH moved AS (
        DELETE FROM outbox.replay_queue q
         WHERE q.n = ANY (ARRAY(SELECT r.n FROM outbox.replay_queue r
                                 WHERE _replays_move.endpoint IS NULL OR r.endpoint = _replays_move.endpoint
                                 ORDER BY r.n LIMIT max_rows))
        RETURNING q.*),
    destinations AS (
        SELECT e.name FROM outbox.endpoints e
         WHERE e.name IN (SELECT DISTINCT v.endpoint FROM moved v)
           FOR KEY SHARE),
    queued AS (
        INSERT INTO outbox.messages (endpoint, event_type, payload, headers, ordering_key, idempotency_key)
        SELECT v.endpoint, v.event_type, v.payload, v.headers, v.ordering_key, v.webhook_id
          FROM moved v
         WHERE v.endpoint IN (SELECT d.name FROM destinations d)
         ORDER BY v.n
        ON CONFLICT (endpoint, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING)
    SELECT count(*) FROM moved
$fn$;
