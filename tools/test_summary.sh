#!/usr/bin/env bash
# The closing line of make test (and test-sanitize, test-tsan): every CTest test
# of the last run counted, each doctest test case once per way it ran.
#   tools/test_summary.sh BUILD_DIR     (or the path of its LastTest.log)
# Reads BUILD_DIR/Testing/Temporary/LastTest.log (each test's output) and
# LastTestConsole.log (ctest's own console log, `ctest -O`, the Makefile writes it:
# the only place that says which tests failed, crashed, timed out or did not run).
#   - a doctest binary adds its summary's cases (passed, failed, skipped); the
#     parallel binary, run under mpirun with 1, 2 and 3 ranks, adds its cases once
#     per rank count (the line says so), from the summary its rank 0 prints for all
#     ranks ("[ember] test cases over N MPI rank(s)": a case failed on any rank failed);
#   - a doctest binary that crashed, timed out or printed no summary is one failed
#     case, named; one that exited non-zero after a clean summary (a sanitizer
#     report at exit, say) adds one failed, named;
#   - every other CTest test (examples, layer checks, probes) counts as one case;
#     a test CTest skipped (SKIP_REGULAR_EXPRESSION) counts as skipped, with its reason.
# Failures are listed above the line, one per line; the script exits 1 if any.
set -euo pipefail
arg="${1:-build}"
if [ -f "$arg" ]; then dir="$(dirname "$arg")"; else dir="$arg/Testing/Temporary"; fi
log="$dir/LastTest.log"
console="$dir/LastTestConsole.log"
[ -f "$log" ] || { echo "tests: no CTest log at $log" >&2; exit 1; }
if [ ! -f "$console" ] || [ "$(stat -c %Y "$console")" -lt "$(( $(stat -c %Y "$log") - 60 ))" ]; then
  echo "tests: no ctest console log of this run at $console (ctest -O writes it);" \
       "failures are read from LastTest.log alone, which calls a test that did not run passed" >&2
  console=/dev/null
fi

