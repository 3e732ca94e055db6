// The meta device's state: per thread, the innermost MetaDeviceScope's simulated
// device (allocator, mirror, library workspaces), else a process-wide default.
#include "core/meta.h"

#include <atomic>
#include <cstdio>
#include <exception>
#include <mutex>
#include <vector>

#include "core/base/error.h"
#include "core/memory/backends.h"
#include "cuda/blas.h"

namespace ember {

namespace detail {

struct MetaContext {
  explicit MetaContext(const MetaDeviceOptions& o)
      : mirror(o.mirror), capacity(o.capacity), observer(o.observer) {
    EMBER_CHECK(o.mirror == DeviceType::CUDA || o.mirror == DeviceType::CPU,
                "MetaDeviceOptions: the meta device mirrors cpu or cuda, not ", Device(o.mirror));
    EMBER_CHECK(o.capacity > 0, "MetaDeviceOptions: capacity must be positive");
    memory::AllocatorOptions options = o.allocator;
    options.sanitize = false;  // guard bytes need memory to write
    auto simulated =
        std::make_unique<memory::SimulatedBackend>(o.capacity, 0, memory::SimulatedMemory::none);
    backend = simulated.get();
    allocator = std::make_unique<memory::CachingAllocator>(std::move(simulated), options);
  }

  DeviceType mirror;
  size_t capacity;
  MetaKernelObserver* observer;
  bool capturing = false;             // a MetaCaptureScope is alive
  memory::SimulatedBackend* backend;  // owned by the allocator
  std::unique_ptr<memory::CachingAllocator> allocator;
  std::atomic<bool> library_used[2] = {false, false};
  std::atomic<size_t> library_bytes{0};
  std::mutex library_mutex;
};

}  // namespace detail

namespace {

using detail::MetaContext;

thread_local MetaContext* t_current = nullptr;

MetaDeviceOptions default_options() {
  MetaDeviceOptions o;
  o.allocator = memory::AllocatorOptions::from_env();
  return o;
}

MetaContext& default_context() {
  // Never destroyed: meta tensors in statics may be freed after main returns.
  static auto* context = new MetaContext(default_options());
  return *context;
}

MetaContext& current() {
  return t_current != nullptr ? *t_current : default_context();
}

// Contexts whose scope ended while some of their tensors lived on: kept (never
// freed) so those tensors can still return their blocks.
void retire(MetaContext* context) {
  static std::mutex mutex;
  static auto* retired = new std::vector<MetaContext*>();
  std::lock_guard lock(mutex);
  retired->push_back(context);
}

size_t library_workspace_bytes(MetaLibrary library) {
  return library == MetaLibrary::cublas ? cuda::blas_workspace_bytes() : cuda::lt_workspace_bytes();
}

const char* library_name(MetaLibrary library) {
  return library == MetaLibrary::cublas ? "cuBLAS" : "cuBLASLt";
}

}  // namespace

MetaDeviceScope::MetaDeviceScope(const MetaDeviceOptions& options)
    : context_(new MetaContext(options)), previous_(t_current) {
  t_current = context_;
}

MetaDeviceScope::MetaDeviceScope() : MetaDeviceScope(default_options()) {}

MetaDeviceScope::~MetaDeviceScope() {
  t_current = previous_;
  if (context_->allocator->memory_allocated() > 0)
    retire(context_);
  else
    delete context_;
}

memory::CachingAllocator& MetaDeviceScope::allocator() const {
  return *context_->allocator;
}
DeviceType MetaDeviceScope::mirror() const {
  return context_->mirror;
}
size_t MetaDeviceScope::capacity() const {
  return context_->capacity;
}
size_t MetaDeviceScope::library_bytes() const {
  return context_->library_bytes.load();
}
bool MetaDeviceScope::uses(MetaLibrary library) const {
  return context_->library_used[static_cast<size_t>(library)].load();
}

MetaCaptureScope::MetaCaptureScope() : previous_(current().capturing) {
  current().capturing = true;
}
MetaCaptureScope::~MetaCaptureScope() {
  current().capturing = previous_;
}

memory::CachingAllocator& meta_allocator() {
  return *current().allocator;
}
DeviceType meta_mirror() {
  return current().mirror;
}

namespace detail {

MetaKernelObserver* meta_observer() {
  return current().observer;
}

bool meta_capturing() {
  return current().capturing;
}

void meta_uses_library(MetaLibrary library) {
  MetaContext& c = current();
  std::atomic<bool>& used = c.library_used[static_cast<size_t>(library)];
  if (used.load(std::memory_order_acquire)) return;
  std::lock_guard lock(c.library_mutex);
  if (used.load(std::memory_order_relaxed)) return;
  // As the GPU does: a cudaMalloc beside the allocator's segments, never freed.
  const size_t bytes = library_workspace_bytes(library);
  if (c.backend->raw_alloc(bytes) == nullptr) {
    const size_t reserved = static_cast<size_t>(c.allocator->memory_reserved());
    throw OutOfMemoryError(str_cat(
        "meta device (mirroring cuda): the ", library_name(library), " workspace (",
        memory::format_bytes(bytes), ", allocated outside the caching allocator when the first ",
        library == MetaLibrary::cublas ? "matmul" : "cuBLASLt Linear",
        " runs) does not fit: the device holds ", memory::format_bytes(c.capacity), ", of which ",
        memory::format_bytes(reserved), " is reserved by ember and ",
        memory::format_bytes(c.library_bytes.load()), " by other library workspaces"));
  }
  c.library_bytes += bytes;
  used.store(true, std::memory_order_release);
}

}  // namespace detail

}  // namespace ember
