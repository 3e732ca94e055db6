#!/usr/bin/env bash
# Builds build-gpu here (Release, sm_90, as tools/gpu_run.sh does on the GPU machine) and
# packs what the tests, examples and benchmarks need (no objects, no static libraries)
# into one xz file for the GPU machine, so a fresh machine runs them without its ~400 s
# build: `EMBER_GPU_PREBUILT=<file> tools/gpu_run.sh`, or unpack it at the repository
# root. The ~50 binaries each hold the same ~20 MB of kernels, so xz runs with a 1 GiB
# window (about 10 GiB of memory, ~7 min on 2 cores): 1 GB of files became 26 MB at
# 54c5055. Needs the GPU machine's nvcc (13.0 there) and the same repository path on both
# machines (the tests find their data through the path compiled in; the pack records it
# in build-gpu/ember_source_dir.txt and gpu_run.sh checks it).
# Usage: tools/pack_gpu_build.sh [OUT.tar.xz]   (default .device/bg.tar.xz)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.device/bg.tar.xz}"
export PATH="$PATH:/usr/local/cuda/bin"
command -v nvcc >/dev/null || { echo "pack_gpu_build: no nvcc here" >&2; exit 1; }
echo "pack_gpu_build: $(nvcc --version | tail -1)"
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build build-gpu -j"$(nproc)"
pwd >build-gpu/ember_source_dir.txt
git describe --always --dirty >build-gpu/ember_commit.txt 2>/dev/null || true
mkdir -p "$(dirname "$out")"
tar --exclude='*.o' --exclude='*.a' --exclude='*.o.d' --exclude='.ninja_*' \
    --exclude='build.ninja' --exclude='CMakeFiles/*.dir' --exclude='gpu-sanitize' \
    --exclude='Testing' -cf - build-gpu |
  xz -T1 --lzma2=preset=6,dict=1GiB >"$out"
echo "pack_gpu_build: $out, $(du -h "$out" | cut -f1), commit $(cat build-gpu/ember_commit.txt 2>/dev/null)"
