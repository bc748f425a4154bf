#!/usr/bin/env bash
# The GoogleTest unit tests of the pure C++ core, through CMake and ctest. Extra
# arguments go to cmake (e.g. -DPG_OUTBOX_SANITIZE=ON); UNIT_BUILD names the build
# directory under build/ (default: unit).
set -euo pipefail
source "$(dirname "$0")/lib.sh"

[ "${SKIP_SETUP:-}" = 1 ] || ensure_packages
log "unit tests (ctest) ${*:-}"
build="$REPO/build/${UNIT_BUILD:-unit}"
cmake -S "$REPO" -B "$build" -DCMAKE_BUILD_TYPE=Debug "$@" >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
cd "$build" && ctest --output-on-failure
