------------------------------------------------------------------------------------------
-- Replayed messages on their way into the queue (0.4.0; docs/delivery.md, Replay).  The
-- update from 0.3.0 runs this file as it is (the Makefile's UPDATE_TABLES).
------------------------------------------------------------------------------------------

-- outbox.replay writes the window's messages here, in their delivery order (n), and the
-- worker moves them into outbox.messages in batches (outbox._replays_move); a pull or
-- an ordered endpoint's go into the queue at once (extension/src/65_replay.sql).  A row
-- holds only what a message is made of: no index but the order, no trigger, so that a
-- replay of 100,000 messages is one cheap write and its caller does not pay the queue's
-- indexes; the worker pays them, a batch at a time, between its deliveries.  The checks
-- are the queue's: a row the queue would refuse fails the replay, not the worker's move.
-- Dumped with the queue: a replay waiting here is as much queued as a message.
CREATE TABLE outbox.replay_queue (
    n            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint     text  NOT NULL,
    event_type   text  CHECK (char_length(event_type) BETWEEN 1 AND 200 AND event_type !~ '[[:cntrl:]]'),
    payload      jsonb NOT NULL,
    headers      jsonb,
    ordering_key text  CHECK (char_length(ordering_key) BETWEEN 1 AND 200),
    webhook_id   text  NOT NULL CHECK (char_length(webhook_id) BETWEEN 1 AND 200),
    replayed_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE outbox.replay_queue IS
    'pg_outbox: replayed messages waiting for the worker to move them into outbox.messages';
SELECT pg_catalog.pg_extension_config_dump('outbox.replay_queue', '');
SELECT pg_catalog.pg_extension_config_dump(pg_catalog.pg_get_serial_sequence('outbox.replay_queue', 'n'), '');
