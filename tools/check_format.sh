#!/usr/bin/env bash
# Checks (or, with --fix, applies) the repository's .clang-format on every tracked C++,
# CUDA and header file. The version is pinned: clang-format 14 (Debian's clang-format-14,
# which tools/ensure_deps.sh installs), since other versions format some constructs
# differently and the check would flap between machines.
# Usage: tools/check_format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=clang-format-14
command -v "$fmt" >/dev/null 2>&1 || { echo "ember: $fmt not found (tools/ensure_deps.sh clang-format-14)" >&2; exit 1; }
mapfile -t files < <(git ls-files -- '*.cpp' '*.h' '*.cu' '*.cuh')
if [ "${1:-}" = "--fix" ]; then
  printf '%s\0' "${files[@]}" | xargs -0 "$fmt" -i
  echo "ember: formatted ${#files[@]} files with $($fmt --version)"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "ember: ${#bad[@]} of ${#files[@]} files differ from .clang-format ($fmt):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "ember: run tools/check_format.sh --fix (or make format) and commit the result" >&2
  exit 1
fi
echo "ember: all ${#files[@]} C++/CUDA files match .clang-format ($($fmt --version | grep -oE '[0-9]+\.[0-9]+\.[0-9]+'))"
