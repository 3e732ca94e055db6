#!/usr/bin/env bash
# Builds the libFuzzer targets (checkpoint, alloc_conf, safetensors) with clang
# (build dir $1, default build-fuzz) and runs each for $2 seconds (default 60),
# starting from the kept corpus in tests/fuzz/corpus/<target>. New interesting
# inputs go to <build>/corpus/, a crash to <build>/crashes/. A crash fails the
# run: fix it, then copy its input into tests/fuzz/corpus/<target>/ where the
# normal test suites replay it.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-fuzz}"
seconds="${2:-60}"
clangxx="$(command -v clang++-14 || command -v clang++ || true)"
[ -n "$clangxx" ] || { echo "test-fuzz: clang++ not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 1; }
export PATH="$PATH:/usr/local/cuda/bin"
export CCACHE_NOHASHDIR=1
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$clangxx" \
  -DEMBER_FUZZ=ON -DEMBER_BUILD_TESTS=OFF -DEMBER_BUILD_EXAMPLES=OFF -DEMBER_BUILD_BENCHMARKS=OFF \
  >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz_checkpoint fuzz_alloc_conf fuzz_safetensors
# Leaks are LeakSanitizer's job in make test-sanitize; here a report would stop
# the fuzzer on the allocators that live until exit by design.
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
status=0
for target in checkpoint alloc_conf safetensors; do
  work="$build/corpus/$target"
  crashes="$build/crashes/$target/"
  mkdir -p "$work" "$crashes"
  echo "test-fuzz: fuzz_$target for ${seconds}s"
  if ! "$build/tests/fuzz/fuzz_$target" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
       -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$crashes" \
       "$work" "tests/fuzz/corpus/$target" 2>"$build/fuzz_$target.log"; then
    status=1
    echo "test-fuzz: fuzz_$target FOUND A CRASH; input in $crashes, log $build/fuzz_$target.log" >&2
    tail -40 "$build/fuzz_$target.log" >&2
  else
    grep -E 'stat::number_of_executed_units|Done [0-9]+ runs' "$build/fuzz_$target.log" | tail -2
  fi
done
[ $status -eq 0 ] && echo "test-fuzz: no crash in ${seconds}s per target"
exit $status
