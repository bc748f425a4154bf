#!/usr/bin/env bash
# pg_outbox demo: a throwaway PostgreSQL 15 cluster with pg_outbox preloaded and the
# test webhook receiver, then the whole story in a minute: a committed and a rolled-back
# transaction, HTTP (signed) and NOTIFY delivery, failures landing in the dead-letter
# queue, the fix and the requeue, stats and metrics.  Everything is removed at the end.
#
#   bash test/demo.sh          # as root on Debian 12; installs what is missing, builds
#   SKIP_SETUP=1 bash test/demo.sh   # pg_outbox already built and installed
#
# Exits 0 when every step worked, non-zero (with the server log's tail) otherwise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || { echo "demo.sh: run as root (it installs packages and runs PostgreSQL as postgres)" >&2; exit 1; }

if [ -t 1 ]; then
  step() { printf '\n\033[1m### %s\033[0m\n' "$*"; }
else
  step() { printf '\n### %s\n' "$*"; }
fi
die() { echo "demo.sh: FAILED: $*" >&2; exit 1; }

[ "${SKIP_SETUP:-}" = 1 ] || { ensure_packages; build_and_install; }

started=$(date +%s)
DEMO_DIR=$(mktemp -d /tmp/pg_outbox_demo.XXXXXX)
chmod 755 "$DEMO_DIR"
RECV_PID=

cleanup() {
  local rc=$?
  set +e
  if [ "$rc" != 0 ] && [ -f "$DEMO_DIR/pg/server.log" ]; then
    echo "--- last lines of the server log ---" >&2
    tail -n 30 "$DEMO_DIR/pg/server.log" >&2
  fi
  if [ -n "$RECV_PID" ] && kill -0 "$RECV_PID" 2>/dev/null; then
    kill "$RECV_PID"
    wait "$RECV_PID" 2>/dev/null
  fi
  stop_cluster
  rm -rf "$DEMO_DIR"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# psql against the demo cluster, stopping at the first error.
sql() { psql_cluster -d postgres -v ON_ERROR_STOP=1 "$@"; }
# One value, unaligned.
sql_value() { sql -tA "$@"; }

# wait_for SECONDS WHAT SQL: polls until SQL returns t, or fails the demo.
wait_for() {
  local seconds=$1 what=$2 query=$3 i
  for ((i = 0; i < seconds * 10; i++)); do
    [ "$(sql_value -c "$query")" = t ] && return 0
    sleep 0.1
  done
  die "timed out after ${seconds}s waiting for: $what"
}

# recv_ctl METHOD PATH [JSON]: the receiver's control API.
recv_ctl() {
  python3 - "$RECV_PORT" "$@" <<'PY'
import sys, urllib.request
port, method, path = sys.argv[1], sys.argv[2], sys.argv[3]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), data=data, method=method,
                             headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=10) as r:
    r.read()
PY
}

# show_requests PATH...: what the receiver got on those paths (from its jsonl log).
show_requests() {
  python3 - "$RECV_LOG" "$SECRET" "$@" <<'PY'
import base64, hashlib, hmac, json, sys
log, secret, paths = sys.argv[1], sys.argv[2], set(sys.argv[3:])
key = base64.b64decode(secret[len("whsec_"):])
for line in open(log, encoding="utf-8"):
    r = json.loads(line)
    if r.get("path") not in paths:   # also skips the receiver's outcome lines
        continue
    h = r["headers"]
    sig = h.get("webhook-signature")
    if sig:
        signed = "%s.%s.%s" % (h.get("webhook-id"), h.get("webhook-timestamp"), r["body"])
        good = base64.b64encode(hmac.new(key, signed.encode(), hashlib.sha256).digest()).decode()
        sig_text = "valid" if ("v1," + good) in sig.split() else "INVALID"
    else:
        sig_text = "none"
    print("  %-16s webhook-id=%-8s attempt=%s event=%-14s signature=%-7s -> %-4s body=%s"
          % (r["path"], h.get("webhook-id"), h.get("outbox-attempt"), h.get("outbox-event-type"),
             sig_text, r["response"], r["body"]))
PY
}

# ---------------------------------------------------------------------------------------
step "1. Start a throwaway PostgreSQL 15 cluster with pg_outbox preloaded (no other setting needed)"
start_cluster "$DEMO_DIR/pg" \
  "pg_outbox.poll_interval = '200ms'" \
  "pg_outbox.backoff_base = '200ms'" \
  "pg_outbox.backoff_max = '1s'"
