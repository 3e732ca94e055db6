#!/usr/bin/env bash
# Builds benchmarks/peer_libtorch.cpp against the installed torch package's own
# headers and libraries (there is no separate libtorch), into BUILD_DIR
# (default build-libtorch), and prints the binary's path on its last line.
#   benchmarks/peer_libtorch.sh [BUILD_DIR]
# First CMake with find_package(Torch) (CMAKE_PREFIX_PATH from
# torch.utils.cmake_prefix_path); if torch's CMake files cannot be configured on
# this machine (they probe the CUDA toolkit), the same sources with the package's
# include and lib folders on one g++ line. Never part of ember's build.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-libtorch}"
mkdir -p "$build"
prefix="$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)" || {
  echo "peer_libtorch.sh: python3 cannot import torch; nothing to build" >&2; exit 1; }
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
if cmake -S benchmarks/peer_libtorch -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
     -DCMAKE_PREFIX_PATH="$prefix" >"$build/configure.log" 2>&1 &&
   cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1; then
  echo "peer_libtorch.sh: built with CMake (find_package(Torch) from $prefix)"
else
  echo "peer_libtorch.sh: CMake did not build it (see $build/configure.log, $build/build.log);" \
       "building with g++ against the package's folders" >&2
  torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  abi="$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')"
  cuda="${CUDA_HOME:-/usr/local/cuda}"
  # --no-as-needed: nothing names libtorch_cuda's symbols, yet it must load (it
  # registers the CUDA kernels).
  g++ -O2 -std=c++20 -D_GLIBCXX_USE_CXX11_ABI="$abi" benchmarks/peer_libtorch.cpp \
      -I"$torch_dir/include" -I"$torch_dir/include/torch/csrc/api/include" -I"$cuda/include" \
      -L"$torch_dir/lib" -L"$cuda/lib64" -Wl,-rpath,"$torch_dir/lib" \
      -Wl,--no-as-needed -ltorch_cuda -ltorch -ltorch_cpu -lc10_cuda -lc10 -Wl,--as-needed \
      -lcudart -o "$build/peer_libtorch" >"$build/gxx.log" 2>&1 || {
    echo "peer_libtorch.sh: g++ failed too:" >&2; tail -30 "$build/gxx.log" >&2; exit 1; }
  echo "peer_libtorch.sh: built with g++ against $torch_dir"
fi
echo "$build/peer_libtorch"
