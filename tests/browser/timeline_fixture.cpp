// Writes the memory timeline page of tests/memory/timeline_workload.h, for the
// browser test (tools/check_timeline_in_browser.sh). Usage: timeline_fixture PAGE.html
#include <cstdio>

#include "core/memory/memory_timeline.h"
#include "memory/timeline_workload.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: timeline_fixture PAGE.html\n");
    return 2;
  }
  ember::memory::write_memory_timeline_html(ember::testing::timeline_workload(), argv[1],
                                            "timeline of the browser test");
  return 0;
}
