#!/usr/bin/env bash
# One call on the GPU machine for the trace/replay work (issue 15): builds ember-replay,
# bench_replay and the test binaries (Release, sm_90), runs the replay/trace/timeline
# test cases (the "cuda" ones included), records the PyTorch training loops of
# tools/record_torch_traces.py (needs torch), replays them with every default policy
# and writes the tables, text and Markdown, under $OUT (or ./gpu-logs):
#   $OUT/traces/*.csv, $OUT/traces/MANIFEST.md   the recorded traces and how they were made
#   $OUT/replay.txt, $OUT/replay.md              ember-replay's tables
#   $OUT/tests.log, $OUT/bench_replay.txt
# Usage: tools/gpu_replay.sh [--steps-scale F]   (passed to record_torch_traces.py)
set -uo pipefail
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j16 --target ember-replay bench_replay ember_tests_memory ember_tests_cuda \
  >"$out/build.log" 2>&1 || { grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

status=0
{ build-gpu/tests/ember_tests_memory -tc='trace*,replay*,timeline*' &&
  build-gpu/tests/ember_tests_cuda -tc='replay*'; } >"$out/tests.log" 2>&1 || status=1
grep -E "test cases|FAILED|ERROR" "$out/tests.log"

build-gpu/benchmarks/bench_replay 2>&1 | tee "$out/bench_replay.txt" || status=1

if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  python3 tools/record_torch_traces.py --out "$out/traces" "$@" || status=1
  cat "$out/traces/MANIFEST.md"
  build-gpu/ember-replay "$out"/traces/*.csv 2>&1 | tee "$out/replay.txt" || status=1
  build-gpu/ember-replay --markdown "$out"/traces/*.csv >"$out/replay.md" 2>&1 || status=1
else
  echo "no torch with CUDA here: no PyTorch traces recorded" | tee "$out/traces.txt"
  status=1
fi
exit $status
