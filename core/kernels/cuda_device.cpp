// The CUDA devices: memory from each device's caching allocator on this thread's
// current stream, copies through cudaMemcpyAsync, graphs (cuda/graph.h). Their
// kernels register themselves from their own files (cuda/kernels/registration.h),
// called here in one explicit list.
#include "core/kernels/registration.h"
#include "cuda/check.h"
#include "cuda/device_allocator.h"
#include "cuda/device_error.h"
#include "cuda/graph.h"
#include "cuda/kernels/registration.h"
#include "cuda/pinned_buffer.h"
#include "cuda/profiler_events.h"
#include "cuda/runtime.h"

namespace ember::kernels {

namespace {

void check(int index) {
  cuda::check_device(index);
}
memory::CachingAllocator& allocator(int index) {
  return cuda::device_caching_allocator(index);
}
memory::Allocator& tensor_allocator(int index) {
  return cuda::device_caching_allocator(index);
}
bool autocasts(int) {
  return true;
}
void* current_stream(int index) {
  return cuda::current_stream(index);
}
void check_not_capturing(int index, const char* what, const char* action) {
  cuda::check_not_capturing(index, what, action);
}
bool is_capturing(int index) {
  return cuda::is_capturing(index);
}
void synchronize(int index) {
  cuda::synchronize(index);
}
int count() {
  return cuda::device_count();
}
int64_t timing_event() {
  return cuda::record_timing_event();
}
double timing_elapsed_ms(int64_t from, int64_t to) {
  return cuda::timing_elapsed_ms(from, to);
}
void timing_reset() {
  cuda::reset_timing_events();
}
void range_push(const char* name) {
  cuda::nvtx_range_push(name);
}
void range_pop() {
  cuda::nvtx_range_pop();
}

// Pinned staging (core/device_services.h's PinnedStaging): a cuda::PinnedBuffer each.
void* staging_new() {
  return new cuda::PinnedBuffer();
}
void staging_free(void* buffer) {
  delete static_cast<cuda::PinnedBuffer*>(buffer);  // waits for its last copy, never throws
}
void* staging_acquire(void* buffer, size_t bytes) {
  return static_cast<cuda::PinnedBuffer*>(buffer)->acquire(bytes);
}
void staging_copy(void* buffer, void* dst, size_t bytes, int index) {
  static_cast<cuda::PinnedBuffer*>(buffer)->copy_to_device_async(dst, bytes, index,
                                                                 cuda::current_stream(index));
}

// Host <-> device, device <-> device (same or peer); synchronises when the
// destination is the host or the copy crosses devices.
void copy_bytes(const CopyBytesArgs& a) {
  if (a.n == 0) return;
  const Device dd = a.dst_device, sd = a.src_device;
  if (dd.is_cuda() && sd.is_cpu()) {
    cuda::DeviceGuard g(dd.index);
    EMBER_CUDA_CHECK(
        cudaMemcpyAsync(a.dst, a.src, a.n, cudaMemcpyHostToDevice, cuda::current_stream(dd.index)));
  } else if (dd.is_cpu() && sd.is_cuda()) {
    cuda::DeviceGuard g(sd.index);
    cudaStream_t s = cuda::current_stream(sd.index);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(a.dst, a.src, a.n, cudaMemcpyDeviceToHost, s));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
    // The host now waits for the device anyway: raise what kernels found in their
    // input (cuda/device_error.h), e.g. at item() after an embedding.
    cuda::check_device_errors(sd.index);
  } else if (dd.index == sd.index) {
    cuda::DeviceGuard g(dd.index);
    EMBER_CUDA_CHECK(cudaMemcpyAsync(a.dst, a.src, a.n, cudaMemcpyDeviceToDevice,
                                     cuda::current_stream(dd.index)));
  } else {
    cuda::DeviceGuard g(sd.index);
    cudaStream_t s = cuda::current_stream(sd.index);
    EMBER_CUDA_CHECK(cudaMemcpyPeerAsync(a.dst, dd.index, a.src, sd.index, a.n, s));
    EMBER_CUDA_CHECK(cudaStreamSynchronize(s));
  }
}

}  // namespace

void register_cuda(KernelTable& t) {
  t.hooks.check = &check;
  t.hooks.allocator = &allocator;
  t.hooks.tensor_allocator = &tensor_allocator;
  t.hooks.current_stream = &current_stream;
  t.hooks.check_not_capturing = &check_not_capturing;
  t.hooks.is_capturing = &is_capturing;
  t.hooks.capture_random = &cuda::Graph::capture_random;
  t.hooks.synchronize = &synchronize;
  t.hooks.count = &count;
  t.hooks.autocasts = &autocasts;
  t.hooks.pinned_staging = true;
  t.hooks.staging_new = &staging_new;
  t.hooks.staging_free = &staging_free;
  t.hooks.staging_acquire = &staging_acquire;
  t.hooks.staging_copy = &staging_copy;
  t.hooks.timing_event = &timing_event;
  t.hooks.timing_elapsed_ms = &timing_elapsed_ms;
  t.hooks.timing_reset = &timing_reset;
  t.hooks.range_push = &range_push;
  t.hooks.range_pop = &range_pop;
  t.copy_bytes = &copy_bytes;
  // Every CUDA kernel file's registration, one call each (cuda/kernels/registration.h).
  cuda::register_elementwise(t);
  cuda::register_reduce(t);
  cuda::register_sort(t);
  cuda::register_softmax(t);
  cuda::register_index(t);
  cuda::register_linalg(t);
  cuda::register_mse(t);
  cuda::register_cross_entropy(t);
  cuda::register_layer_norm(t);
  cuda::register_batch_norm(t);
  cuda::register_conv(t);
  cuda::register_conv_gemm(t);
  cuda::register_attention(t);
  cuda::register_fused_optim(t);
  cuda::register_multi_tensor(t);
}

}  // namespace ember::kernels
