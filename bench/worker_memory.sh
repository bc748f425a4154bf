#!/usr/bin/env bash
# The worker's memory over a long run (issue 6): drains ROUNDS backlogs of BACKLOG
# messages (default 4 x 50,000 = 200,000) to nginx and prints the worker's private
# memory (RssAnon: heap and stacks, not the shared buffers it touches) and its total
# RSS after each round. A leak shows as RssAnon growing round after round.
set -euo pipefail
BACKLOG=${BACKLOG:-50000}
ROUNDS=${ROUNDS:-4}
source "$(dirname "$0")/setup.sh"

memory() { awk '/^(RssAnon|VmRSS):/ {printf "%s %s kB  ", $1, $2}' "/proc/$(worker_pid)/status"; }
pid=$(worker_pid)
echo "worker $pid at start: $(memory)"
for round in $(seq "$ROUNDS"); do
  fill http "$BACKLOG"
  rate=$(drain http "$BACKLOG")
  echo "after $((round * BACKLOG)) messages (${rate% *} msg/s): $(memory)"
  bench_sql -c "DELETE FROM outbox.messages" -c "VACUUM outbox.messages" >/dev/null
done
[ "$(worker_pid)" = "$pid" ] || echo "the worker restarted during the run"
