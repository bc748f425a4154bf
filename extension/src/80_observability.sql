------------------------------------------------------------------------------------------
-- Observability
------------------------------------------------------------------------------------------

-- Open dead letters by endpoint, reason and event type.
CREATE OR REPLACE VIEW dlq.summary AS
SELECT dl.endpoint,
       dl.reason_code,
       dl.event_type,
       count(*)        AS count,
       min(dl.dead_at) AS oldest,
       max(dl.dead_at) AS newest
  FROM dlq.dead_letters dl
 WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
 GROUP BY dl.endpoint, dl.reason_code, dl.event_type;
COMMENT ON VIEW dlq.summary IS 'open dead letters by endpoint, reason_code and event_type';

-- Messages per endpoint, for endpoint_stats and metrics() (a view, not a function: a
-- view's tables are read with its owner's rights, so operators who may read
-- endpoint_stats need no right on the tables behind it): undelivered ones read from
-- the queue (its size is the backlog), in-flight ones from the worker's claims and the
-- pull readers' holds (the number of messages in hand, not the backlog), and
-- delivered ones from the counts the worker keeps per history partition, so that the
-- cost never depends on the retained history.  Replayed messages the worker has not yet
-- moved into the queue (outbox.replay_queue) are pending.  oldest_due: when the oldest
-- waiting message first became due (its created_at, or its deliver_at for a scheduled
-- message not yet attempted); a message whose deliver_at is still in the future is not
-- waiting yet.  In-flight messages count as waiting.  A message a reader of a pull endpoint
-- holds (docs/delivery.md, Pull endpoints) is in flight.  Every endpoint that appears
-- anywhere has a row, whether or not it still exists.
CREATE OR REPLACE VIEW outbox._message_counts AS
SELECT n.endpoint,
       coalesce(q.undelivered, 0) - coalesce(f.in_flight, 0) AS pending,
       coalesce(f.in_flight, 0)                              AS in_flight,
       coalesce(h.sent, 0)                                   AS sent,
       q.oldest_due
  FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
        UNION SELECT DISTINCT m.endpoint FROM outbox.messages m
        UNION SELECT hc.endpoint FROM outbox.history_counts hc GROUP BY hc.endpoint HAVING sum(hc.sent) > 0
        UNION SELECT DISTINCT hd.endpoint FROM outbox.history_default hd) n
  LEFT JOIN (SELECT m.endpoint, count(*) AS undelivered,
                    min(CASE WHEN m.attempts = 0 THEN m.next_attempt_at ELSE m.created_at END)
                        FILTER (WHERE m.attempts > 0 OR m.next_attempt_at <= now()) AS oldest_due
               FROM (SELECT m.endpoint, m.attempts, m.next_attempt_at, m.created_at FROM outbox.messages m
                     UNION ALL
                     SELECT r.endpoint, 0, r.replayed_at, r.replayed_at FROM outbox.replay_queue r) m
              GROUP BY m.endpoint) q ON q.endpoint = n.endpoint
  LEFT JOIN (SELECT m.endpoint, count(DISTINCT m.id) AS in_flight
               FROM (SELECT c.message_ids FROM outbox.claims c
                     UNION ALL
                     SELECT h.message_ids FROM outbox.holds h WHERE h.held_until > clock_timestamp()) x
              CROSS JOIN unnest(x.message_ids) AS i(id)
               JOIN outbox.messages m ON m.id = i.id
              GROUP BY m.endpoint) f ON f.endpoint = n.endpoint
  LEFT JOIN (SELECT x.endpoint, sum(x.sent)::bigint AS sent
               FROM (SELECT hc.endpoint, hc.sent FROM outbox.history_counts hc
                     UNION ALL
                     SELECT hd.endpoint, 1 FROM outbox.history_default hd) x
              GROUP BY x.endpoint) h ON h.endpoint = n.endpoint;
COMMENT ON VIEW outbox._message_counts IS
    'pg_outbox: messages per endpoint (pending, in flight, delivered and kept) for endpoint_stats and metrics()';

-- Per endpoint: messages waiting, in flight and delivered (kept in the history), open
-- dead letters, the age of the oldest waiting message, pause (and why the worker paused
-- it), circuit breaker, and since when it has answered nothing but failures.
CREATE OR REPLACE VIEW outbox.endpoint_stats AS
SELECT e.name                              AS endpoint,
       coalesce(m.pending, 0)              AS pending,
       coalesce(m.in_flight, 0)            AS in_flight,
       coalesce(m.sent, 0)                 AS sent,
       coalesce(d.dead, 0)                 AS dead,
       now() - m.oldest_due                AS oldest_pending_age,
       e.paused,
       e.breaker_state,
       e.breaker_failures,
       e.breaker_open_until,
       CASE WHEN e.paused THEN e.paused_reason END AS paused_reason,
       e.failing_since
  FROM outbox.endpoints e
  LEFT JOIN outbox._message_counts m ON m.endpoint = e.name
  LEFT JOIN (SELECT dl.endpoint, count(*) AS dead
               FROM dlq.dead_letters dl
              WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
              GROUP BY dl.endpoint) d ON d.endpoint = e.name;
