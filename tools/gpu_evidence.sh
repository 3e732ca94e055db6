#!/usr/bin/env bash
# The evidence run on the GPU machine (issue 20), in stages, everything under $OUT
# (or ./gpu-evidence):
#   build    Release build of everything (tests, examples, benchmarks), sm_90, -j16
#   tests    the whole CTest suite, counted by tools/test_summary.sh (each test case
#            once per way it ran; crashes, timeouts and failures on any rank named)
#   bench    every ember benchmark binary once; each checks what it times first and
#            exits non-zero (printing no row) when a check fails
#   peer     builds the libtorch peer against the torch package (benchmarks/peer_libtorch.sh)
#   compare  benchmarks/compare.sh, interleaved: 5 repetitions of ours and the peers
#            as separate processes (host-bound rows against libtorch and PyTorch, the
#            MLP step against PyTorch), medians, spreads and verdicts in RESULTS.md
#   sanitize tools/gpu_sanitize.sh (as make gpu-sanitize): compute-sanitizer memcheck,
#            racecheck, initcheck and synccheck over every CUDA suite (cuda, cuda_sm90,
#            the parallel binary on one rank), the planted bugs that must be caught,
#            the cuBLASLt probe; its table names the commit (EMBER_COMMIT, else git).
#            Not in the default list: run it as `tools/gpu_evidence.sh build sanitize`
#            (or alone, `tools/gpu_evidence.sh sanitize`, which configures build-gpu if
#            needed and builds only the test binaries). EMBER_GPU_SANITIZE_* pass through
#            (tools/gpu_sanitize.sh lists them).
# Usage: tools/gpu_evidence.sh [stage ...]   (default: all five, in that order)
#   EMBER_COMPARE_REPS, EMBER_COMPARE_SET: passed to compare.sh (defaults 5, host,mlp)
# Expected on one H200 with 16 cores: build 3-4 min (cold, no ccache), tests ~1.5 min,
# bench ~2.5 min, peer ~1 min, compare ~5 min. All five exceed one 10-minute call,
# so run it as two: `tools/gpu_evidence.sh build tests bench` then
# `tools/gpu_evidence.sh peer compare` (the second reuses build-gpu; times per stage
# are printed and kept in $OUT/stages.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${OUT:-gpu-evidence}")"
mkdir -p "$out"
stages="${*:-build tests bench peer compare}"
build=build-gpu
export NCCL_NVLS_ENABLE=0
# doctest, carried in .device (tools/gpu_setup.sh).
# shellcheck source=tools/gpu_setup.sh
. tools/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
status=0
stage_start=0
begin() { stage_start=$(date +%s); echo "=== $1 ($(date -u +%H:%M:%S))"; }
end() { echo "$1: $(( $(date +%s) - stage_start )) s" | tee -a "$out/stages.txt"; }

if [[ " $stages " == *" build "* ]]; then
  begin build
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  if ! cmake --build $build -j16 -- -k 0 >"$out/build.log" 2>&1; then
    echo "BUILD FAILED (going on with what built):"
    grep -E "error|FAILED" "$out/build.log" | head -30
    status=1
  fi
  end build
fi

if [[ " $stages " == *" tests "* ]]; then
  begin tests
  (cd $build && ctest --output-on-failure -j4 -O Testing/Temporary/LastTestConsole.log \
     >"$out/ctest.log" 2>&1) || status=1
  cp $build/Testing/Temporary/LastTest.log "$out/LastTest.log" 2>/dev/null
  tools/test_summary.sh $build | tee "$out/test_summary.txt" || status=1
  end tests
fi

if [[ " $stages " == *" bench "* ]]; then
  begin bench
  mkdir -p "$out/bench"
  for bin in $build/benchmarks/bench_*; do
    name=$(basename "$bin" | sed 's/^bench_//')
    case $name in
      parallel) continue ;;  # tools/gpu_parallel.sh runs it, one process per GPU
    esac
    echo "== bench_$name"
    timeout 300 "$bin" --json "$out/bench/$name.json" >"$out/bench/$name.txt" 2>&1
    rc=$?
    grep -E "validate|VALIDATION|FAILED|failure" "$out/bench/$name.txt" | head -40
    if [ $rc -ne 0 ]; then echo "   bench_$name exited $rc"; status=1; fi
  done
  end bench
fi

if [[ " $stages " == *" peer "* ]]; then
  begin peer
  if benchmarks/peer_libtorch.sh build-libtorch >"$out/peer_libtorch_build.log" 2>&1; then
    tail -2 "$out/peer_libtorch_build.log"
  else
    echo "peer_libtorch did not build:"; tail -20 "$out/peer_libtorch_build.log"; status=1
  fi
  end peer
fi

if [[ " $stages " == *" compare "* ]]; then
  begin compare
  lt=build-libtorch/peer_libtorch
  [ -x "$lt" ] || lt=none
  EMBER_BENCH_BUILD=$build EMBER_LIBTORCH=$lt EMBER_COMPARE_REPS=${EMBER_COMPARE_REPS:-5} \
    EMBER_COMPARE_SET=${EMBER_COMPARE_SET:-host,mlp} benchmarks/compare.sh "$out/compare" \
    >"$out/compare.log" 2>&1 || status=1
  tail -5 "$out/compare.log"
  sed -n '/### Targets/,$p' "$out/compare/RESULTS.md" 2>/dev/null
  end compare
fi
if [[ " $stages " == *" sanitize "* ]]; then
  begin sanitize
  if [ ! -f $build/build.ninja ]; then
    cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  fi
  # Only what the stage runs: the test binaries and the planted bugs (a no-op after
  # the build stage).
  targets=$(ninja -C $build -t targets all 2>/dev/null |
            sed -n 's/^\(ember_tests_[a-z_]*\|ember_sanitizer_planted\): phony$/\1/p' | sort -u)
  # shellcheck disable=SC2086
  cmake --build $build -j16 --target $targets >"$out/sanitize_build.log" 2>&1 ||
    { echo "sanitize: building the test binaries failed:"; grep -E "error|FAILED" "$out/sanitize_build.log" | head -20; status=1; }
  tools/gpu_sanitize.sh $build 2>&1 | tee "$out/sanitize.txt"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status=1
  tar czf "$out/sanitize_logs.tgz" -C $build gpu-sanitize 2>/dev/null
  end sanitize
fi
echo "gpu_evidence: status $status; logs in $out"
exit $status
