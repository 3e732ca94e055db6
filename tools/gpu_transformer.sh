#!/usr/bin/env bash
# The transformer checks on the GPU machine (issue 26), over an existing build
# (everything built: benchmarks and examples), logs in $OUT (or ./gpu-logs):
#   1. bench_gpt --memory: predict_memory against the GPU's peaks for both GPT steps
#      (exits 1 unless byte for byte equal);
#   2. the 20-step parity of the char model and the sdpa cases (masks, dropout)
#      against the torch package, on the CPU and on CUDA;
#   3. gpt_char's full configuration (best validation loss and wall time);
#   4. benchmarks/compare.sh's gpt set (bench_gpt against PyTorch eager and
#      torch.compile), EMBER_COMPARE_REPS repetitions (default 1) with quick rounds
#      unless EMBER_BENCH_QUICK=0.
# Usage: tools/gpu_transformer.sh [build-dir (default build-gpu)]
# Ran as .device/call2.sh on one H200 on 2026-12-03 (benchmarks/RESULTS.md).
set -u
build="${1:-build-gpu}"
cd "$(dirname "$0")/.."
R="$(realpath -m "${OUT:-gpu-logs}")"
mkdir -p "$R"
export NCCL_NVLS_ENABLE=0
s=$(date +%s)
B=$build/benchmarks
status=0
el() { echo "[$(($(date +%s) - s)) s] $*"; }
el memory
timeout 120 "$B/bench_gpt" --memory >"$R/gpt_memory.txt" 2>&1 || status=1
tail -3 "$R/gpt_memory.txt"
for dev in cpu cuda; do
  el "parity and sdpa on $dev"
  timeout 60 "$B/bench_gpt" --parity "/tmp/parity_$dev.ckp" --device $dev >"$R/parity_$dev.txt" 2>&1 &&
    timeout 90 python3 benchmarks/peer_gpt.py --parity "/tmp/parity_$dev.ckp" --device $dev \
      >>"$R/parity_$dev.txt" 2>&1 || status=1
  tail -1 "$R/parity_$dev.txt"
  timeout 60 "$B/bench_gpt" --sdpa "/tmp/sdpa_$dev.ckp" --device $dev >"$R/sdpa_$dev.txt" 2>&1 &&
    timeout 60 python3 benchmarks/peer_gpt.py --sdpa "/tmp/sdpa_$dev.ckp" --device $dev \
      >>"$R/sdpa_$dev.txt" 2>&1 || status=1
  tail -1 "$R/sdpa_$dev.txt"
done
el gpt_char
timeout 400 "$build/examples/gpt_char" --out /tmp/gpt_char_out >"$R/gpt_char.txt" 2>&1 || status=1
grep -E "^(predict_memory|model|measured|best validation|gpt_char)" "$R/gpt_char.txt"
el compare
EMBER_COMPARE_SET=gpt EMBER_COMPARE_REPS=${EMBER_COMPARE_REPS:-1} EMBER_BENCH_QUICK=${EMBER_BENCH_QUICK:-1} \
  EMBER_BENCH_BUILD="$build" EMBER_LIBTORCH=none benchmarks/compare.sh "$R/cmp" >"$R/compare.txt" 2>&1 ||
  status=1
sed -n '/GPT training step/,$p' "$R/cmp/RESULTS.md" 2>/dev/null
el "done (status $status)"
exit $status
