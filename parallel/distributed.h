// DistributedDataParallel: one process (rank) per device, each with a full copy of
// the model. Parameters are broadcast from rank 0 once. Gradients live in one
// flat buffer per dtype, every .grad() a view of it; buckets (reverse
// registration order, about first_bucket_bytes then bucket_bytes each) are
// ranges of that buffer whose average all-reduce starts from the leaf hooks as
// soon as a bucket's last gradient is in, on the communicator's stream, while
// backward goes on. When backward ends, the averaged gradients are in .grad() on
// every rank. (Details: parallel/ddp_reducer.h.)
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "parallel/communicator.h"

namespace ember::parallel {

class DdpOptions {
 public:
  DdpOptions& first_bucket_bytes(int64_t b) {
    first_bucket_bytes_ = b;
    return *this;
  }
  DdpOptions& bucket_bytes(int64_t b) {
    bucket_bytes_ = b;
    return *this;
  }
  // Parameters that get no gradient in a backward count as zero (else: an error
  // naming them). The same parameters must be unused on every rank.
  DdpOptions& find_unused_parameters(bool on) {
    find_unused_parameters_ = on;
    return *this;
  }
  // sync_buffers() at construction copies rank 0's buffers everywhere.
  DdpOptions& broadcast_buffers(bool on) {
    broadcast_buffers_ = on;
    return *this;
  }
  // The dtype gradients travel in: float32 (default: as they are) or bfloat16
  // for float32 parameters (half the bytes; each rank's block summed in float32,
  // so the result is the float32 average of bfloat16-rounded gradients, rounded
  // once more to bfloat16).
  DdpOptions& reduce_dtype(DType t) {
    reduce_dtype_ = t;
    return *this;
  }
  int64_t first_bucket_bytes() const { return first_bucket_bytes_; }
  int64_t bucket_bytes() const { return bucket_bytes_; }
  bool find_unused_parameters() const { return find_unused_parameters_; }
  bool broadcast_buffers() const { return broadcast_buffers_; }
  DType reduce_dtype() const { return reduce_dtype_; }

 private:
  int64_t first_bucket_bytes_ = int64_t{1} << 20;
  int64_t bucket_bytes_ = int64_t{25} << 20;
  bool find_unused_parameters_ = false;
  bool broadcast_buffers_ = true;
  DType reduce_dtype_ = kFloat32;
};

// What happened during the last synchronised backward, in order (for tests and
// for seeing the overlap): a parameter's gradient arrived, or a bucket was launched.
struct SyncEvent {
  enum Kind { GradReady, BucketLaunched } kind;
  int64_t index;  // parameter index (registration order) or bucket index
};

struct BucketInfo {
  std::vector<std::string> parameters;  // in the order they sit in the bucket
  int64_t bytes = 0;                    // padded (a multiple of 64 x world size elements)
};

namespace detail {
class Reducer;
}

class DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module,
                          std::shared_ptr<Communicator> communicator, DdpOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  nn::Module& module() { return *module_; }
  Communicator& communicator();
  const DdpOptions& options() const;

  // Copies rank 0's buffers (e.g. running statistics) to every rank, as PyTorch
  // does before each forward with broadcast_buffers; call it where you want that.
  void sync_buffers();

  // While a NoSync lives, backward passes only accumulate local gradients; the
  // first synchronised backward after it all-reduces the accumulated sum.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // Waits for every bucket, leaves every .grad() as a view of the averaged
  // buffer and checks that every parameter got one (naming those that did not).
  // Runs by itself at the end of each backward; calling it again does nothing.
  // A .grad() set to none (zero_grad()) is copied into its slot on the
  // communication stream when its bucket launches; one kept (zero_grad(false),
  // or accumulation) is accumulated into in place by autograd.
  void finish_gradient_sync();

  std::vector<BucketInfo> buckets() const;
  const std::vector<SyncEvent>& last_sync_trace() const;

 private:
  friend class ZeroRedundancyOptimizer;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<detail::Reducer> state_;  // hooks hold it weakly: they outlive this object
};

}  // namespace ember::parallel
