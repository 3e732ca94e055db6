#!/usr/bin/env bash
# Adds up the doctest summaries of every test binary CTest ran (from its log)
# into one closing line: "tests: N passed, N failed, N skipped" (test cases).
set -euo pipefail
log="${1:-build/Testing/Temporary/LastTest.log}"
[ -f "$log" ] || { echo "tests: no CTest log at $log" >&2; exit 1; }
# Strip colour codes first: under mpirun a rank's stdout is a pty, so doctest
# colours its summary and the plain pattern would miss the parallel tests.
sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^\[doctest\] test cases:' | awk -F'|' '
  { gsub(/[^0-9]/, "", $2); gsub(/[^0-9]/, "", $3); gsub(/[^0-9]/, "", $4);
    p += $2; f += $3; s += $4 }
  END { printf "tests: %d passed, %d failed, %d skipped\n", p, f, s }'
