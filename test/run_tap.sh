#!/usr/bin/env bash
# The TAP suite (test/t/*.pl, prove): real clusters with pg_outbox preloaded, real
# libcurl, the real webhook receiver, crashes and restarts. Run as the postgres user.
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "${SKIP_SETUP:-}" = 1 ] || { ensure_packages; build_and_install; }
src=$(readable_repo)
work=$(mktemp -d /tmp/pg_outbox_tap.XXXXXX)
chown postgres: "$work"
pgxs=$("$PG_BIN/pg_config" --pkglibdir)/pgxs
tests=()
for t in "$@"; do tests+=("$(realpath "$t")"); done  # prove runs from the work directory
[ ${#tests[@]} -gt 0 ] || tests=("$src"/test/t/*.pl)
log "prove ${#tests[@]} TAP files"
cd "$work"
as_postgres env PATH="$PG_BIN:$PATH" TESTDIR="$work" PG_REGRESS="$pgxs/src/test/regress/pg_regress" \
  PERL5LIB="$pgxs/src/test/perl:$src/test/perl" prove --timer "${tests[@]}"