echo "cluster in $DEMO_DIR/pg, port $CLUSTER_PORT (socket only)"
wait_for 120 "the pg_outbox launcher" "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_outbox launcher'"
echo "launcher: $(sql_value -c "SELECT backend_type || ' pid ' || pid FROM pg_stat_activity WHERE backend_type = 'pg_outbox launcher'")"
echo "(it starts a delivery worker in each database where CREATE EXTENSION pg_outbox runs)"

# ---------------------------------------------------------------------------------------
step "2. Start the webhook receiver (/hooks/broken answers 500, /hooks/legacy answers 400)"
mkdir -p "$DEMO_DIR/receiver"
RECV_LOG=$DEMO_DIR/receiver/requests.jsonl
python3 "$REPO/test/webhook_receiver.py" --port 0 --ready-file "$DEMO_DIR/receiver/port" \
  --log "$RECV_LOG" --max-seconds 600 2>"$DEMO_DIR/receiver/out" &
RECV_PID=$!
for ((i = 0; i < 600; i++)); do
  [ -s "$DEMO_DIR/receiver/port" ] && break
  kill -0 "$RECV_PID" 2>/dev/null || die "the webhook receiver exited: $(cat "$DEMO_DIR/receiver/out")"
  sleep 0.1
done
[ -s "$DEMO_DIR/receiver/port" ] || die "the webhook receiver did not start"
RECV_PORT=$(cat "$DEMO_DIR/receiver/port")
RECV=http://127.0.0.1:$RECV_PORT
recv_ctl POST /_control/rules '[{"path": "/hooks/broken", "status": 500, "body": "database is down"},
                                {"path": "/hooks/legacy", "status": 400, "body": "unknown field \"coupon\""}]'
echo "receiver on $RECV (pid $RECV_PID)"

# ---------------------------------------------------------------------------------------
step "3. CREATE EXTENSION and the endpoints"
SECRET=whsec_$(python3 -c 'import base64, os; print(base64.b64encode(os.urandom(24)).decode())')
sql -v recv="$RECV" -v secret="$SECRET" <<'SQL'
\set ECHO queries
CREATE EXTENSION pg_outbox;
SELECT outbox.create_endpoint('billing', url => :'recv' || '/hooks/billing', secret => :'secret');
SELECT outbox.create_endpoint('orders_feed', channel => 'orders');
SELECT outbox.create_endpoint('broken', url => :'recv' || '/hooks/broken', max_attempts => 3);
SELECT outbox.create_endpoint('legacy', url => :'recv' || '/hooks/legacy');
SELECT name, url, channel, max_attempts FROM outbox.endpoints ORDER BY name;
SQL
wait_for 30 "the database's delivery worker" "SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker' AND datname = current_database()"
echo "worker: $(sql_value -c "SELECT backend_type || ' pid ' || pid || ' in database ' || datname FROM pg_stat_activity WHERE backend_type = 'pg_outbox worker'")"

# ---------------------------------------------------------------------------------------
step "4. The application's transactions: one commits, one rolls back (LISTEN orders in this session)"
out=$(sql <<'SQL'
CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, total numeric NOT NULL);
LISTEN orders;
\set ECHO queries
-- committed: the order row and its two messages
BEGIN;
INSERT INTO orders (customer, total) VALUES ('alice', 42.00) RETURNING id AS order_id \gset
SELECT outbox.enqueue('billing', jsonb_build_object('order_id', :order_id, 'customer', 'alice', 'total', 42.00),
                      event_type => 'order.created') AS billing_message;
SELECT outbox.enqueue('orders_feed', jsonb_build_object('order_id', :order_id, 'status', 'created'),
                      event_type => 'order.created') AS feed_message;
COMMIT;
-- rolled back: neither the order nor its messages ever existed
BEGIN;
INSERT INTO orders (customer, total) VALUES ('bob', 13.37) RETURNING id AS order_id \gset
SELECT outbox.enqueue('billing', jsonb_build_object('order_id', :order_id, 'customer', 'bob', 'total', 13.37),
                      event_type => 'order.created') AS billing_message;
SELECT outbox.enqueue('orders_feed', jsonb_build_object('order_id', :order_id, 'status', 'created'),
                      event_type => 'order.created') AS feed_message;
ROLLBACK;
\set ECHO none
-- wait (at most 10 s) until the worker has sent the NOTIFY; psql prints it after the next query
DO $$
BEGIN
  FOR i IN 1..1200 LOOP
    EXIT WHEN EXISTS (SELECT 1 FROM outbox.history WHERE endpoint = 'orders_feed');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) AS orders_in_table FROM orders;
SQL
)
echo "$out"
grep -q 'Asynchronous notification "orders"' <<<"$out" || die "no NOTIFY on channel orders arrived"
[ "$(grep -c 'Asynchronous notification' <<<"$out")" = 1 ] || die "expected exactly one notification (the committed one)"

