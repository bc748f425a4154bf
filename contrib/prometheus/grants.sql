-- The grants the queries of pg_outbox_queries.yaml need, for the role the exporter
-- logs in as.  Run in every database that has pg_outbox (as its owner or a superuser),
-- after CREATE EXTENSION:
--
--   psql -d app -v role=prometheus -f contrib/prometheus/grants.sql
--
-- They show counts, ages, endpoint names, reason codes and event types: no payload,
-- no URL, no header, no secret (the views read the tables with their owner's rights).
-- pg_outbox_deliveries_total needs outbox._delivery_counters() (the worker's counters)
-- and outbox.worker_status() (which database the worker serves).
\if :{?role}
\else
\set role prometheus
\endif
GRANT USAGE ON SCHEMA outbox, dlq TO :"role";
GRANT SELECT ON outbox.endpoint_stats, dlq.summary TO :"role";
GRANT EXECUTE ON FUNCTION outbox._delivery_counters(), outbox._unmatched_publishes(), outbox.worker_status()
    TO :"role";
