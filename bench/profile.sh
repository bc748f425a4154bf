#!/usr/bin/env bash
# Where the time goes, for the targets make bench misses: perf profiles of
#   1. the worker (both threads) during an HTTP drain of a BACKLOG-message backlog to nginx;
#   2. the backends during pgbench of one enqueue per transaction, and of the hand-written
#      outbox INSERT (the reference), synchronous_commit = on, 4 clients, 10 s each.
# Prints the hottest symbols of each (self time). Not a test; run by hand:
#   bash bench/profile.sh        (BACKLOG=100000 by default)
set -euo pipefail
source "$(dirname "$0")/setup.sh"
ensure_packages linux-perf

top_symbols() {  # perf.data -> the 25 hottest symbols, self time
  perf report -i "$1" --stdio --no-children --sort symbol --percent-limit 1 2>/dev/null |
    grep -E '^ +[0-9]' | head -25
}

log "1. the worker during an HTTP drain of $BACKLOG messages"
fill http "$BACKLOG"
pid=$(worker_pid)
perf record -q -g -o "$work/drain.data" -p "$pid" 2>/dev/null &
perf_pid=$!
sleep 0.5
r=$(drain http "$BACKLOG")
kill -INT "$perf_pid"
wait "$perf_pid" 2>/dev/null || true
echo "drain: ${r% *} msg/s, ${r#* } ms of worker CPU per 1,000 messages"
top_symbols "$work/drain.data"

log "2. backends during pgbench: one enqueue per transaction, then the hand-written INSERT"
printf '\\set c random(1, 100000)\nBEGIN;\nINSERT INTO orders (customer, amount) VALUES (:c, 10);\nSELECT outbox.enqueue('"'parked'"', jsonb_build_object('"'customer'"', :c, '"'amount'"', 10), event_type => '"'order.created'"');\nCOMMIT;\n' >"$work/one.sql"
printf '\\set c random(1, 100000)\nBEGIN;\nINSERT INTO orders (customer, amount) VALUES (:c, 10);\nINSERT INTO hand_outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), '"'order'"', :c, '"'order.created'"', jsonb_build_object('"'customer'"', :c, '"'amount'"', 10));\nCOMMIT;\n' >"$work/hand.sql"
chmod 644 "$work"/*.sql
for script in one hand; do
  perf record -q -g -a -o "$work/$script.data" 2>/dev/null &
  perf_pid=$!
  tps=$(as_postgres "$PG_BIN/pgbench" -n -h "$CLUSTER_DIR" -p "$CLUSTER_PORT" -U postgres -c 4 -j 2 -T 10 \
    -f "$work/$script.sql" bench 2>/dev/null | awk '/^tps/ {printf "%.0f\n", $3}')
  kill -INT "$perf_pid"
  wait "$perf_pid" 2>/dev/null || true
  echo "$script: $tps TPS"
  perf report -i "$work/$script.data" --stdio --no-children --comm postgres --sort symbol --percent-limit 1 \
    2>/dev/null | grep -E '^ +[0-9]' | head -25
done
