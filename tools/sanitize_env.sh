# Run-time options of the sanitizer build (make test-sanitize), sourced by the
# Makefile; source it too to rerun one test binary of build-sanitize by hand.
# Every option is here with its reason; suppressions are in tools/lsan.supp.
# Sourced by make (/bin/sh, from the repository root) or by hand from bash.
if [ -n "${BASH_VERSION:-}" ]; then
  _ember_tools="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
else
  _ember_tools="$(pwd)/tools"
fi

# halt_on_error: the first report fails the test binary (ctest sees it).
# detect_leaks: LeakSanitizer at exit (on by default on x86-64 Linux; said here).
# strict_init_order/check_initialization_order: static-init order bugs.
# detect_stack_use_after_return: catches a returned pointer to a dead frame.
# protect_shadow_gap=0: the CUDA driver maps memory where ASan keeps its shadow
#   gap; without this, cudaMalloc fails on a GPU machine. Harmless without one.
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_init_order=1:check_initialization_order=1:detect_stack_use_after_return=1:protect_shadow_gap=0"
# Any UB report stops the binary with a stack (the build also uses
# -fno-sanitize-recover=undefined, so this is belt and braces).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$_ember_tools/lsan.supp:print_suppressions=0"
unset _ember_tools
