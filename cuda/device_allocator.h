// The caching allocator every byte of a CUDA device's tensors comes from: one per
// device, created on first use with the options of EMBER_CUDA_ALLOC_CONF (a
// malformed value is an error naming it), never destroyed.
#pragma once

#include "core/memory/caching_allocator.h"

namespace ember::cuda {

// Throws ember::Error for a device that does not exist.
memory::CachingAllocator& device_caching_allocator(int device);

}  // namespace ember::cuda
