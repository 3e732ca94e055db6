// CachingAllocator (core/memory/allocator_impl.h): the free-block cache (the best
// fit on the stream, splitting a block and merging freed neighbours) and the
// private pools that CUDA graphs allocate from.
#include "core/memory/allocator_impl.h"

namespace ember::memory {

CachingAllocator::PoolId CachingAllocator::Impl::create_pool() {
  std::lock_guard lock(mutex_);
  const PoolId id = next_pool_id_++;
  private_pools_.emplace(id, std::make_unique<PrivatePool>(&node_pool_));
  return id;
}

void CachingAllocator::Impl::begin_allocate_to_pool(PoolId id, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  PrivatePool* p = find_pool(id, "begin_allocate_to_pool");
  EMBER_CHECK(!options_.sanitize,
              "CUDA graph capture: not available in the allocator's "
              "sanitizer mode (",
              kAllocConfEnvVar,
              "=sanitize:True), whose checks read "
              "device memory synchronously");
  EMBER_CHECK(!p->capturing, "begin_allocate_to_pool: pool ", id, " is already capturing");
  EMBER_CHECK(capturing_pool(stream) == nullptr, "begin_allocate_to_pool: stream ",
              static_cast<void*>(stream), " already allocates to another pool");
  capturing_.reserve(capturing_.size() + 1);
  p->capturing = true;
  p->stream = stream;
  capturing_.push_back(p);
}

void CachingAllocator::Impl::end_allocate_to_pool(PoolId id) {
  std::lock_guard lock(mutex_);
  PrivatePool* p = find_pool(id, "end_allocate_to_pool");
  if (!p->capturing) return;
  p->capturing = false;
  capturing_.erase(std::find(capturing_.begin(), capturing_.end(), p));
}

void CachingAllocator::Impl::release_pool(PoolId id, cudaStream_t stream) {
  std::lock_guard lock(mutex_);
  PrivatePool* p = find_pool(id, "release_pool");
  EMBER_CHECK(!p->capturing, "release_pool: pool ", id, " is still capturing");
  std::vector<Block*> cached(p->small.begin(), p->small.end());
  cached.insert(cached.end(), p->large.begin(), p->large.end());
  std::vector<Block*> held = std::move(p->held);
  // Nothing below throws: the pool is gone in one piece.
  p->small.clear();
  p->large.clear();
  for (Block* b : cached) b->cached = false;
  for (auto& [base, seg] : segments_) {
    if (seg->pool != p) continue;
    seg->pool = nullptr;
    seg->stream = stream;
    for (Block* b = seg->head; b != nullptr; b = b->next) b->stream = stream;
  }
  for (Block* b : cached) cache_insert(b);
  private_pools_.erase(id);
  // A general block freed during this capture was held by every pool capturing
  // at that moment; it is free once the last of them is released.
  for (Block* b : held)
    if (--b->event_count == 0) free_block(b);
}

PrivatePool* CachingAllocator::Impl::find_pool(PoolId id, const char* op) {
  auto it = private_pools_.find(id);
  EMBER_CHECK(it != private_pools_.end(), op, ": no private pool ", id);
  return it->second.get();
}

void CachingAllocator::Impl::hold(Block* block) noexcept {
  for (PrivatePool* p : capturing_) {
    try {
      p->held.push_back(block);
      ++block->event_count;
    } catch (const std::exception&) {
      // Out of host memory: the pools that took it hold it; if none could, the
      // lesser harm is to cache it now.
    }
  }
  if (block->event_count == 0) release_to_pool(block);
}

void CachingAllocator::Impl::defer(Block* block) noexcept {
  try {
    deferred_.push_back(block);
    block->event_count = 1;  // shown as pending free, never merged meanwhile
  } catch (const std::exception&) {
    block->stream_uses.clear();  // out of host memory: cache it without waiting
    release_to_pool(block);
  }
}

void CachingAllocator::Impl::process_deferred() {
  std::vector<Block*> blocks = std::move(deferred_);
  deferred_.clear();
  for (Block* b : blocks) {
    b->event_count = 0;
    free_block(b);
  }
}

Block* CachingAllocator::Impl::take_cached_block(bool small, cudaStream_t stream, size_t size,
                                                 PrivatePool* target) {
  BlockSet& blocks = target == nullptr ? pool(small) : small ? target->small : target->large;
  if (!small && target == nullptr) ++large_lookups_;
  auto it = blocks.lower_bound(SearchKey{stream, size});
  if (it == blocks.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  if (b->segment->expandable) [[unlikely]] {
    // As PyTorch: prefer any other fitting block to a segment's growable tail,
    // which is as good as fresh memory.
    for (auto next = std::next(it);
         growable_tail(b) && next != blocks.end() && (*next)->stream == stream; ++next)
      if (!growable_tail(*next)) b = *next;
    return b;  // max_split_size does not apply inside expandable segments
  }
  const size_t max_split = options_.max_split_size;
  // An unsplittable block would waste its excess on a normal request...
  if (size < max_split && b->size >= max_split) return nullptr;
  // ...and an oversize request may round up only so far.
  if (size >= max_split && b->size - size >= options_.max_non_split_rounding) return nullptr;
  return b;
}

void* CachingAllocator::Impl::hand_out(Block* block, size_t size, size_t requested) {
  const size_t type = pool_type(block->small);
  const bool counts_split =
      !block->segment->expandable;  // as PyTorch: see format_fragmentation_line
  const bool was_split = block->is_split();
  if (should_split(block, size)) {
    // The allocation takes the front; the original block becomes the remainder
    // and keeps its place in the set when the order allows.
    Block* rest = block;
    block = new_block();
    block->ptr = rest->ptr;
    block->size = size;
    block->stream = rest->stream;
    block->small = rest->small;
    block->segment = rest->segment;
    block->prev = rest->prev;
    if (block->prev != nullptr)
      block->prev->next = block;
    else
      block->segment->head = block;
    block->next = rest;
    rest->prev = block;
    rest->ptr += size;
    rest->size -= size;
    if (rest->cached)
      reposition_shrunk(rest);
    else
      cache_insert(rest);
    if (counts_split) {
      if (was_split) {
        // An inactive split block shrank by `size`.
        decrease(c_.inactive_split_bytes, type, size);
      } else {
        // An unsplit block became a split, leaving an inactive remainder.
        increase(c_.inactive_split_bytes, type, rest->size);
        increase(c_.inactive_split, type, 1);
      }
    }
  } else {
    if (block->cached) cache_erase(block);
    if (was_split && counts_split) {
      // A whole inactive split block becomes active.
      decrease(c_.inactive_split_bytes, type, block->size);
      decrease(c_.inactive_split, type, 1);
    }
  }
  block->allocated = true;
  block->requested_size = requested;
  block->tag = AllocationTag::current();
  block->scope = AllocationScope::current();
  allocated_.insert(block->ptr, block);

  increase(c_.allocation, type, 1);
  increase(c_.allocated_bytes, type, block->size);
  increase(c_.active, type, 1);
  increase(c_.active_bytes, type, block->size);
  increase(c_.requested_bytes, type, requested);
  if (block->size >= options_.max_split_size) stats_.oversize_allocations.increase(1);
  if (history_on_)
    record(TraceAction::alloc, block->ptr, block->size, block->stream, block->tag, block->scope,
           requested);
  return reinterpret_cast<void*>(block->ptr);
}

void CachingAllocator::Impl::release_to_pool(Block* block) {
  if (history_on_)
    record(TraceAction::free_completed, block->ptr, block->size, block->stream, block->tag,
           block->scope, block->requested_size);
  const size_t type = pool_type(block->small);
  const size_t original_size = block->size;
  const size_t requested = block->requested_size;
  const bool counts_split = !block->segment->expandable;
  Block* prev = block->prev;
  Block* next = block->next;
  const bool merge_prev = prev != nullptr && prev->cached;
  const bool merge_next = next != nullptr && next->cached;
  int64_t split_blocks = 0;
  int64_t split_bytes = 0;
  Block* merged = block;
  if (merge_prev && merge_next) {
    split_blocks = -2;
    split_bytes = -static_cast<int64_t>(prev->size + next->size);
    prev->size += block->size + next->size;
    cache_erase(next);
    unlink(block);
    unlink(next);
    merged = prev;
    reposition_grown(prev);
  } else if (merge_prev) {
    split_blocks = -1;
    split_bytes = -static_cast<int64_t>(prev->size);
    prev->size += block->size;
    unlink(block);
    merged = prev;
    reposition_grown(prev);
  } else if (merge_next) {
    split_blocks = -1;
    split_bytes = -static_cast<int64_t>(next->size);
    next->ptr = block->ptr;
    next->size += block->size;
    unlink(block);
    merged = next;
    reposition_grown(next);
  } else {
    block->requested_size = 0;
    block->tag = nullptr;
    block->scope = nullptr;
    cache_insert(block);
  }
  if (merged->is_split()) {
    split_blocks += 1;
    split_bytes += static_cast<int64_t>(merged->size);
  }
  if (counts_split) {
    update(c_.inactive_split, type, split_blocks);
    update(c_.inactive_split_bytes, type, split_bytes);
  }
  decrease(c_.active, type, 1);
  decrease(c_.active_bytes, type, original_size);
  decrease(c_.requested_bytes, type, requested);
}

}  // namespace ember::memory
