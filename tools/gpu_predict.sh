#!/usr/bin/env bash
# One call on the GPU machine for the meta device and predict_memory (core/predict.h):
# build (Release, sm_90) the core tests and ember-predict, run the prediction tests
# (the "cuda" ones compare predicted and measured allocator figures on the GPU, byte for
# byte), then, each in a fresh process, `ember-predict WORKLOAD --measure` for every
# workload (predicted vs measured, and the device memory the libraries take outside the
# allocator), the batch-size search run for real at the batch it finds, and the
# prediction's host time. Logs and a summary (summary.md) under $OUT (or ./gpu-logs).
# Usage: tools/gpu_predict.sh
set -uo pipefail
out="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
# The GPU image has no doctest: the caller carries it in .device/doctest.
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"

start=$(date +%s)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-gpu -j16 --target ember_tests_core ember_tests_memory ember_predict \
  >"$out/build.log" 2>&1 || { echo "BUILD FAILED:"; grep -E "error|FAILED" "$out/build.log" | head -30; exit 1; }
echo "build: $(( $(date +%s) - start )) s"

status=0
# The prediction tests: CPU exactness, the meta device, and the GPU comparisons.
build-gpu/tests/ember_tests_core -tc='predict/*,meta/*,memory/simulated*' >"$out/tests.log" 2>&1 || status=1
build-gpu/tests/ember_tests_memory >>"$out/tests.log" 2>&1 || status=1
grep -E "test cases:|library workspaces|ERROR|FAILED" "$out/tests.log" | head -60

predict=build-gpu/examples/ember-predict
{
  echo "# predict_memory on $(cut -d, -f1 "$out/gpu.txt"), $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD 2>/dev/null)"
  echo
  echo "| workload | predicted peak allocated | measured | predicted peak reserved | measured | outside the allocator: predicted | measured | host time of the prediction |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|"
} >"$out/summary.md"
for w in $("$predict" list | awk '{print $1}'); do
  log="$out/predict_$w.log"
  timeout 300 "$predict" "$w" --steps 10 --measure >"$log" 2>&1 || { echo "ember-predict $w failed"; status=1; }
  # The two tables' "peak allocated"/"peak reserved"/"outside" lines: predicted first.
  pa=$(grep -m1 '^peak allocated' "$log" | awk '{print $3}')
  ma=$(grep '^peak allocated' "$log" | sed -n 2p | awk '{print $3}')
  pr=$(grep -m1 '^peak reserved' "$log" | awk '{print $3}')
  mr=$(grep '^peak reserved' "$log" | sed -n 2p | awk '{print $3}')
  po=$(grep -m1 '^outside the allocator' "$log" | awk '{print $4}')
  mo=$(grep '^outside the allocator' "$log" | sed -n 2p | awk '{print $4}')
  ms=$(grep -m1 '^predicted in' "$log" | awk '{print $3}')
  echo "| $w | ${pa:-?} | ${ma:-?} | ${pr:-?} | ${mr:-?} | ${po:-0} | ${mo:-0} | ${ms:-?} ms |" >>"$out/summary.md"
  if [ -n "$pa" ] && { [ "$pa" != "$ma" ] || [ "$pr" != "$mr" ]; }; then
    echo "MISMATCH: $w (see $log)"; status=1
  fi
done
# The batch-size search: the largest batch of the fp32 MLP for a 24 GiB device, then run
# for real at that batch (the GPU's allocator cannot be capped, so its figures are compared).
timeout 600 "$predict" mlp_fp32 --steps 3 --capacity 24GiB --batch-search 1024:262144 --measure \
  >"$out/batch_search.log" 2>&1 || { echo "batch search failed"; status=1; }
grep -E "largest batch|peak (allocated|reserved)|equal|differ" "$out/batch_search.log" | tee -a "$out/summary.md"
# A leak seen before it happens.
"$predict" leak_outputs_list --steps 20 --capacity 80GiB >"$out/leak.log" 2>&1 || status=1
grep -E "LEAK|fits" "$out/leak.log" | tee -a "$out/summary.md"
cat "$out/summary.md"
echo "total: $(( $(date +%s) - start )) s, status $status"
exit $status