COMMENT ON VIEW outbox.endpoint_stats IS
    'per endpoint: pending, in_flight, sent (retained), dead (open), oldest pending age, paused and why, circuit breaker, failing since';

-- A Prometheus label value: backslash, double quote and line feed escaped.
CREATE OR REPLACE FUNCTION outbox._prom_label(value text) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
    RETURN replace(replace(replace(value, E'\\', E'\\\\'), '"', E'\\"'), E'\n', E'\\n');

-- Prometheus text exposition format (version 0.0.4).  Every endpoint gets every series
-- of the gauges, zeros included, so an alert never sees a series vanish.  Series of
-- endpoints that no longer exist appear while they still have messages, dead letters or
-- counters.  pg_outbox_circuit_open is 1 while the breaker is open or half-open.
-- Never contains a secret.
CREATE OR REPLACE FUNCTION outbox.metrics()
    RETURNS text
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    v_out text := '';
    v_family text;
BEGIN
    -- pg_outbox_messages{endpoint,status}
    SELECT coalesce(string_agg(format('pg_outbox_messages{endpoint="%s",status="%s"} %s',
                                      outbox._prom_label(c.endpoint), st.status,
                                      CASE st.ord WHEN 1 THEN c.pending WHEN 2 THEN c.in_flight ELSE c.sent END),
                               E'\n' ORDER BY c.endpoint, st.ord), '')
      INTO v_family
      FROM outbox._message_counts c
     CROSS JOIN (VALUES (1, 'pending'), (2, 'in_flight'), (3, 'sent')) st(ord, status);
    v_out := v_out
          || E'# HELP pg_outbox_messages Messages in the outbox by endpoint and status.\n'
          || E'# TYPE pg_outbox_messages gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_oldest_pending_age_seconds{endpoint}
    SELECT coalesce(string_agg(format('pg_outbox_oldest_pending_age_seconds{endpoint="%s"} %s',
                                      outbox._prom_label(s.endpoint),
                                      coalesce(round(extract(epoch FROM s.oldest_pending_age), 3), 0)),
                               E'\n' ORDER BY s.endpoint), '')
      INTO v_family
      FROM outbox.endpoint_stats s;
    v_out := v_out
          || E'# HELP pg_outbox_oldest_pending_age_seconds Age of the oldest message waiting for delivery (0 if none).\n'
          || E'# TYPE pg_outbox_oldest_pending_age_seconds gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_deliveries_total{endpoint,result}
    SELECT coalesce(string_agg(format('pg_outbox_deliveries_total{endpoint="%s",result="%s"} %s',
                                      outbox._prom_label(n.endpoint), r.result,
                                      coalesce(c.count, 0)),
                               E'\n' ORDER BY n.endpoint, r.ord), '')
      INTO v_family
      FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
            UNION
            SELECT dc.endpoint FROM outbox._delivery_counters() dc) n
     CROSS JOIN (VALUES (1, 'sent'), (2, 'retry'), (3, 'dead')) r(ord, result)
      LEFT JOIN (SELECT dc.endpoint, dc.result, sum(dc.count) AS count
                   FROM outbox._delivery_counters() dc GROUP BY dc.endpoint, dc.result) c
             ON c.endpoint = n.endpoint AND c.result = r.result;
    v_out := v_out
          || E'# HELP pg_outbox_deliveries_total Delivery attempts by result since the worker started.\n'
          || E'# TYPE pg_outbox_deliveries_total counter\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_dead_letters{endpoint,reason_code}
    SELECT coalesce(string_agg(format('pg_outbox_dead_letters{endpoint="%s",reason_code="%s"} %s',
                                      outbox._prom_label(n.endpoint), rc.reason_code,
                                      coalesce(c.n, 0)),
                               E'\n' ORDER BY n.endpoint, rc.reason_code), '')
      INTO v_family
      FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
            UNION
            SELECT DISTINCT dl.endpoint FROM dlq.dead_letters dl
             WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL) n
     CROSS JOIN (VALUES ('ABORTED_BY_RECEIVER'), ('EGRESS_DENIED'), ('ENDPOINT_DROPPED'), ('HTTP_CLIENT_ERROR'),
                        ('INVALID_MESSAGE'), ('PAYLOAD_TOO_LARGE'), ('REJECTED_BY_CONSUMER'), ('RETRY_EXHAUSTED')) rc(reason_code)
      LEFT JOIN (SELECT dl.endpoint, dl.reason_code, count(*) AS n
                   FROM dlq.dead_letters dl
                  WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
                  GROUP BY dl.endpoint, dl.reason_code) c
             ON c.endpoint = n.endpoint AND c.reason_code = rc.reason_code;
    v_out := v_out
          || E'# HELP pg_outbox_dead_letters Open dead letters (neither requeued nor discarded).\n'
          || E'# TYPE pg_outbox_dead_letters gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_dead_letter_oldest_age_seconds{endpoint}
    SELECT coalesce(string_agg(format('pg_outbox_dead_letter_oldest_age_seconds{endpoint="%s"} %s',
                                      outbox._prom_label(n.endpoint),
                                      coalesce(round(extract(epoch FROM now() - c.oldest), 3), 0)),
                               E'\n' ORDER BY n.endpoint), '')
      INTO v_family
      FROM (SELECT e.name AS endpoint FROM outbox.endpoints e
            UNION
            SELECT DISTINCT dl.endpoint FROM dlq.dead_letters dl
             WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL) n
      LEFT JOIN (SELECT dl.endpoint, min(dl.dead_at) AS oldest
                   FROM dlq.dead_letters dl
                  WHERE dl.requeued_at IS NULL AND dl.discarded_at IS NULL
                  GROUP BY dl.endpoint) c
             ON c.endpoint = n.endpoint;
    v_out := v_out
          || E'# HELP pg_outbox_dead_letter_oldest_age_seconds Age of the oldest open dead letter (0 if none).\n'
          || E'# TYPE pg_outbox_dead_letter_oldest_age_seconds gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_circuit_open{endpoint} and pg_outbox_endpoint_paused{endpoint}
    SELECT coalesce(string_agg(format('pg_outbox_circuit_open{endpoint="%s"} %s',
                                      outbox._prom_label(e.name),
                                      CASE WHEN e.breaker_state = 'closed' THEN 0 ELSE 1 END),
                               E'\n' ORDER BY e.name), '')
      INTO v_family
      FROM outbox.endpoints e;
    v_out := v_out
          || E'# HELP pg_outbox_circuit_open 1 while the endpoint''s circuit breaker is open or half-open.\n'
          || E'# TYPE pg_outbox_circuit_open gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    SELECT coalesce(string_agg(format('pg_outbox_endpoint_paused{endpoint="%s"} %s',
                                      outbox._prom_label(e.name),
                                      CASE WHEN e.paused THEN 1 ELSE 0 END),
                               E'\n' ORDER BY e.name), '')
      INTO v_family
      FROM outbox.endpoints e;
    v_out := v_out
          || E'# HELP pg_outbox_endpoint_paused 1 while the endpoint is paused.\n'
          || E'# TYPE pg_outbox_endpoint_paused gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_auto_paused{endpoint,reason}: 1 while the worker keeps the endpoint
    -- paused for that reason (docs/operations.md, Endpoints that retire themselves)
    SELECT coalesce(string_agg(format('pg_outbox_auto_paused{endpoint="%s",reason="%s"} %s',
                                      outbox._prom_label(e.name), r.reason,
                                      CASE WHEN e.paused AND e.paused_reason = r.reason THEN 1 ELSE 0 END),
                               E'\n' ORDER BY e.name, r.reason), '')
      INTO v_family
      FROM outbox.endpoints e
     CROSS JOIN (VALUES ('FAILING'), ('GONE')) r(reason);
    v_out := v_out
          || E'# HELP pg_outbox_auto_paused 1 while the endpoint is paused for this reason by the worker.\n'
          || E'# TYPE pg_outbox_auto_paused gauge\n'
          || v_family || CASE WHEN v_family <> '' THEN E'\n' ELSE '' END;

    -- pg_outbox_publishes_unmatched_total (docs/delivery.md, Publish and subscribe)
    v_out := v_out
          || E'# HELP pg_outbox_publishes_unmatched_total outbox.publish calls that found no subscriber, since the server started.\n'
          || E'# TYPE pg_outbox_publishes_unmatched_total counter\n'
          || format(E'pg_outbox_publishes_unmatched_total %s\n', outbox._unmatched_publishes());

    RETURN v_out;
END
$fn$;
COMMENT ON FUNCTION outbox.metrics() IS 'pg_outbox metrics in the Prometheus text exposition format';

