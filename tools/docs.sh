#!/usr/bin/env bash
# The API reference from ember's headers: Doxygen over core/, cuda/, nn/, optim/,
# parallel/ and ember.h (their // comments read through tools/docs_filter.awk),
# with README.md as the front page and every guide in docs/*.md as a page of its
# own (a new guide is picked up by being there), HTML in OUT/html. Exits non-zero,
# printing them, if Doxygen warns at all.
# Usage: tools/docs.sh [SOURCE_DIR] [OUT_DIR] [VERSION]
set -euo pipefail
src="$(cd "${1:-.}" && pwd)"
out="${2:-$src/build/docs}"
version="${3:-}"
doxygen="${EMBER_DOXYGEN:-}"
[ -n "$doxygen" ] && [ -x "$doxygen" ] || doxygen="$(command -v doxygen || true)"
if [ -z "$doxygen" ]; then
  echo "ember: doxygen is not installed (tools/ensure_deps.sh doxygen, or apt-get install doxygen)" >&2
  exit 1
fi
mkdir -p "$out"
log="$out/warnings.log"
cat > "$out/Doxyfile" <<DOXY
PROJECT_NAME           = ember
PROJECT_NUMBER         = $version
PROJECT_BRIEF          = "A from-scratch CUDA deep-learning mini-framework in C++20"
OUTPUT_DIRECTORY       = $out
INPUT                  = $src/README.md $src/docs $src/ember.h $src/core $src/cuda $src/nn $src/optim $src/parallel
FILE_PATTERNS          = *.h *.cuh *.md
USE_MDFILE_AS_MAINPAGE = $src/README.md
RECURSIVE              = YES
EXCLUDE_PATTERNS       = */kernels/registration.h */kernels/cpu_loops.h */tools/* */memory/allocator_impl.h */memory/allocator_blocks.h
STRIP_FROM_PATH        = $src
STRIP_FROM_INC_PATH    = $src
FULL_PATH_NAMES        = YES
FILTER_PATTERNS        = "*.h=awk -f $src/tools/docs_filter.awk" "*.cuh=awk -f $src/tools/docs_filter.awk"
FILTER_SOURCE_FILES    = NO
EXTRACT_ALL            = YES
EXTRACT_STATIC         = YES
EXTRACT_PRIVATE        = NO
HIDE_UNDOC_RELATIONS   = NO
MARKDOWN_SUPPORT       = YES
AUTOLINK_SUPPORT       = NO
JAVADOC_AUTOBRIEF      = YES
ENABLE_PREPROCESSING   = YES
MACRO_EXPANSION        = YES
EXPAND_ONLY_PREDEF     = YES
PREDEFINED             = EMBER_HD=inline __host__= __device__= __forceinline__=inline
EXCLUDE_SYMBOLS        = detail detail::* EMBER_X EMBER_KERNEL_FIELD EMBER_MISSING EMBER_FILL
GENERATE_HTML          = YES
GENERATE_LATEX         = NO
HTML_OUTPUT            = html
SEARCHENGINE           = YES
SOURCE_BROWSER         = NO
QUIET                  = YES
WARNINGS               = YES
WARN_IF_UNDOCUMENTED   = NO
WARN_IF_DOC_ERROR      = YES
WARN_NO_PARAMDOC       = NO
WARN_LOGFILE           = $log
HAVE_DOT               = NO
DOXY
rm -f "$log"
"$doxygen" "$out/Doxyfile"
if [ -s "$log" ]; then
  echo "ember: doxygen warned ($(wc -l < "$log") lines, $log):" >&2
  cat "$log" >&2
  exit 1
fi
echo "ember: API reference in $out/html/index.html (no warnings)"
