// Proof that LeakSanitizer is on for programs run under mpirun in the sanitizer
// build (make test-sanitize), with OpenMPI's own leaks suppressed by library name
// only (tools/lsan.supp): `--leak` loses 4242 bytes of our own between MPI_Init and
// MPI_Finalize, which LeakSanitizer must report (CTest matches its report); without
// it the program must exit cleanly, so every leak MPI itself makes is suppressed.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// Not inlined, and the pointer forced into memory once, so the allocation cannot
// be optimised away; when this returns nothing points at it any more.
[[gnu::noinline]] void ember_deliberate_leak() {
  void* p = std::malloc(4242);
  std::memset(p, 1, 4242);
  asm volatile("" : : "r"(p) : "memory");
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const bool leak = argc > 1 && std::strcmp(argv[1], "--leak") == 0;
  if (leak && rank == 0) ember_deliberate_leak();
  MPI_Barrier(MPI_COMM_WORLD);
  std::printf("mpi_leak_probe: rank %d %s\n", rank,
              leak && rank == 0 ? "leaked 4242 bytes" : "leaked nothing");
  MPI_Finalize();
  return 0;
}
