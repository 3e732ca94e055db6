// CachingAllocator (core/memory/allocator_impl.h): expandable segments, address
// space reserved once per segment with pages mapped as blocks need them and
// unmapped when the tail is free.
#include "core/memory/allocator_impl.h"

namespace ember::memory {

Segment* CachingAllocator::Impl::expandable_segment(bool small, cudaStream_t stream,
                                                    PrivatePool* target, size_t need,
                                                    bool& no_address_space) {
  for (Segment* seg : expandables_)
    if (seg->stream == stream && seg->small == small && seg->pool == target &&
        seg->size - seg->mapped >= need)
      return seg;
  if (reservation_ == 0) {
    // Room for the whole device and an eighth more, as PyTorch reserves: one
    // stream's segment can hold everything the device has.
    const size_t total = backend_->memory_info().total;
    reservation_ = round_up(std::max(total + total / 8, page_), page_);
  }
  if (need > reservation_) return nullptr;  // more than the device has: out of memory
  const size_t bytes = reservation_;
  void* base = backend_->reserve_address_space(bytes);
  if (base == nullptr) {
    warn_no_expandable("no address space is left to reserve");
    no_address_space = true;
    return nullptr;
  }
  auto* seg = new Segment;
  seg->base = reinterpret_cast<uintptr_t>(base);
  seg->size = bytes;
  seg->mapped = 0;
  seg->order = ++segment_count_;
  seg->stream = stream;
  seg->small = small;
  seg->expandable = true;
  seg->pool = target;
  segments_.emplace(seg->base, seg);
  expandables_.push_back(seg);
  return seg;
}

Block* CachingAllocator::Impl::grow_expandable(bool small, cudaStream_t stream, size_t size,
                                               PrivatePool* target, bool& no_address_space) {
  // The tail of the segment this would grow, if its free tail can help.
  Segment* seg = nullptr;
  size_t have = 0;
  for (Segment* s : expandables_) {
    if (s->stream != stream || s->small != small || s->pool != target) continue;
    Block* tail = last_block(s);
    const size_t tail_free = tail != nullptr && tail->cached ? tail->size : 0;
    if (s->size - s->mapped >= round_up(size - std::min(size, tail_free), page_)) {
      seg = s;
      have = std::min(size, tail_free);
      break;
    }
  }
  const size_t need = round_up(size - have, page_);
  if (seg == nullptr) seg = expandable_segment(small, stream, target, need, no_address_space);
  if (seg == nullptr) return nullptr;
  if (need == 0) {  // the free tail grew enough meanwhile (events completed)
    Block* tail = last_block(seg);
    cache_erase(tail);
    return tail;
  }
  const uintptr_t at = seg->base + seg->mapped;
  if (!backend_->map_pages(reinterpret_cast<void*>(at), need)) {
    if (seg->mapped == 0) release_expandable(seg);  // a fresh reservation: nothing to keep
    return nullptr;
  }
  const size_t type = pool_type(small);
  if (seg->mapped == 0) increase(c_.segment, type, 1);  // counted while it holds memory
  seg->mapped += need;
  increase(c_.reserved_bytes, type, need);
  ++stats_.num_device_alloc;
  if (history_on_) record(TraceAction::segment_map, at, need, stream, AllocationTag::current());

  Block* tail = last_block(seg);
  if (tail != nullptr && tail->cached) {
    cache_erase(tail);
    tail->size += need;
    return tail;
  }
  Block* b = new_block();
  b->ptr = at;
  b->size = need;
  b->stream = stream;
  b->small = small;
  b->segment = seg;
  b->prev = tail;
  b->next = nullptr;
  if (tail != nullptr)
    tail->next = b;
  else
    seg->head = b;
  return b;
}

void CachingAllocator::Impl::unmap_free_tail(Segment* seg) {
  Block* tail = last_block(seg);
  if (tail == nullptr || !tail->cached) return;
  const size_t offset = tail->ptr - seg->base;
  const size_t keep = round_up(offset, page_);
  if (keep >= seg->mapped) return;
  const size_t bytes = seg->mapped - keep;
  backend_->unmap_pages(reinterpret_cast<void*>(seg->base + keep), bytes);
  seg->mapped = keep;
  const size_t type = pool_type(seg->small);
  decrease(c_.reserved_bytes, type, bytes);
  ++stats_.num_device_free;
  if (history_on_)
    record(TraceAction::segment_unmap, seg->base + keep, bytes, seg->stream, nullptr);
  if (keep == offset) {
    cache_erase(tail);
    unlink(tail);
  } else {
    tail->size = keep - offset;
    reposition_shrunk(tail);
  }
  if (seg->mapped == 0) {
    decrease(c_.segment, type, 1);
    release_expandable(seg);
  }
}

void CachingAllocator::Impl::release_expandable(Segment* seg) {
  backend_->release_address_space(reinterpret_cast<void*>(seg->base), seg->size);
  expandables_.erase(std::find(expandables_.begin(), expandables_.end(), seg));
  segments_.erase(seg->base);
  delete seg;
}

void CachingAllocator::Impl::warn_no_expandable(const std::string& why) {
  if (warned_expandable_) return;
  warned_expandable_ = true;
  std::fprintf(stderr, "ember: %s=expandable_segments:True: %s; %s ordinary segments\n",
               kAllocConfEnvVar, why.c_str(),
               expandable_ ? "requests that do not fit fall back to" : "using");
}

}  // namespace ember::memory
