# Shared by the benchmarks: a release build installed, nginx answering 200 on a free
# port, a cluster with pg_outbox preloaded serving the database "bench" (with PgQ, the
# reference queue), and the helpers that fill a paused backlog and time its drain.
# Sourced, not run.
source "$(dirname "${BASH_SOURCE[0]}")/../test/lib.sh"
BENCH=$REPO/bench
BACKLOG=${BACKLOG:-100000}

# PgQ (Skype's queue, the extension only: the bench ticks its queues itself, no pgqd).
ensure_packages nginx-light wrk postgresql-15-pgq3
build_and_install

work=$(mktemp -d /tmp/pg_outbox_bench.XXXXXX)
chmod 755 "$work"
cleanup() {
  [ -f "$work/nginx.pid" ] && nginx -c "$work/nginx.conf" -s stop 2>/dev/null || true
  [ -n "${RECEIVER_PID:-}" ] && kill "$RECEIVER_PID" 2>/dev/null || true
  [ -n "${LISTENER_PID:-}" ] && kill "$LISTENER_PID" 2>/dev/null || true
  stop_cluster
  rm -rf "$work"
}
trap cleanup EXIT

# --- the receivers --------------------------------------------------------------
NGINX_PORT=$(free_port)
cat >"$work/nginx.conf" <<NGINX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx.error.log;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx_body;
  keepalive_requests 10000000;
  server { listen 127.0.0.1:$NGINX_PORT; location / { return 200 "ok"; } }
}
NGINX
nginx -c "$work/nginx.conf"

start_cluster "$work/pg" "pg_outbox.database = 'bench'" "shared_buffers = '1GB'" "max_wal_size = '8GB'" \
  "checkpoint_timeout = '30min'" "pg_outbox.breaker_threshold = 1000000" \
  "log_checkpoints = on" "log_autovacuum_min_duration = 0" "log_lock_waits = on"
psql_cluster -c "CREATE DATABASE bench"
bench_sql() { psql_cluster -d bench -At "$@"; }
bench_sql -c "CREATE EXTENSION pg_outbox" -c "CREATE EXTENSION pgq" -c "SELECT pgq.create_queue('bench_insert')" \
  -c "CREATE TABLE orders (id bigserial PRIMARY KEY, customer int NOT NULL, amount numeric NOT NULL, created_at timestamptz NOT NULL DEFAULT now())" \
  -c "CREATE TABLE hand_outbox (id uuid PRIMARY KEY, aggregate_type text NOT NULL, aggregate_id text NOT NULL,
                                event_type text NOT NULL, payload jsonb NOT NULL, status text NOT NULL DEFAULT 'pending',
                                created_at timestamptz NOT NULL DEFAULT now())" \
  -c "CREATE INDEX ON hand_outbox (event_type)" -c "CREATE INDEX ON hand_outbox (status)" \
  -c "SELECT outbox.create_endpoint('http', url => 'http://127.0.0.1:$NGINX_PORT/hook')" \
  -c "SELECT outbox.create_endpoint('ordered', url => 'http://127.0.0.1:$NGINX_PORT/ordered', ordered => true)" \
  -c "SELECT outbox.create_endpoint('notify', channel => 'bench_notify')" \
  -c "SELECT outbox.create_endpoint('parked', url => 'http://127.0.0.1:$NGINX_PORT/parked')" \
  -c "SELECT outbox.pause_endpoint('parked')" \
  -c "CREATE PROCEDURE bench_wait_delivered(ep text, target bigint) LANGUAGE plpgsql AS \$\$
      BEGIN
        WHILE (SELECT coalesce(sum(d.count), 0) FROM outbox._delivery_counters() d
                WHERE d.endpoint = ep AND d.result <> 'retry') < target LOOP
          COMMIT;
          PERFORM pg_sleep(0.01);
        END LOOP;
      END \$\$" >/dev/null