# ---------------------------------------------------------------------------------------
step "5. What the webhook receiver got (only the committed message; signature checked here)"
wait_for 120 "billing delivered" \
  "SELECT count(*) = 1 FROM outbox.history WHERE endpoint = 'billing'"
show_requests /hooks/billing
grep -q '"bob"' "$RECV_LOG" && die "a rolled-back message reached the receiver"
[ "$(grep -c '"/hooks/billing"' "$RECV_LOG")" = 1 ] || die "expected exactly one billing request"
echo "the queue holds what is not delivered yet; delivered messages are in the history:"
sql -c "SELECT count(*) AS queued FROM outbox.messages"
sql -c "SELECT h.id, h.endpoint, h.event_type, m.status, h.attempts, h.last_http_status, h.sent_at IS NOT NULL AS sent
          FROM outbox.history h, outbox.message(h.id) m ORDER BY h.id"

# ---------------------------------------------------------------------------------------
step "6. Failures: 3 messages to 'broken' (500, max_attempts 3), 2 to 'legacy' (400)"
sql <<'SQL'
SELECT outbox.enqueue('broken', jsonb_build_object('invoice', n), event_type => 'invoice.issued')
  FROM generate_series(1, 3) n;
SELECT outbox.enqueue('legacy', '{"order_id": 1, "coupon": "WELCOME10"}', event_type => 'order.created');
SELECT outbox.enqueue('legacy', '{"order_id": 2, "coupon": "SPRING"}', event_type => 'order.created');
SQL
echo "waiting for the retries to run out and for the rejected ones to be dead-lettered ..."
wait_for 120 "five dead letters" \
  "SELECT (SELECT count(*) FROM dlq.dead_letters WHERE endpoint IN ('broken', 'legacy')) = 5
      AND NOT EXISTS (SELECT 1 FROM outbox.messages WHERE endpoint IN ('broken', 'legacy'))"
show_requests /hooks/broken /hooks/legacy
sql <<'SQL'
SELECT id, message_id, endpoint, reason_code, http_status, attempts, error_message, response_body
  FROM dlq.dead_letters ORDER BY id;
SELECT endpoint, reason_code, event_type, count FROM dlq.summary ORDER BY endpoint;
SQL

# ---------------------------------------------------------------------------------------
step "7. The fix: point 'broken' at a healthy URL and requeue all its dead letters"
sql -v recv="$RECV" <<'SQL'
\set ECHO queries
SELECT outbox.alter_endpoint('broken', url => :'recv' || '/hooks/invoices');
SELECT dlq.requeue_all(endpoint => 'broken') AS requeued;
SQL

step "8. The fix for 'legacy': new URL, one requeued with a corrected payload, one discarded"
sql -v recv="$RECV" <<'SQL'
\set ECHO queries
SELECT outbox.alter_endpoint('legacy', url => :'recv' || '/hooks/legacy/v2');
SELECT dlq.requeue(min(id), '{"order_id": 1, "discount_code": "WELCOME10"}') AS requeued_as
  FROM dlq.dead_letters WHERE endpoint = 'legacy';
SELECT dlq.discard(max(id), 'customer 2 cancelled; not resent')
  FROM dlq.dead_letters WHERE endpoint = 'legacy';
SQL
wait_for 120 "requeued messages delivered" \
  "SELECT count(*) = 4 FROM outbox.history WHERE endpoint IN ('broken', 'legacy')"
echo "delivered (the webhook-id is the original message's, so receivers can deduplicate):"
show_requests /hooks/invoices /hooks/legacy/v2
sql <<'SQL'
SELECT id, endpoint, idempotency_key AS "webhook-id", attempts, last_http_status, payload
  FROM outbox.history WHERE endpoint IN ('broken', 'legacy') ORDER BY id;
SELECT id, endpoint, reason_code, requeued_as, requeued_at IS NOT NULL AS requeued,
       discarded_at IS NOT NULL AS discarded, note
  FROM dlq.dead_letters ORDER BY id;
SELECT count(*) AS open_dead_letters FROM dlq.summary;
SQL

# ---------------------------------------------------------------------------------------
step "9. Observability: outbox.endpoint_stats, outbox.worker_status() and outbox.metrics()"
sql <<'SQL'
SELECT endpoint, pending, in_flight, sent, dead, paused, breaker_state FROM outbox.endpoint_stats ORDER BY endpoint;
\x on
SELECT * FROM outbox.worker_status();
\x off
SQL
sql_value -c "SELECT outbox.metrics()"

step "Done in $(($(date +%s) - started)) s; cleaning up (receiver, cluster, $DEMO_DIR)"
