#!/usr/bin/env bash
# The convolution's checks on the GPU machine in one call, on a build made there or
# carried (issue 29): the conv, pooling, fold and op-table test cases of the core and
# nn suites; bench_conv and benchmarks/peer_conv.py alternating (compare.sh's conv set
# with EMBER_BENCH_PREBUILT=1: these binaries, no build); bench_conv with each of
# conv2d's column layouts, alternating; bench_conv --memory (predict_memory against the
# GPU); bench_conv --profile once; then the column kernels' CUDA test cases under
# compute-sanitizer's four tools.
# Usage: tools/gpu_conv_check.sh [BUILD_DIR (default build-gpu)]
#   EMBER_GPU_PREBUILT=FILE    unpack FILE (a tar.xz of BUILD_DIR's binaries) first
#   EMBER_COMPARE_REPS=5       repetitions of the ours-then-peer pair
#   EMBER_CONV_SANITIZE=0      skip the sanitizer runs
#   EMBER_CONV_LAYOUTS=0       skip the column layouts' comparison
# Logs and tables in $OUT (or ./gpu-logs); with $OUT set, the logs in $OUT/logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
# shellcheck source=tools/gpu_check_common.sh
. tools/gpu_check_common.sh

echo "== tests"
"$build/tests/ember_tests_core" -tc='*conv*,*im2col*,*pool*,unfold*,*fold*,op_table*,*meta*,*predict*' \
  >"$out/tests_core.txt" 2>&1 || status=1
tail -4 "$out/tests_core.txt"
"$build/tests/ember_tests_nn" -tc='*onv*,*atch*orm*,*ool*,*ropout2d*' >"$out/tests_nn.txt" 2>&1 || status=1
tail -4 "$out/tests_nn.txt"

echo "== bench_conv against peer_conv.py (compare.sh's conv set, on these binaries)"
EMBER_BENCH_BUILD="$build" EMBER_BENCH_PREBUILT=1 EMBER_COMPARE_SET=conv \
  benchmarks/compare.sh "$out/conv" >"$out/conv_compare.log" 2>&1 || status=1
tail -3 "$out/conv_compare.log"
[ -f "$out/conv/RESULTS.md" ] && cp "$out/conv/RESULTS.md" "$out/conv_table.md" && cat "$out/conv_table.md"

if [ "${EMBER_CONV_LAYOUTS:-1}" != 0 ]; then
  # conv2d's column layouts (docs/cnn.md): bench_conv with EMBER_CONV_COLUMNS=per_image
  # and with the default (auto: one matrix where the weight's per-image products
  # outweigh the output), alternating; per-repetition ratios auto / per_image.
  echo "== bench_conv by column layout, alternating (${EMBER_COMPARE_REPS:-5} each)"
  mkdir -p "$out/layouts"
  for r in $(seq "${EMBER_COMPARE_REPS:-5}"); do
    for layout in per_image auto; do
      EMBER_CONV_COLUMNS=$layout "$build/benchmarks/bench_conv" \
        --json "$out/layouts/$layout.$r.json" >"$out/layouts/$layout.$r.log" 2>&1 || status=1
    done
  done
  python3 tools/ab_table.py "$out/layouts" per_image auto | tee "$out/layouts.txt"
fi

echo "== bench_conv --memory (predict_memory against the GPU, ResNet-8 step)"
"$build/benchmarks/bench_conv" --memory >"$out/conv_memory.txt" 2>&1 || status=1
tail -12 "$out/conv_memory.txt"

echo "== bench_conv --profile"
"$build/benchmarks/bench_conv" --profile >"$out/conv_profile.txt" 2>&1 || status=1
sed -n '/^profile:/,$p' "$out/conv_profile.txt" | head -120

if [ "${EMBER_CONV_SANITIZE:-1}" != 0 ]; then
  echo "== compute-sanitizer on the column kernels' CUDA cases"
  cases='im2col*,conv ops on CUDA*'
  for tool in memcheck racecheck initcheck synccheck; do
    under_sanitizer "$tool" "$build/tests/ember_tests_core" -ts=cuda -tc="$cases" \
      >"$out/sanitize_$tool.txt" 2>&1
    sanitizer_summary "$tool" $? "$out/sanitize_$tool.txt"
  done
fi
finish gpu.txt conv_table.md layouts.txt conv_memory.txt conv_profile.txt
