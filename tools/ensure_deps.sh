#!/usr/bin/env bash
# Installs what ember's build needs and is missing, saying what it does.
# Usage: tools/ensure_deps.sh [extra-debian-packages...]
# As root on Debian it uses apt-get; otherwise it stops naming the packages.
set -euo pipefail

missing=()
need_cmd() {  # need_cmd COMMAND PACKAGE
  command -v "$1" >/dev/null 2>&1 || missing+=("$2")
}
need_file() {  # need_file PATH PACKAGE
  [ -e "$1" ] || missing+=("$2")
}

need_cmd cmake cmake
need_cmd ninja ninja-build
need_cmd g++ g++
need_cmd make make
need_cmd ccache ccache
need_cmd mpicxx libopenmpi-dev
need_cmd mpirun openmpi-bin
need_file /usr/include/doctest/doctest.h doctest-dev
# OpenBLAS for the CPU matrix products (CMake falls back to the reference loops without it).
if command -v dpkg >/dev/null 2>&1; then
  dpkg -s libopenblas-dev >/dev/null 2>&1 || missing+=(libopenblas-dev)
fi
need_cmd python3 python3   # tools/convert_torch_trace.py and its test
for pkg in "$@"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ember: installing missing packages with apt-get: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    echo "ember: installed ${missing[*]}"
  else
    echo "ember: missing packages: ${missing[*]}" >&2
    echo "ember: install them (as root: apt-get install ${missing[*]}) and run again" >&2
    exit 1
  fi
fi

# Optional: headless Chromium for the browser test of the memory timeline page
# (tests: timeline_browser, skipped without it). Installed where we can (root with
# apt-get); elsewhere the test says it is skipped and why.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
   && [ -z "${EMBER_NO_CHROMIUM:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ember: installing chromium (headless browser for the timeline page test)"
    export DEBIAN_FRONTEND=noninteractive
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }; then
      echo "ember: could not install chromium; the browser test will be skipped" >&2
    fi
  else
    echo "ember: note: no chromium; the browser test of the timeline page will be skipped" \
         "(as root: apt-get install chromium)" >&2
  fi
fi

# The safetensors interop test (tests/interop) checks ember's files against the
# reference implementation, the Python package safetensors (with numpy), from
# PyPI. A fresh Debian's python3 may lack pip (python3-pip) and is "externally
# managed" (PEP 668): pip then refuses plain installs, and we install with
# --break-system-packages, saying so. Without them the test fails under CI and
# is skipped elsewhere, naming this script.
if ! python3 -c 'import safetensors, numpy' >/dev/null 2>&1 && [ -z "${EMBER_NO_PIP:-}" ]; then
  if ! python3 -m pip --version >/dev/null 2>&1 && [ "$(id -u)" = 0 ] \
     && command -v apt-get >/dev/null 2>&1; then
    echo "ember: installing python3-pip (to install safetensors and numpy from PyPI)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-pip >/dev/null \
      || echo "ember: could not install python3-pip" >&2
  fi
  echo "ember: installing the Python packages safetensors and numpy with pip (for the safetensors interop test)"
  pip_log="$(mktemp)"
  pip_args=(-m pip install --quiet --disable-pip-version-check --root-user-action=ignore safetensors numpy)
  if ! python3 "${pip_args[@]}" 2>"$pip_log"; then
    if grep -q externally-managed-environment "$pip_log"; then
      echo "ember: $(command -v python3) is externally managed (PEP 668); installing safetensors and" \
           "numpy into it with pip --break-system-packages"
      python3 "${pip_args[@]}" --break-system-packages 2>"$pip_log" || true
    fi
  fi
  if python3 -c 'import safetensors, numpy' >/dev/null 2>&1; then
    echo "ember: installed safetensors and numpy for $(command -v python3)"
  else
    echo "ember: could not install safetensors and numpy for $(command -v python3):" >&2
    tail -5 "$pip_log" >&2
    echo "ember: the safetensors interop test will fail under CI and be skipped elsewhere" >&2
  fi
  rm -f "$pip_log"
fi

# The CUDA toolkit is not something to apt-get silently: it is large and comes
# from NVIDIA's repository or Debian's non-free nvidia-cuda-toolkit.
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "ember: the CUDA Toolkit (nvcc) is required to build, even to run on CPU only." >&2
  echo "ember: install NVIDIA's cuda-toolkit package, or Debian's nvidia-cuda-toolkit (non-free)," >&2
  echo "ember: then run again." >&2
  exit 1
fi

ver=$(cmake --version | head -1 | grep -oE '[0-9]+\.[0-9]+' | head -1)
if [ "$(printf '%s\n' 3.25 "$ver" | sort -V | head -1)" != 3.25 ]; then
  echo "ember: CMake >= 3.25 is required, found $ver" >&2
  exit 1
fi
