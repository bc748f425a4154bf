#!/usr/bin/env bash
# The pg_regress suite (sql/ against expected/) through `make installcheck`, the PGXS
# way, against a throwaway cluster with pg_outbox preloaded. The worker serves the
# database "postgres", so nothing the regress database enqueues is delivered while
# the SQL contract is checked.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "${SKIP_SETUP:-}" = 1 ] || { ensure_packages; build_and_install; }
src=$(readable_repo)
work=$(mktemp -d /tmp/pg_outbox_regress.XXXXXX)
trap 'stop_cluster' EXIT
start_cluster "$work" "pg_outbox.database = 'postgres'"
mkdir -p "$work/out" && chown postgres: "$work/out"
log "make installcheck"
status=0
# Results go to $work/out, so the checkout stays clean (and may be read-only).
as_postgres env PGHOST="$work" PGPORT="$CLUSTER_PORT" PGUSER=postgres \
  make -C "$src" --no-print-directory -s installcheck PG_CONFIG="$PG_BIN/pg_config" \
  EXTRA_REGRESS_OPTS="--outputdir=$work/out" || status=$?
if [ $status -ne 0 ] && [ -f "$work/out/regression.diffs" ]; then
  cat "$work/out/regression.diffs"
fi
exit $status
