#include "core/live_tensors.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/alloc_site.h"
#include "core/autograd.h"

namespace ember {

namespace {

// Threads spread over shards so that concurrent tensor creation (one host thread
// per GPU in DataParallel) rarely contends for a lock.
constexpr unsigned kShards = 16;
constexpr unsigned kUnregistered = ~0u;
std::atomic<bool> g_registry_on{true};

struct Shard {
  std::mutex mutex;
  TensorImpl* head = nullptr;
  size_t count = 0;
};

// Never destroyed: tensors in static storage may die after any other static.
Shard* shards() {
  static Shard* s = new Shard[kShards];
  return s;
}

unsigned this_thread_shard() {
  static std::atomic<unsigned> next{0};
  thread_local const unsigned shard = next.fetch_add(1, std::memory_order_relaxed) % kShards;
  return shard;
}

}  // namespace

namespace detail {

void register_live_tensor(TensorImpl& impl) noexcept {
  impl.site_op = AllocationTag::current();
  impl.site_scope = AllocationScope::current();
  if (!g_registry_on.load(std::memory_order_relaxed)) {
    impl.live_shard = kUnregistered;
    return;
  }
  impl.live_shard = this_thread_shard();
  Shard& s = shards()[impl.live_shard];
  std::lock_guard lock(s.mutex);
  impl.live_next = s.head;
  if (s.head) s.head->live_prev = &impl;
  s.head = &impl;
  ++s.count;
}

void unregister_live_tensor(TensorImpl& impl) noexcept {
  if (impl.live_shard == kUnregistered) return;
  Shard& s = shards()[impl.live_shard];
  std::lock_guard lock(s.mutex);
  if (impl.live_prev)
    impl.live_prev->live_next = impl.live_next;
  else
    s.head = impl.live_next;
  if (impl.live_next) impl.live_next->live_prev = impl.live_prev;
  --s.count;
}

void for_each_live_tensor(const std::function<void(const TensorImpl&)>& f) {
  for (unsigned i = 0; i < kShards; ++i) {
    Shard& s = shards()[i];
    std::lock_guard lock(s.mutex);
    for (const TensorImpl* t = s.head; t != nullptr; t = t->live_next) f(*t);
  }
}

}  // namespace detail

TensorImpl::TensorImpl() {
  detail::register_live_tensor(*this);
}

void set_live_tensor_registry(bool enabled) {
  g_registry_on.store(enabled);
}
bool live_tensor_registry_enabled() {
  return g_registry_on.load();
}

std::string LiveTensor::site() const {
  return site_name(scope, op);
}

size_t live_tensor_count() {
  size_t n = 0;
  for (unsigned i = 0; i < kShards; ++i) {
    std::lock_guard lock(shards()[i].mutex);
    n += shards()[i].count;
  }
  return n;
}

std::vector<LiveTensor> live_tensors(std::optional<Device> device) {
  std::vector<LiveTensor> out;
  detail::for_each_live_tensor([&](const TensorImpl& t) {
    if (!t.storage) return;
    if (device && t.storage->device() != *device) return;
    LiveTensor l;
    l.device = t.storage->device();
    l.dtype = t.dtype;
    l.sizes = t.sizes;
    l.bytes = static_cast<size_t>(numel_of(t.sizes)) * element_size(t.dtype);
    l.storage_bytes = t.storage->nbytes();
    l.storage_data = t.storage->data();
    l.op = t.site_op;
    l.scope = t.site_scope;
    if (t.autograd) {
      l.requires_grad = t.autograd->requires_grad;
      if (const Node* n = t.autograd->grad_fn.get()) {
        l.is_leaf = false;
        l.grad_fn = n->name();
        l.grad_fn_sequence_nr = n->sequence_nr;
      }
    }
    out.push_back(std::move(l));
  });
  std::stable_sort(out.begin(), out.end(), [](const LiveTensor& a, const LiveTensor& b) {
    return a.storage_bytes > b.storage_bytes;
  });
  return out;
}

std::string live_tensors_table(std::optional<Device> device, size_t max_rows) {
  std::vector<LiveTensor> live = live_tensors(device);
  // One row per storage: its largest view (or one holding a graph), with a count
  // of the other tensors viewing it (views, aliases saved for backward).
  std::vector<size_t> rows;
  std::unordered_map<const void*, size_t> row_of;
  std::vector<size_t> views;
  size_t total = 0, with_graph = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    const LiveTensor& l = live[i];
    with_graph += l.grad_fn != nullptr;
    auto [it, inserted] = row_of.try_emplace(l.storage_data, rows.size());
    if (inserted) {
      rows.push_back(i);
      views.push_back(0);
      total += l.storage_bytes;
      continue;
    }
    ++views[it->second];
    const LiveTensor& shown = live[rows[it->second]];
    if ((l.grad_fn && !shown.grad_fn) || (!shown.grad_fn && l.bytes > shown.bytes))
      rows[it->second] = i;
  }
  std::ostringstream os;
  os << live.size() << " live tensors on " << rows.size() << " storages, " << total << " bytes, "
     << with_graph << " holding an autograd graph\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-8s %-9s %-16s %12s %6s  %-14s %s\n", "device", "dtype",
                "shape", "bytes", "views", "graph", "made by");
  os << line;
  for (size_t r = 0; r < rows.size() && r < max_rows; ++r) {
    const LiveTensor& l = live[rows[r]];
    std::ostringstream dev, dt;
    dev << l.device;
    dt << l.dtype;
    std::snprintf(line, sizeof line, "%-8s %-9s %-16s %12zu %6zu  %-14s %s\n", dev.str().c_str(),
                  dt.str().c_str(), shape_str(l.sizes).c_str(), l.storage_bytes, views[r] + 1,
                  l.grad_fn ? l.grad_fn : (l.requires_grad ? "leaf" : "-"), l.site().c_str());
    os << line;
  }
  if (rows.size() > max_rows) os << "... " << rows.size() - max_rows << " more storages\n";
  return os.str();
}

}  // namespace ember
