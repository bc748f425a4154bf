#!/usr/bin/env bash
# Every test, from a fresh Debian 12 machine (as root): installs the packages it
# needs, builds and installs pg_outbox, checks the tree (one version, formatting), then
# runs the unit tests (ctest, plain, under AddressSanitizer + UBSan and under
# ThreadSanitizer), the SQL contract (pg_regress) and the process-level suite (TAP,
# prove). Exits non-zero if any of them fails; each runner prints its own summary.
set -uo pipefail
here=$(dirname "$0")
source "$here/lib.sh"

ensure_packages
build_and_install WERROR=1 || exit 1

failed=()
bash "$here/check_tree.sh" || failed+=(tree)
bash "$here/check_dist.sh" || failed+=(dist)
SKIP_SETUP=1 bash "$here/run_unit.sh" || failed+=(unit)
SKIP_SETUP=1 UNIT_BUILD=sanitize bash "$here/run_unit.sh" -DPG_OUTBOX_SANITIZE=ON || failed+=(unit-sanitizers)
# The delivery thread's hand-over between threads, under ThreadSanitizer.
SKIP_SETUP=1 UNIT_BUILD=tsan bash "$here/run_unit.sh" -DPG_OUTBOX_SANITIZE_THREAD=ON || failed+=(unit-tsan)
SKIP_SETUP=1 bash "$here/run_regress.sh" || failed+=(regress)
SKIP_SETUP=1 bash "$here/run_tap.sh" || failed+=(tap)

if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
echo "all test suites passed (tree, dist, unit, unit-sanitizers, unit-tsan, regress, tap)"
