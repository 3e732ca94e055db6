#!/usr/bin/env bash
# Sourced by tools/gpu_run.sh and tools/gpu_evidence.sh on the GPU machine, whose image
# has neither doctest nor OpenBLAS and reaches no package registry. The caller carries
# (device tool: carry [".device"]):
#   .device/doctest   doctest's headers and CMake files (include/doctest, cmake/doctest)
#   .device/debs      Debian's packages, from `apt-get download libopenblas0-pthread
#                     libopenblas-pthread-dev libopenblas-dev libgfortran5 libquadmath0`
# OpenBLAS is unpacked beside the system (/opt/ember-openblas), not into it; it sets
# LD_LIBRARY_PATH and the array ember_cmake_blas (CMake cache entries naming it).
# Expects $out (a folder for its note).
ember_cmake_blas=()
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
if ! ldconfig -p 2>/dev/null | grep -q libopenblas && ls .device/debs/*.deb >/dev/null 2>&1; then
  ember_ob=/opt/ember-openblas
  mkdir -p "$ember_ob"
  for f in .device/debs/*.deb; do
    dpkg-deb -x "$f" "$ember_ob" 2>/dev/null ||
      ar p "$f" data.tar.xz | tar -xJ -C "$ember_ob"
  done
  ember_obl="$ember_ob/usr/lib/x86_64-linux-gnu"
  ember_so=$(ls "$ember_obl"/openblas-pthread/libopenblasp-r*.so 2>/dev/null | head -1)
  if [ -n "$ember_so" ]; then
    ln -sf "$(basename "$ember_so")" "$ember_obl/openblas-pthread/libopenblas.so.0"
    ln -sf libopenblas.so.0 "$ember_obl/openblas-pthread/libopenblas.so"
    export LD_LIBRARY_PATH="$ember_obl/openblas-pthread:$ember_obl${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ember_cmake_blas=(-DEMBER_OPENBLAS_INCLUDE_DIR="$ember_ob/usr/include/x86_64-linux-gnu/openblas-pthread"
                      -DEMBER_OPENBLAS_LIBRARY="$ember_obl/openblas-pthread/libopenblas.so")
    echo "OpenBLAS: carried Debian packages unpacked in $ember_ob ($(basename "$ember_so"))" |
      tee "${out:-.}/openblas.txt"
  else
    echo "OpenBLAS: .device/debs holds no libopenblas0-pthread; the CPU products run the reference loops"
  fi
fi
