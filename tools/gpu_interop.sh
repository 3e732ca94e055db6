#!/usr/bin/env bash
# The PyTorch-trained model check, on a machine with torch (and a GPU for the CUDA
# half): tools/torch_interop.py trains a small model (Embedding, Linear, GELU,
# LayerNorm, Linear) 20 steps in PyTorch and saves it with safetensors;
# ember_torch_interop builds the same model in ember, loads the file by name and
# compares its outputs with PyTorch's on the CPU and on CUDA. Also runs the
# safetensors tests (the CUDA ones included) and the Python cross-check.
# Usage: tools/gpu_interop.sh [BUILD_DIR]   (default build-gpu; configured if missing)
# Success: "cpu: ... PASS", "cuda: ... PASS", "torch interop: PASSED", the
# safetensors test cases passing with none skipped, and safetensors_interop passing.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"
out="${OUT:-$build/interop}"
export PATH="$PATH:/usr/local/cuda/bin"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
fi
cmake --build "$build" -j "$(nproc)" --target ember_torch_interop ember_tests_nn safetensors_probe
mkdir -p "$out"
status=0
python3 tools/torch_interop.py "$out" || status=1
"$build/tests/ember_torch_interop" "$out/weights.safetensors" "$out/io.safetensors" cpu cuda \
  | tee "$out/torch_interop.log" || status=1
"$build/tests/ember_tests_nn" -tc='safetensors*' | tail -4 || status=1
python3 tests/interop/check_safetensors.py "$build/tests/safetensors_probe" "$out/cross" || status=1
[ $status -eq 0 ] && echo "gpu_interop: all passed" || echo "gpu_interop: FAILED" >&2
exit $status
