#!/usr/bin/env bash
# Sourced by tools/gpu_run.sh and tools/gpu_evidence.sh on the GPU machine, whose image
# has no doctest and reaches no package registry: the caller carries doctest's headers
# and CMake files in .device/doctest (include/doctest, cmake/doctest; device tool:
# carry [".device"]). The image has OpenBLAS (Ubuntu's 0.3.26, seen 2026-12-04).
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi
