// The gradient reducer behind DistributedDataParallel, shared with
// ZeroRedundancyOptimizer (internal to parallel/). Gradients live in one flat
// buffer per dtype; buckets are contiguous ranges of it (reverse registration
// order, padded to a multiple of 64 x world-size elements, the padding always
// zero) and every parameter's .grad() is a view of its slot. A bucket is launched
// from the leaf hooks as soon as its last gradient is in (buckets in order, so
// every rank launches the same sequence), on the communicator's stream after an
// event from the compute stream: backward never waits for it. Modes:
//   all-reduce (DDP): average into the bucket in place;
//   reduce-scatter (ZeRO-1): average of this rank's block into Bucket::shard;
//   reduce_dtype bfloat16 (float32 buckets): the bucket is cast to bfloat16,
//     exchanged with all_to_all, this rank's block summed in float32 (one
//     rounding, whatever the world size), then all-gathered in bfloat16 and cast
//     back (DDP), or kept in float32 as the shard (ZeRO).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "cuda/runtime.h"
#include "parallel/communicator.h"
#include "parallel/distributed.h"

namespace ember::parallel::detail {

struct Bucket {
  DType dtype = kFloat32;
  int flat = 0;                  // index into Reducer::flats
  int64_t flat_offset = 0;       // where the bucket starts in its flat buffer
  int64_t elems = 0;             // used by parameters
  int64_t padded = 0;            // elems rounded up; a multiple of the world size
  std::vector<int64_t> params;   // parameter indices, in bucket order
  std::vector<int64_t> offsets;  // element offset of each inside the bucket
  // This pass:
  int64_t pending = 0;                       // gradients still missing
  std::vector<std::shared_ptr<Work>> works;  // its collectives, in order
  std::vector<Tensor> fresh;                 // gradients autograd left outside the slots
  std::unique_ptr<cuda::Event> tail;         // CUDA: after the bucket's last comm-stream op
  bool launched = false;
  // Persistent:
  Tensor shard;              // reduce-scatter mode: this rank's averaged block (padded / world)
  Tensor staging, received;  // reduce_dtype bfloat16: send and receive buffers (padded)
};

class Reducer {
 public:
  Reducer(std::shared_ptr<Communicator> comm, DdpOptions options, std::vector<Tensor> params,
          std::vector<std::string> names);
  ~Reducer();

  std::shared_ptr<Communicator> comm;
  DdpOptions options;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<Tensor> flats;  // the gradient buffers, one per dtype
  std::vector<Bucket> buckets;
  std::vector<int64_t> bucket_of;  // by parameter index
  std::vector<int64_t> slot_of;    // position inside its bucket

  bool shard_mode = false;  // ZeRO-1: reduce-scatter; .grad() keeps the local gradient
  // ZeRO-1: each flat buffer's storage version when the last backward finished, so
  // step() can refuse gradients changed in place since (they would not reach the
  // shards, or race with the reduce-scatter reading them).
  std::vector<uint64_t> finished_versions;
  bool require_sync = true;
  bool in_pass = false;
  std::vector<bool> ready;
  size_t next_launch = 0;
  std::vector<SyncEvent> trace;

  // Parameter p's slot: a view of its dtype's flat buffer shaped like p.
  Tensor slot(int64_t p) const;
  // The bucket's whole range of its flat buffer (padded).
  Tensor region(const Bucket& b) const;
  bool grad_is_slot(int64_t p) const;
  bool on_cuda() const { return comm_stream_ != nullptr; }

  void on_grad_ready(int64_t p, const std::weak_ptr<Reducer>& self);
  // End of backward (a queued backward callback): launches what is left, waits
  // (all-reduce mode) and puts every .grad() back on its slot.
  void finish();
  // Waits for bucket b's collectives (host, under the deadline) and orders the
  // calling thread's current stream after everything the bucket queued.
  void wait_bucket(Bucket& b);
  // Waits for every launched bucket of the last pass not waited for yet.
  void wait_all();

 private:
  void start_pass();
  void launch_ready();
  void launch(Bucket& b, size_t index);
  void launch_bf16(Bucket& b, const Tensor& region, const std::string& label);

  int device_ = -1;
  cudaStream_t comm_stream_ = nullptr;  // NCCL: the communicator's stream
  std::unique_ptr<cuda::Event> grads_ready_;
};

}  // namespace ember::parallel::detail
