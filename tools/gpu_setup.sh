#!/usr/bin/env bash
# Sourced by tools/gpu_run.sh and tools/gpu_evidence.sh on the GPU machine, whose image
# has no doctest and reaches no package registry: the caller carries doctest's headers
# and CMake files in .device/doctest (include/doctest, cmake/doctest; device tool:
# carry [".device"]). The image has OpenBLAS (Ubuntu's 0.3.26, seen 2026-12-04).
if [ ! -f /usr/include/doctest/doctest.h ] && [ -d .device/doctest ]; then
  cp -r .device/doctest/include/doctest /usr/include/ && cp -r .device/doctest/cmake/doctest /usr/lib/cmake/
fi

# ember_fix_ctest_interpreters BUILD: a pack made by tools/pack_gpu_build.sh records the
# packing machine's python3 and cmake in its CTest files (a pyenv shim, /usr/bin/cmake).
# Where those are missing here, CTest reported their nine tests "Not Run"; point them at
# this machine's own.
ember_fix_ctest_interpreters() {
  local py cm
  py=$(command -v python3) cm=$(command -v cmake)
  if [ -z "$py" ] || [ -z "$cm" ]; then
    echo "gpu_setup: no python3 or cmake on PATH" >&2
    return 1
  fi
  find "$1" -name CTestTestfile.cmake -exec sed -i -E \
    -e "s#\"/[^\"]*/python3\"#\"$py\"#g" -e "s#\"/[^\"]*/cmake\"#\"$cm\"#g" {} +
}
