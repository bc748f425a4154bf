#!/usr/bin/env bash
# The robustness check of the test suite itself: the README's test command, N times
# in a row (default 5), each from a fresh clone of this repository's HEAD, while a
# CPU-heavy job (one core's worth of hashing) runs beside it. A suite that fails for
# no product reason on a loaded 2-core machine fails here.
#
#   bash test/stress.sh [N]        logs in /tmp/pg_outbox_stress/run-K.log
set -uo pipefail
runs=${1:-5}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=/tmp/pg_outbox_stress
rm -rf "$out"
mkdir -p "$out"

# The CPU-heavy neighbour, for as long as this script runs.
(exec sha256sum /dev/zero) &
hog=$!
trap 'kill "$hog" 2>/dev/null' EXIT

failed=0
for ((k = 1; k <= runs; k++)); do
  clone=$out/clone-$k
  git clone -q "$repo" "$clone"
  start=$(date +%s)
  if (cd "$clone" && CI=true bash .ci/run) >"$out/run-$k.log" 2>&1; then result=PASS; else result=FAIL; failed=$((failed + 1)); fi
  echo "run $k of $runs: $result in $(($(date +%s) - start)) s ($out/run-$k.log)"
  rm -rf "$clone"
done
echo "$((runs - failed)) passed, $failed failed"
[ "$failed" -eq 0 ]
