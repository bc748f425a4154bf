#!/usr/bin/env bash
# The pg_regress suite (sql/ against expected/) on a throwaway cluster with pg_outbox
# preloaded. The worker serves the database "postgres", so nothing the regress
# database enqueues is delivered while the SQL contract is checked.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "${SKIP_SETUP:-}" = 1 ] || { ensure_packages; build_and_install; }
src=$(readable_repo)
work=$(mktemp -d /tmp/pg_outbox_regress.XXXXXX)
trap 'stop_cluster' EXIT
start_cluster "$work" "pg_outbox.database = 'postgres'"
mkdir -p "$work/out" && chown postgres: "$work/out"
tests=$(cd "$src/sql" && ls ./*.sql | sed 's|^\./||; s|\.sql$||' | sort)
log "pg_regress"
status=0
as_postgres "$("$PG_BIN/pg_config" --pkglibdir)/pgxs/src/test/regress/pg_regress" \
  --inputdir="$src" --outputdir="$work/out" --host="$work" --port="$CLUSTER_PORT" \
  --user=postgres --dbname=contrib_regression $tests || status=$?
if [ $status -ne 0 ] && [ -f "$work/out/regression.diffs" ]; then
  cat "$work/out/regression.diffs"
fi
exit $status
