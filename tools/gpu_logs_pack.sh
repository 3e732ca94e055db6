#!/usr/bin/env bash
# The device tool brings back at most 8 files from $OUT (two folders deep): the GPU
# check scripts call this at their end to put every log but the few named into one
# DIR/logs.tgz, and remove what it packed, so that nothing is left behind by the limit.
# Usage: tools/gpu_logs_pack.sh DIR [KEEP...]   (KEEP: names directly in DIR)
set -euo pipefail
dir="$1"
shift
[ -d "$dir" ] || { echo "gpu_logs_pack: no folder $dir" >&2; exit 1; }
cd "$dir"
pack=()
for f in * .[!.]*; do
  [ -e "$f" ] || continue
  [ "$f" = logs.tgz ] && continue
  keep=0
  for k in "$@"; do [ "$f" = "$k" ] && keep=1; done
  [ $keep = 1 ] || pack+=("$f")
done
[ ${#pack[@]} -gt 0 ] || exit 0
tar czf logs.tgz "${pack[@]}"
rm -rf -- "${pack[@]}"
echo "gpu_logs_pack: ${#pack[@]} entries of $dir in $dir/logs.tgz ($(du -h logs.tgz | cut -f1))"
