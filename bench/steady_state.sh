#!/usr/bin/env bash
# Steady state (the steady-state issue, item 9): producers enqueue RATE msg/s (default
# 5,000) for DURATION seconds (default 600) to nginx with pg_outbox.sent_retention = 1min, and
# every 30 s the table gets a row: messages delivered per second over the interval, the
# queue table's size (table + indexes + TOAST), the history's size (all partitions),
# the number of history partitions, and the worker's private memory (RssAnon). Flat
# columns are the result: nothing grows with the months a real outbox lives.
set -euo pipefail
RATE=${RATE:-5000}
SECONDS_TOTAL=${DURATION:-600}
source "$(dirname "$0")/setup.sh"

written=$(psql_cluster -At -c "SELECT now()")
psql_cluster -c "ALTER SYSTEM SET pg_outbox.sent_retention = '1min'" -c "SELECT pg_reload_conf()" >/dev/null
# Start the load only once the worker runs with the new retention and its 10 s partitions
# exist (the ones made for the default day, still empty, are gone by then).
for _ in $(seq 100); do
  [ "$(bench_sql -c "SELECT config_loaded_at > '$written' FROM outbox.worker_status()")" = t ] &&
    [ "$(bench_sql -c "SELECT count(*) > 0 AND bool_and(to_at - from_at = interval '10 s') FROM outbox._history_partitions()")" = t ] && break
  sleep 0.2
done
printf "SELECT outbox.enqueue('http', jsonb_build_object('order_id', random() * 1000000, 'customer', 'c42', 'note', repeat('x', 120)), event_type => 'order.created');\n" >"$work/steady.sql"
chmod 644 "$work/steady.sql"
as_postgres "$PG_BIN/pgbench" -n -h "$CLUSTER_DIR" -p "$CLUSTER_PORT" -U postgres -c 4 -j 2 -R "$RATE" \
  -T "$SECONDS_TOTAL" -f "$work/steady.sql" bench >"$work/pgbench.log" 2>&1 &
PGBENCH_PID=$!

delivered() { bench_sql -c "SELECT sent FROM outbox.worker_status()"; }
sample() {
  bench_sql -c "SELECT pg_size_pretty(pg_total_relation_size('outbox.messages')) || ' | '
                       || pg_size_pretty(coalesce((SELECT sum(pg_total_relation_size(partition))
                                                     FROM outbox._history_partitions()), 0)
                                         + pg_total_relation_size('outbox.history_default')) || ' | '
                       || (SELECT count(*) FROM outbox._history_partitions()) || ' | '
                       || (SELECT count(*) FROM outbox.messages)"
}
echo
echo "pg_outbox steady state: $RATE msg/s offered for $SECONDS_TOTAL s, sent_retention = 1min, $(nproc) cores"
echo "| t (s) | delivered msg/s | queue size | history size | partitions | backlog (rows) | worker RssAnon |"
echo "|---|---|---|---|---|---|---|"
last=$(delivered)
start=$(date +%s)
while kill -0 "$PGBENCH_PID" 2>/dev/null; do
  sleep 30
  now_sent=$(delivered)
  rss=$(awk '/^RssAnon:/ {print $2 " kB"}' "/proc/$(worker_pid)/status")
  echo "| $(($(date +%s) - start)) | $(((now_sent - last) / 30)) | $(sample) | $rss |"
  last=$now_sent
done
wait "$PGBENCH_PID" || true
grep -E "^(tps|number of transactions actually processed)" "$work/pgbench.log" || true
