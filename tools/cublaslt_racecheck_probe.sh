#!/usr/bin/env bash
# Evidence for issue 33: are the shared-memory hazards racecheck reports inside
# cuBLASLt's nvjet kernels (reached through ember's Linear) cuBLASLt's own? Runs
# the same GEMMs with no ember code at all, under compute-sanitizer racecheck:
#   1. tools/cublaslt_racecheck_probe.cu, built here with nvcc (cuBLASLt/cuBLAS
#      only), natively with --names (which kernel each case launches, via CUPTI),
#      then under racecheck;
#   2. tools/torch_linear_racecheck.py, PyTorch's F.linear forward and backward on
#      the same shapes, natively with --names (torch.profiler), then under
#      racecheck (skipped, saying so, where python3 cannot import torch).
# Then it prints, per kernel, how many race reports and hazards each run had, and
# writes the kernels with hazards in the standalone cuBLASLt run to
# <out>/cublaslt_hazard_kernels.txt: tools/gpu_sanitize.sh sets apart hazards in
# ember's run only in kernels named there (and matching its documented nvjet list).
# Usage: tools/cublaslt_racecheck_probe.sh [out-dir] [probe arguments...]
#   (default out-dir build/cublaslt-probe; probe arguments as the .cu's usage,
#   e.g. `--dtype bf16 1 8 8`; none: every shape and dtype of the Linear tests;
#   `--replay FILE`: exactly the calls a test run traced with EMBER_BLAS_TRACE, which
#   tools/gpu_sanitize.sh collects from its racecheck runs; the PyTorch probe is
#   skipped then, since it cannot issue the same calls)
# Needs a GPU. About a minute on an H200 (the racecheck run of PyTorch most of it).
set -uo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-build/cublaslt-probe}")"
shift $(( $# > 0 ? 1 : 0 ))
mkdir -p "$out"
export PATH="$PATH:/usr/local/cuda/bin"
cs="$(command -v compute-sanitizer || true)"
[ -n "$cs" ] || { echo "probe: compute-sanitizer not found" >&2; exit 1; }
nvidia-smi -L >/dev/null 2>&1 || { echo "probe: no GPU on this machine" >&2; exit 1; }
pattern='nvjet_[A-Za-z0-9_]+'
rc_args=(--tool racecheck --racecheck-report analysis --print-limit 1000000)

bin="$out/cublaslt_racecheck_probe"
if ! nvcc -O2 -std=c++17 -arch=sm_90 tools/cublaslt_racecheck_probe.cu -o "$bin" \
       -lcublasLt -lcublas -lcupti >"$out/build.log" 2>&1; then
  echo "probe: building with CUPTI failed (see $out/build.log); building without kernel names"
  nvcc -O2 -std=c++17 -arch=sm_90 -DPROBE_NO_CUPTI tools/cublaslt_racecheck_probe.cu -o "$bin" \
    -lcublasLt -lcublas >>"$out/build.log" 2>&1 || { tail -20 "$out/build.log"; exit 1; }
  names=()
else
  names=(--names)
fi

# Per kernel: reports and hazards in one racecheck log.
by_kernel() {
  awk -v pattern="$pattern" -f tools/racecheck_reports.awk "$1" |
    awk -F'\t' '{ n[$1]++; h[$1] += $3 } END { for (k in n) printf "%s %d %d\n", k, n[k], h[k] }' |
    sort
}
summarise() {  # label log
  local label=$1 log=$2
  local summary
  summary=$(grep -Eo 'RACECHECK SUMMARY: .*' "$log" | tail -1)
  echo "$label: ${summary:-no RACECHECK SUMMARY line (did it run? see $log)}"
  by_kernel "$log" | while read -r k n h; do
    echo "    $n race reports ($h hazards) in $k"
  done
}

# Which cases launched kernel $1, from a --names listing ($2).
cases_of() {
  awk -v k="$1" '/^case/ { c = $0; sub(/^case +[0-9]+ +/, "", c); sub(/: .*/, "", c) }
                 $1 == "kernel" && $2 == k { print "        " c }' "$2" | sort -u | head -8
}

echo "== probe 1: cuBLASLt called directly (no ember code) under racecheck"
"$cs" "${rc_args[@]}" "$bin" "$@" >"$out/cublaslt.racecheck.log" 2>&1
echo "   exit status $? (log $out/cublaslt.racecheck.log)"
grep -E '^cublaslt_racecheck_probe: ' "$out/cublaslt.racecheck.log" | sed 's/^/   /'
summarise "cuBLASLt standalone" "$out/cublaslt.racecheck.log"
by_kernel "$out/cublaslt.racecheck.log" | awk '$1 != "other" { print $1 }' \
  >"$out/cublaslt_hazard_kernels.txt"
if [ ${#names[@]} -gt 0 ]; then
  "$bin" --names "$@" >"$out/names.txt" 2>&1 || { tail -20 "$out/names.txt"; exit 1; }
  echo "   the cases that launched each of those kernels (native run, CUPTI; all: $out/names.txt):"
  while read -r k; do
    echo "    $k:"
    cases_of "$k" "$out/names.txt"
  done <"$out/cublaslt_hazard_kernels.txt"
  echo "   nvjet kernels launched in all: $(grep -Eo "kernel $pattern" "$out/names.txt" | sort -u | wc -l)"
fi

echo "== probe 2: PyTorch F.linear (no ember code)"
torch_list=""
replay=no
for a in "$@"; do [ "$a" = --replay ] && replay=yes; done
if [ $replay = yes ]; then
  echo "   skipped: --replay issues ember's traced calls, which PyTorch cannot"
elif python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # The probe's triples, if any, for the PyTorch run too.
  sizes=()
  for a in "$@"; do [[ "$a" =~ ^[0-9]+$ ]] && sizes+=("$a"); done
  # PyTorch under racecheck is the slow part: its own time limit, so the verdict
  # below still prints (EMBER_PROBE_TORCH_TIMEOUT, default 300 s).
  PYTHONUNBUFFERED=1 timeout -k 5 "${EMBER_PROBE_TORCH_TIMEOUT:-300}" \
    "$cs" "${rc_args[@]}" python3 tools/torch_linear_racecheck.py "${sizes[@]}" \
    >"$out/torch.racecheck.log" 2>&1
  echo "   exit status $? under racecheck (log $out/torch.racecheck.log)"
  grep -E '^torch_linear_racecheck: ' "$out/torch.racecheck.log" | sed 's/^/   /'
  summarise "PyTorch F.linear" "$out/torch.racecheck.log"
  torch_list=$(by_kernel "$out/torch.racecheck.log" | awk '$1 != "other" { print $1 }')
  PYTHONUNBUFFERED=1 python3 tools/torch_linear_racecheck.py --names "${sizes[@]}" \
    >"$out/torch_names.txt" 2>&1 || tail -5 "$out/torch_names.txt"
  echo "   the cases that launched each of those kernels (native run, torch.profiler; all: $out/torch_names.txt):"
  for k in $torch_list; do
    echo "    $k:"
    cases_of "$k" "$out/torch_names.txt"
  done
else
  echo "   skipped: python3 cannot import torch with a GPU here"
fi

echo "== verdict per kernel (hazards reproduced without ember)"
if [ ! -s "$out/cublaslt_hazard_kernels.txt" ] && [ -z "$torch_list" ]; then
  echo "   no hazard in any nvjet kernel without ember: nothing may be set apart"
fi
sort -u <(cat "$out/cublaslt_hazard_kernels.txt") <(printf '%s\n' $torch_list) | grep . |
  while read -r k; do
    in_lt=no; in_torch=no
    grep -qx "$k" "$out/cublaslt_hazard_kernels.txt" && in_lt=yes
    printf '%s\n' $torch_list | grep -qx "$k" && in_torch=yes
    echo "   $k: cuBLASLt standalone $in_lt, PyTorch $in_torch"
  done
echo "probe: kernels with hazards in the standalone cuBLASLt run: $out/cublaslt_hazard_kernels.txt"
