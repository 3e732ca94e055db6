#!/usr/bin/env bash
# One call on the GPU machine for issue 5's kernels: the kernel tests, the three
# kernel benchmarks and the PyTorch peer, every log and JSON under $OUT (tables
# printed last, for the reply).
#   OUT=/tmp/out benchmarks/gpu_kernels.sh [PREBUILT_DIR]
# PREBUILT_DIR (e.g. build-kern-prebuilt/, carried): kt and bench_* built on the
# workstation (Release, sm_90) — skips minutes of building when they load there.
# Otherwise, or when they do not load: EMBER_FULL=1 builds the project
# (ember_tests_cuda, every CUDA test), else the kernel-only build
# (build-kern-fallback/: the library, tests/cuda/test_kernels_*.cpp and the
# benchmarks; needs neither MPI nor a system doctest).
set -u
OUT=${OUT:-/tmp/ember-gpu-out}
P=${1:-}
mkdir -p "$OUT"
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, "cu13", "lib") for p in nvidia.__path__))' 2>/dev/null); do
  [ -d "$d" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv; } > "$OUT/gpu.txt" 2>&1
T=""; BD=""
if [ -n "$P" ] && "$P/kt" -ltc > /dev/null 2> "$OUT/prebuilt.log"; then
  T=$P/kt; BD=$P; echo "using prebuilt binaries from $P"
else
  echo "prebuilt binaries do not load here ($(head -c 300 "$OUT/prebuilt.log" 2>/dev/null)); building"
  B=build-gpu
  if [ "${EMBER_FULL:-0}" = 1 ] && cmake -S . -B $B -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.log" 2>&1; then
    cmake --build $B -j16 --target ember_tests_cuda bench_linear bench_mse bench_adam -- -k 0 > "$OUT/build.log" 2>&1
    T=./$B/tests/ember_tests_cuda; BD=./$B/benchmarks
  fi
  if [ ! -x "${T:-/nonexistent}" ] || [ ! -x "$BD/bench_linear" ]; then
    cmake -S build-kern-fallback -B $B-kern -G Ninja -DCMAKE_BUILD_TYPE=Release >> "$OUT/cmake.log" 2>&1
    cmake --build $B-kern -j16 >> "$OUT/build.log" 2>&1; echo "build rc=$?"
    T=./$B-kern/kt; BD=./$B-kern
  fi
fi
timeout 50 "$T" -ts=cuda -tc='kernels/*' > "$OUT/tests_kernels.log" 2>&1; echo "kernel tests rc=$?"
grep -E "ERROR|FAILED|test cases|assertions" "$OUT/tests_kernels.log" | head -30
timeout 35 "$BD/bench_mse" --json "$OUT/mse.json" > "$OUT/bench_mse.txt" 2>&1; echo "bench_mse rc=$?"
timeout 50 "$BD/bench_linear" --json "$OUT/linear.json" > "$OUT/bench_linear.txt" 2>&1; echo "bench_linear rc=$?"
timeout 55 python3 benchmarks/peer_pytorch.py --json "$OUT/peer.json" > "$OUT/peer.txt" 2>&1; echo "peer rc=$?"
timeout 20 "$BD/bench_adam" --json "$OUT/adam.json" > "$OUT/bench_adam.txt" 2>&1; echo "bench_adam rc=$?"
cat "$OUT/bench_mse.txt" "$OUT/bench_adam.txt"; grep -E "fwd|VALID" "$OUT/bench_linear.txt" | grep -E "8192x4096|VALID" ; grep -E "8192x4096|mse|adam|copy|fused" "$OUT/peer.txt"