# A listener as applications run one: LISTEN, then short statements (psql reads the
# notifications that arrived after each), idle in between. Not a query left running
# (pg_sleep): that holds a snapshot, so VACUUM keeps every deleted queue row and each
# drain walks the dead rows of the drains before it. Ends by itself after 30 minutes.
start_listener() {
  { echo "LISTEN bench_notify;"; for _ in $(seq 18000); do echo "SELECT 1;"; sleep 0.1; done; } |
    as_postgres "$PG_BIN/psql" -X -q -h "$CLUSTER_DIR" -p "$CLUSTER_PORT" -U postgres -d bench >/dev/null 2>&1 &
  LISTENER_PID=$!
  sleep 0.5
}
stop_listener() {
  bench_sql -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                 WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND datname = 'bench'" >/dev/null
  kill "$LISTENER_PID" 2>/dev/null || true
  LISTENER_PID=
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
worker_pid() { bench_sql -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'"; }
# The worker found no database "bench" at server start; it is back within a second or two.
for _ in $(seq 300); do [ -n "$(worker_pid)" ] && break; sleep 0.1; done
[ -n "$(worker_pid)" ] || { echo "the pg_outbox worker did not start" >&2; exit 1; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
now() { date +%s.%N; }

# fill ENDPOINT N [KEYS]: a paused backlog of N ~200-byte JSON messages, in one
# transaction; with KEYS, spread over that many ordering keys and enqueued with
# outbox.enqueue, which writes an ordered endpoint's followers as producers' messages are
# written (ordering.hpp, kProvisionalSeq: a plain INSERT's rows come without a number, and
# each follower's first version then lies in the claim index until the commit numbers it).
# A plain INSERT otherwise (the same rows, and faster).
fill() {
  local keys=${3:-0} payload="jsonb_build_object('order_id', g, 'customer', 'c' || g, 'note', repeat('x', 120))"
  local rows="INSERT INTO outbox.messages (endpoint, event_type, payload) SELECT '$1', 'order.created', $payload"
  [ "$keys" -gt 0 ] &&
    rows="SELECT count(outbox.enqueue('$1', $payload, 'order.created', ordering_key => 'k' || (g % $keys)))"
  bench_sql -c "SELECT outbox.pause_endpoint('$1')" -c "$rows FROM generate_series(1, $2) g" >/dev/null
}
# How many messages of ENDPOINT the worker has sent or dead-lettered since it started
# (its counters in shared memory: reading them costs nothing).
delivered() {
  bench_sql -c "SELECT coalesce(sum(count), 0) FROM outbox._delivery_counters() WHERE endpoint = '$1' AND result <> 'retry'"
}
# drain ENDPOINT N: resume, wait until the worker has delivered N more of its messages
# (then check that the queue holds none); prints msgs/s and worker CPU ms per 1,000
# messages. The wait is one procedure in the server that reads the worker's counters
# every 10 ms and commits between reads (no snapshot held). Until 2026-11 the drain
# polled count(*) on the queue every 50 ms from a new psql: 13-26 ms of a backend's CPU
# each, a quarter to a half of one of the machine's two cores, taken from the worker.
drain() {
  local pid t0 t1 c0 c1 target
  pid=$(worker_pid)
  target=$(($(delivered "$1") + $2))
  c0=$(cpu_ticks "$pid")
  t0=$(now)
  bench_sql -c "SELECT outbox.resume_endpoint('$1')" -c "CALL bench_wait_delivered('$1', $target)" >/dev/null
  t1=$(now)
  c1=$(cpu_ticks "$pid")
  local left
  left=$(bench_sql -c "SELECT count(*) FROM outbox.messages WHERE endpoint = '$1'")
  [ "$left" = 0 ] || { echo "drain $1: $left messages still queued after $2 were delivered" >&2; return 1; }
  awk -v n="$2" -v t="$(echo "$t1 - $t0" | bc -l)" -v c="$((c1 - c0))" -v hz="$(getconf CLK_TCK)" \
    'BEGIN {printf "%.0f %.1f\n", n / t, c * 1000.0 / hz / (n / 1000.0)}'
}
drain_once() {  # ENDPOINT KEYS -> "msgs/s cpu_ms_per_1000" of one drain of a fresh backlog, emptied after
  local r
  fill "$1" "$BACKLOG" "$2"
  r=$(drain "$1" "$BACKLOG")
  bench_sql -c "DELETE FROM outbox.messages WHERE endpoint = '$1'" -c "VACUUM outbox.messages" >/dev/null
  echo "$r"
}
drain_runs() {  # ENDPOINT KEYS -> RUNS lines of "msgs/s cpu_ms_per_1000", a drain each
  for _ in $(seq "$RUNS"); do drain_once "$1" "$2"; done
}
# Lines of "msgs/s cpu_ms_per_1000" -> their medians, "msgs/s cpu_ms_per_1000"; and the
# span of the runs, "min-max min-max" (the machine drifts by more than most changes: a
# median alone hides whether a target was met in some runs or in none).
drain_medians() {
  local runs
  runs=$(cat)
  echo "$(cut -d' ' -f1 <<<"$runs" | median) $(cut -d' ' -f2 <<<"$runs" | median)"
}
span() { sort -g | sed -n '1p;$p' | paste -sd-; }  # numbers -> "min-max"
drain_span() {
  local runs
  runs=$(cat)
  echo "$(cut -d' ' -f1 <<<"$runs" | span) $(cut -d' ' -f2 <<<"$runs" | span)"
}
drain_case() {  # ENDPOINT KEYS -> "msgs/s cpu_ms_per_1000" medians over RUNS
  drain_runs "$1" "$2" | drain_medians
}

# PgQ, the reference queue. A batch is the events between two ticks. pgqd ticks a queue
# once per ticker_period when it holds queue_ticker_max_count (500 by default) new
# events, so its batch sizes would follow the fill's pace and vary from run to run. The
# bench ticks by itself instead, no pgqd: pgq_fill QUEUE N commits N ~200-byte events
# (the payload of fill) in chunks of PGQ_BATCH (default 500, that default threshold)
# and calls pgq.ticker(QUEUE) after each chunk's commit, the queue's threshold set to
# 1 so that each call ticks: N / PGQ_BATCH batches of PGQ_BATCH events in every run,
# all ticked before the consumer is timed.
PGQ_BATCH=${PGQ_BATCH:-500}
pgq_fill() {
  local from out
  bench_sql -c "SELECT pgq.set_queue_config('$1', 'ticker_max_count', '1')" >/dev/null
  out=$(for ((from = 1; from <= $2; from += PGQ_BATCH)); do
          echo "SELECT count(pgq.insert_event('$1', 'order.created',
                         jsonb_build_object('order_id', g, 'customer', 'c' || g, 'note', repeat('x', 120))::text))
                  FROM generate_series($from, least($from + $PGQ_BATCH - 1, $2)) g;"
          echo "SELECT pgq.ticker('$1') IS NOT NULL;"
        done | bench_sql -v ON_ERROR_STOP=1) || return 1
  if grep -qx f <<<"$out"; then echo "pgq_fill: pgq.ticker('$1') did not tick" >&2; return 1; fi
}
# pgq_drain N: a fresh queue with a registered no-op consumer, N events filled and
# ticked, then the consumer (bench/pgq_consumer.py) timed until it has every event.
# Prints events/s and CPU ms per 1,000 events (consumer backend + client).
pgq_drain() {
  local r rate cpu
  bench_sql -c "SELECT pgq.create_queue('bench_drain')" -c "SELECT pgq.register_consumer('bench_drain', 'noop')" >/dev/null
  pgq_fill bench_drain "$1" || return 1
  r=$(/usr/bin/python3 "$BENCH/pgq_consumer.py" "$CLUSTER_DIR" "$CLUSTER_PORT" bench bench_drain noop "$1") || return 1
  bench_sql -c "SELECT pgq.unregister_consumer('bench_drain', 'noop')" -c "SELECT pgq.drop_queue('bench_drain')" >/dev/null
  read -r rate cpu _ <<<"$r"
  echo "$rate $cpu"
}
pgq_drain_case() {  # N -> "events/s cpu_ms_per_1000" medians over RUNS
  local rates=() cpus=() r
  for _ in $(seq "$RUNS"); do
    r=$(pgq_drain "$1") || return 1
    rates+=("${r% *}")
    cpus+=("${r#* }")
  done
  echo "$(printf '%s\n' "${rates[@]}" | median) $(printf '%s\n' "${cpus[@]}" | median)"
}
