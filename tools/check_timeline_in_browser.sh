#!/usr/bin/env bash
# The browser test of the memory timeline page (CTest: timeline_browser): writes the
# page of tests/memory/timeline_workload.h with FIXTURE, has headless Chromium load
# it and dump the DOM after its script ran, and checks the script's report: every
# shape the writer emitted was laid out with a non-empty box, and the counts are
# the hand-worked ones (2 lines, 3 site bands, 4 segments, 8 blocks).
# Without Chromium it prints "SKIPPED: <why>" (CTest counts the test as skipped).
# Usage: tools/check_timeline_in_browser.sh FIXTURE WORKDIR
set -uo pipefail
fixture="$1"
work="$2"
expected="render-check: ok lines=2 bands=3 segments=4 blocks=8"

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then browser="$b"; break; fi
done
if [ -z "$browser" ]; then
  echo "SKIPPED: no chromium here (tools/ensure_deps.sh installs it as root; apt-get install chromium)"
  exit 0
fi

mkdir -p "$work"
page="$(realpath "$work")/timeline.html"
"$fixture" "$page" || { echo "FAILED: the fixture did not write the page"; exit 1; }
profile="$(mktemp -d)"
trap 'rm -rf "$profile"' EXIT
# As root Chromium needs --no-sandbox; no GPU here; a private profile each run.
dom="$(timeout 90 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage \
        --no-first-run --user-data-dir="$profile" --dump-dom "file://$page" 2>"$work/chromium.log")"
status=$?
if [ $status -ne 0 ] || [ -z "$dom" ]; then
  echo "FAILED: $browser exited with $status and no DOM; its log:"
  tail -20 "$work/chromium.log"
  exit 1
fi
printf '%s\n' "$dom" >"$work/dom.html"
report="$(printf '%s\n' "$dom" | grep -o 'render-check: [^<]*' | head -1)"
echo "browser: $($browser --version 2>/dev/null | head -1)"
echo "report:  ${report:-(none: the script did not run)}"
if [ "$report" != "$expected" ]; then
  echo "FAILED: expected \"$expected\""
  exit 1
fi
echo "PASSED"
