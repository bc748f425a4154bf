#!/usr/bin/env bash
# Where a drain's time goes, statement by statement: the cluster of setup.sh restarted with
# pg_stat_statements (track = all, since the worker's statements all run inside SPI, and
# track_planning), then for each endpoint of ENDPOINTS (default "http ordered") DRAINS
# drains (default 2) of a BACKLOG-message backlog (1,000 keys for "ordered", ORDERED_KEYS
# to change it), each printed with the worker's CPU per message, thread by thread (from
# /proc/<pid>/task/*/stat: the main thread runs the SQL, the other one delivers), and the
# statements that took the most time, in µs and in buffers read per message delivered (an
# ordered drain's lookups read 1.33, a heap page for each message found and their share of
# index pages; in some drains 1.92, at three times the µs). Not a test; run by hand:
#   bash bench/drain_statements.sh
set -euo pipefail
source "$(dirname "$0")/setup.sh"

{
  echo "shared_preload_libraries = 'pg_outbox,pg_stat_statements'"
  echo "pg_stat_statements.track = all"
  echo "pg_stat_statements.track_planning = on"
} >>"$CLUSTER_DIR/data/postgresql.conf"
as_postgres "$PG_BIN/pg_ctl" -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w restart >/dev/null
for _ in $(seq 300); do [ -n "$(worker_pid)" ] && break; sleep 0.1; done
[ -n "$(worker_pid)" ] || { echo "the pg_outbox worker did not start again" >&2; exit 1; }
bench_sql -c "CREATE EXTENSION pg_stat_statements" >/dev/null

thread_ticks() {
  for task in /proc/"$1"/task/*; do awk -v t="${task##*/}" '{print t, $14 + $15}' "$task/stat"; done | sort
}

for endpoint in ${ENDPOINTS:-http ordered}; do
  keys=0
  [ "$endpoint" = ordered ] && keys=${ORDERED_KEYS:-1000}
  for drain_number in $(seq "${DRAINS:-2}"); do
    fill "$endpoint" "$BACKLOG" "$keys"
    bench_sql -c "SELECT pg_stat_statements_reset()" >/dev/null
    pid=$(worker_pid)
    thread_ticks "$pid" >"$work/ticks0"
    r=$(drain "$endpoint" "$BACKLOG")
    thread_ticks "$pid" >"$work/ticks1"
    threads=$(join "$work/ticks0" "$work/ticks1" | awk -v n="$BACKLOG" -v hz="$(getconf CLK_TCK)" \
      '{printf "%s%s %.1f", (NR > 1 ? ", " : ""), $1, ($3 - $2) * 1e6 / hz / n}')
    echo "== $endpoint, drain $drain_number: ${r% *} msg/s, ${r#* } ms of worker CPU per 1,000; µs a message by thread: $threads"
    echo "calls | plans | planning µs a message | execution µs a message | rows | buffers a message | statement"
    bench_sql -F ' | ' -c "
      SELECT calls, plans, round((total_plan_time * 1000 / $BACKLOG)::numeric, 2) AS plan_us,
             round((total_exec_time * 1000 / $BACKLOG)::numeric, 2) AS exec_us, rows,
             round((shared_blks_hit + shared_blks_read)::numeric / $BACKLOG, 2) AS buffers_a_message,
             left(regexp_replace(query, '\s+', ' ', 'g'), 100)
        FROM pg_stat_statements
       WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'bench')
         AND query !~ 'pg_stat_statements|bench_wait_delivered|_delivery_counters|pg_sleep'
       ORDER BY total_exec_time + total_plan_time DESC LIMIT ${TOP:-8}"
    bench_sql -c "DELETE FROM outbox.messages WHERE endpoint = '$endpoint'" -c "VACUUM outbox.messages" >/dev/null
  done
done