# Strip colour codes first: under mpirun a rank's stdout is a pty, so doctest
# colours its lines and the plain patterns would miss them.
sed 's/\x1b\[[0-9;]*m//g' "$log" | awk -v console="$console" '
BEGIN {
  # ctest console: "  12 - name (Reason)" under "The following tests FAILED:" or
  # "did not run:", and "N/M Test #k: name ....***Skipped" lines.
  section = ""
  while ((getline line < console) > 0) {
    if (line ~ /^The following tests FAILED:/) { section = "failed"; continue }
    if (line ~ /^The following tests did not run:/) { section = "notrun"; continue }
    if (section != "" && match(line, /^[ \t]+[0-9]+ - .* \(.*\)$/)) {
      s = line; sub(/^[ \t]+[0-9]+ - /, "", s)
      name = s; sub(/ \([^()]*\)$/, "", name)
      reason = s; sub(/^.* \(/, "", reason); sub(/\)$/, "", reason)
      if (section == "failed") failed_reason[name] = reason
      else if (reason == "Skipped") skipped_by_ctest[name] = 1
      else failed_reason[name] = reason
      continue
    }
    if (line !~ /^[ \t]/) section = ""
  }
}
function finish(   name, p, f, s) {
  if (cur == "") return
  name = cur; cur = ""
  ntests++
  ctest_failed = (name in failed_reason) || (console == "/dev/null" && log_failed)
  reason = (name in failed_reason) ? failed_reason[name] : "Failed"
  if (name in skipped_by_ctest) {
    skipped++; ctest_only++
    note = skip_note != "" ? skip_note : "skipped by CTest"
    notes[++nnotes] = "skipped: " name " (" note ")"
    return
  }
  if (is_doctest) {
    if (have_combined) { p = cp; f = cf; s = cs } else if (have_summary) { p = dp; f = df; s = ds }
    if (have_combined || have_summary) {
      passed += p; failed += f; skipped += s
      if (ranks > 0) { parallel_runs++; ran_with[ranks + 0] = 1; if (ranks + 0 > max_ranks) max_ranks = ranks + 0 }
      else doctest_binaries++
      for (i = 1; i <= nfc; i++) fails[++nfails] = name ": " fc[i]
      if (ctest_failed && f == 0) {
        failed++
        fails[++nfails] = name ": exited with a failure after a clean doctest summary (" reason ")"
      }
    } else {
      failed++; doctest_binaries++
      fails[++nfails] = name ": no doctest summary, counted as one failed case (" \
                        (ctest_failed ? reason : "exited 0") ")"
    }
  } else {
    ctest_only++
    if (ctest_failed) { failed++; fails[++nfails] = name ": " reason }
    else passed++
  }
}
/^[0-9]+\/[0-9]+ Testing: / {
  finish()
  cur = $0; sub(/^[0-9]+\/[0-9]+ Testing: /, "", cur)
  is_doctest = 0; have_summary = 0; have_combined = 0; ranks = 0; nfc = 0; in_case = ""
  log_failed = 0; skip_note = ""
  next
}
cur == "" { next }
/^Command: / {
  is_doctest = ($0 ~ /ember_tests_/) && ($0 !~ /--launcher-probe|--rank-killed-probe/)
  if (is_doctest && match($0, /"-np" "[0-9]+"/)) {
    ranks = substr($0, RSTART, RLENGTH); gsub(/[^0-9]/, "", ranks)
  }
  next
}
/^\[doctest\] test cases:/ || /^\[ember\] test cases over [0-9]+ MPI rank\(s\):/ {
  split($0, part, "|")
  p = part[2]; f = part[3]; s = part[4]
  gsub(/[^0-9]/, "", p); gsub(/[^0-9]/, "", f); gsub(/[^0-9]/, "", s)
  if ($0 ~ /^\[ember\]/) { have_combined = 1; cp = p; cf = f; cs = s }
  else { have_summary = 1; dp = p; df = f; ds = s }
  next
}
# Failed test cases, from any rank ("[rank k] " prefixes the others), named once.
{
  line = $0; prefix = ""
  if (match(line, /^\[rank [0-9]+\] /)) { prefix = substr(line, 1, RLENGTH - 1) " "; line = substr(line, RLENGTH + 1) }
  if (line ~ /^TEST CASE:  /) { in_case = line; sub(/^TEST CASE:  /, "", in_case); case_prefix = prefix; next }
  if (line ~ /^===============/) { in_case = ""; next }
  if (in_case != "" && line ~ /: ERROR: |^ERROR: |: FATAL ERROR: /) {
    key = case_prefix in_case
    if (!(key in seen_case)) { seen_case[key] = 1; fc[++nfc] = case_prefix "test case \"" in_case "\"" }
    in_case = ""
  }
  if (line ~ /skipped under ThreadSanitizer: |^skipped: /) { skip_note = line; sub(/^.*skipped[^:]*: /, "", skip_note) }
}
/^Test Failed\.|^Test Fail Reason:/ { log_failed = 1 }
END {
  finish()
  for (i = 1; i <= nfails; i++) print "FAILED: " fails[i]
  for (i = 1; i <= nnotes; i++) print notes[i]
  how = (doctest_binaries + 0) " doctest binaries"
  rank_list = ""
  for (r = 1; r <= max_ranks; r++) if (r in ran_with) rank_list = rank_list (rank_list == "" ? "" : ", ") r
  if (parallel_runs > 0) how = how "; the parallel binary once per rank count (" rank_list " ranks)"
  how = how "; " (ctest_only + 0) " CTest-only tests (examples, layer checks, probes)"
  printf "tests: %d passed, %d failed, %d skipped (%s)\n", passed, failed, skipped, how
  exit failed > 0 ? 1 : 0
}'
