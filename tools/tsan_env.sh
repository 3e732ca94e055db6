# Run-time options of the ThreadSanitizer build (make test-tsan), sourced by the
# Makefile; source it too to rerun one test binary of build-tsan by hand.
# halt_on_error: the first report fails the test binary (ctest sees it).
# second_deadlock_stack: both stacks of a lock-order inversion.
# history_size=4: a longer memory of old accesses, so a race's other side is shown
#   (the default often prints "failed to restore the stack").
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4"
