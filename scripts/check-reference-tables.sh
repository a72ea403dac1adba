#!/usr/bin/env bash
# Regenerates the committed sim reference tables (results/sim-*/) with the current build into a
# temporary folder and compares each with `vrambench compare` (no tolerance): fails, printing the
# rows that moved, when the closed-form model, the step program or the allocator changes any peak
# or max batch, or when the tables' columns change. ctest runs it (test reference_tables), so the
# README's test command and .ci/run do.
#   scripts/check-reference-tables.sh         (VRAMBENCH=path/to/vrambench picks the binary)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VRAMBENCH:-build/vrambench}
export VRAMBENCH=$bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
scripts/reference-tables.sh "$tmp" >/dev/null
status=0
for committed in results/sim-*/*.csv; do
  fresh="$tmp/${committed#results/}"
  echo "== $committed"
  # compare reads the columns both files have: other columns are a change of their own.
  if [ "$(head -n 1 "$committed")" != "$(head -n 1 "$fresh")" ]; then
    echo "columns differ: $(head -n 1 "$committed") (committed), $(head -n 1 "$fresh") (fresh)"
    status=1
  fi
  "$bin" compare "$committed" "$fresh" --quiet || status=1
done
if [ "$status" -ne 0 ]; then
  echo "reference tables moved: if the change is intended, run scripts/reference-tables.sh and" \
       "explain the new figures in the commit" >&2
fi
exit "$status"
