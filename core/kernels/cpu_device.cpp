// The CPU device: its memory is the host caching allocator (or this thread's
// HostAllocatorOverride), its work is synchronous, and it has no graphs.
#include <cstring>

#include "core/base/error.h"
#include "core/kernels/registration.h"
#include "core/memory/allocator.h"
#include "core/memory/caching_allocator.h"

namespace ember::kernels {

namespace {

void check(int index) {
  EMBER_CHECK(index == 0, "device cpu:", index, " does not exist; the host is cpu (index 0)");
}
memory::CachingAllocator& allocator(int) {
  return memory::host_caching_allocator();
}
memory::Allocator& tensor_allocator(int) {
  return memory::host_allocator();
}
bool autocasts(int) {
  return false;
}  // as torch.autocast("cuda"): host tensors untouched
void* current_stream(int) {
  return nullptr;
}
void check_not_capturing(int, const char*, const char*) {}
bool is_capturing(int) {
  return false;
}
void synchronize(int) {}
int count() {
  return 1;
}

void copy_bytes(const CopyBytesArgs& a) {
  if (a.n > 0) std::memcpy(a.dst, a.src, a.n);
}

}  // namespace

void register_cpu(KernelTable& t) {
  t.hooks.check = &check;
  t.hooks.allocator = &allocator;
  t.hooks.tensor_allocator = &tensor_allocator;
  t.hooks.current_stream = &current_stream;
  t.hooks.check_not_capturing = &check_not_capturing;
  t.hooks.is_capturing = &is_capturing;
  t.hooks.synchronize = &synchronize;
  t.hooks.count = &count;
  t.hooks.autocasts = &autocasts;
  t.copy_bytes = &copy_bytes;
  register_cpu_elementwise(t);
  register_cpu_reduce(t);
  register_cpu_linalg(t);
  register_cpu_optim(t);
  register_cpu_index(t);
  register_cpu_softmax(t);
  register_cpu_multi_tensor(t);
  register_cpu_sort(t);
  register_cpu_batch_norm(t);
  register_cpu_conv(t);
}

}  // namespace ember::kernels
