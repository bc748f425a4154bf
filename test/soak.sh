#!/usr/bin/env bash
# Soak variant of the fault suite (issue 6): runs test/t/070_fault_suite.pl with its
# load phase lasting N seconds (default 600) instead of 30; the fault cycle (worker
# SIGKILLs, an immediate stop, a receiver outage and a slow receiver, a reload) is
# repeated for as long as it fits. Same environment as test/run_tap.sh (SKIP_SETUP=1
# skips the package check and the build + install).
#   bash test/soak.sh [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=${1:-600}
[[ $seconds =~ ^[0-9]+$ ]] || { echo "usage: $0 [SECONDS]" >&2; exit 2; }
export PG_OUTBOX_SOAK_SECONDS=$seconds
exec bash "$here/run_tap.sh" "$here/t/070_fault_suite.pl"
