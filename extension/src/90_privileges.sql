------------------------------------------------------------------------------------------
-- Privileges: nothing for PUBLIC.
------------------------------------------------------------------------------------------

REVOKE ALL ON SCHEMA outbox, dlq FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA outbox, dlq FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA outbox, dlq FROM PUBLIC;
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA outbox, dlq FROM PUBLIC;

-- The grants a deployment needs (documented in docs/operations.md, Privileges; the regress suite applies
-- exactly these to its roles).  Replace producer/operator with your roles.
--
--   -- producer: enqueues in its own transactions, to the endpoints it was granted;
--   -- reads nothing, creates nothing.
--   GRANT USAGE ON SCHEMA outbox TO producer;
--   GRANT EXECUTE ON FUNCTION outbox.enqueue(text, jsonb, text, jsonb, text, text, timestamptz) TO producer;
--   GRANT EXECUTE ON FUNCTION outbox.publish(text, jsonb, jsonb, text, text, timestamptz) TO producer;
--   SELECT outbox.grant_send('billing', 'producer');     -- per endpoint
--
--   -- consumer: reads, acknowledges and refuses the messages of the pull endpoints it
--   -- was granted (docs/delivery.md, Pull endpoints); reads nothing else.
--   GRANT USAGE ON SCHEMA outbox TO consumer;
--   GRANT EXECUTE ON FUNCTION outbox.read(text, int, interval, interval),
--       outbox.ack(text, bigint[]), outbox.nack(text, bigint, text, interval, boolean)
--     TO consumer;
--   SELECT outbox.grant_consume('parser', 'consumer');   -- per pull endpoint
--
--   -- operator: manages endpoints, inspects and redrives dead letters, reads stats and
--   -- metrics.  Never the secrets (outbox.endpoint_secrets stays owner-only).
--   GRANT USAGE ON SCHEMA outbox, dlq TO operator;
--   GRANT EXECUTE ON FUNCTION
--       outbox.create_endpoint(text, text, text, jsonb, text, int, int, boolean, bigint, int, int, boolean, text, text, int),
--       outbox.alter_endpoint(text, text, jsonb, text, int, int, boolean, bigint, int, int, text, text, int),
--       outbox.drop_endpoint(text, boolean),
--       outbox.pause_endpoint(text),
--       outbox.resume_endpoint(text),
--       outbox.rotate_secret(text, text, interval),
--       outbox.endpoint_public_key(text),
--       outbox.purge(interval),
--       outbox.metrics(),
--       outbox.message(bigint),
--       outbox.worker_status(),
--       outbox.grant_send(text, name),
--       outbox.revoke_send(text, name),
--       outbox.grant_consume(text, name),
--       outbox.revoke_consume(text, name),
--       outbox.subscribe(text, text[]),
--       outbox.unsubscribe(text, text[]),
--       outbox.replay(text, timestamptz, timestamptz, text),
--       dlq.requeue(bigint, jsonb),
--       dlq.requeue_all(text, text, timestamptz),
--       dlq.discard(bigint, text)
--     TO operator;
--   GRANT SELECT ON outbox.endpoints, outbox.endpoint_senders, outbox.endpoint_consumers, outbox.messages, outbox.history,
--                   outbox.attempts, outbox.subscriptions, outbox.endpoint_stats, dlq.dead_letters, dlq.summary
--     TO operator;
