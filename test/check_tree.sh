#!/usr/bin/env bash
# Checks of the source tree that no compiler makes: one version everywhere, and the C++
# formatted as .clang-format says (make format applies it). Exits non-zero on the first
# kind of problem it finds, saying what to run.
set -uo pipefail
cd "$(dirname "$0")/.."

failed=0
version=$(sed -n "s/^default_version = '\(.*\)'/\1/p" pg_outbox.control)
# META.json carries the release's version twice (the distribution and the extension).
if [ -z "$version" ] || [ "$(grep -c "\"version\": \"$version\"" META.json)" -lt 2 ]; then
  echo "META.json does not carry pg_outbox.control's version $version (the distribution's and provides.pg_outbox's)"
  failed=1
fi

mapfile -t sources < <(find src test/unit -name '*.cpp' -o -name '*.hpp' | sort)
unformatted=()
for f in "${sources[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done
if ((${#unformatted[@]})); then
  echo "not formatted as .clang-format says (run make format): ${unformatted[*]}"
  failed=1
fi

checked=$((${#sources[@]} + 1))
if ((failed)); then
  echo "tree: check failed"
  exit 1
fi
echo "tree: version $version and the formatting of ${#sources[@]} C++ files checked ($checked checks)"
