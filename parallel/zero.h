// ZeroRedundancyOptimizer: ZeRO stage 1 under DistributedDataParallel. Each rank
// keeps the optimizer state (momentum, Adam's moments) of 1/N of the parameters
// only. The DDP buckets then reduce-scatter instead of all-reduce: rank r gets
// the averaged gradient of its block of every bucket (Bucket::shard); step()
// updates its blocks of the parameters with the wrapped optimizer (SGD, Adam,
// AdamW: the fused update ops, one call per bucket as its reduce-scatter lands,
// so updates overlap the last buckets' communication), then all-gathers each
// bucket's parameters in place, each all-gather starting as soon as its update
// is queued. To make that possible the parameters are moved into one flat buffer
// per dtype laid out as the gradients' (each parameter a view of it).
//
// After backward, .grad() holds this rank's local (not averaged) gradient; the
// averaged one exists only as the shards: clip with clip_grad_norm_ below (step()
// refuses module gradients changed in place after backward). Parameters after N steps equal plain
// DDP's with the same optimizer: bitwise where the sum's order is the same (two
// ranks: one addition per element), to float32 rounding otherwise.
//
// Checkpoints are sharded: save(dir) writes dir/zero_rank<r>_of<N>.ckpt on every
// rank (the format of nn/checkpoint.h: layout, options, this rank's state);
// load(dir) reads all N files and re-shards for however many ranks load them.
// A checkpoint of another model (parameters, shapes, bucket layout) or another
// optimizer (type, state buffers) is refused, naming what differs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "parallel/distributed.h"

namespace ember::parallel {

class ZeroRedundancyOptimizer {
 public:
  // Builds the wrapped optimizer over this rank's blocks: one 1-D tensor per
  // bucket (its parameters' view), e.g.
  //   [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p,
  //   optim::AdamOptions(1e-3)); }
  using OptimizerFactory =
      std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> shard_params)>;

  ZeroRedundancyOptimizer(DistributedDataParallel& ddp, const OptimizerFactory& make);
  ~ZeroRedundancyOptimizer();
  ZeroRedundancyOptimizer(const ZeroRedundancyOptimizer&) = delete;
  ZeroRedundancyOptimizer& operator=(const ZeroRedundancyOptimizer&) = delete;

  // One update of every parameter from the gradients of the last backward.
  // Throws when no backward ran since the last step.
  void step();
  // The module's gradients (set_to_none: dropped, as Optimizer::zero_grad).
  void zero_grad(bool set_to_none = true);
  // Collective, between backward and step(): clips the averaged gradient, as
  // nn::utils::clip_grad_norm_ would the whole averaged gradient of plain DDP. The
  // norm of order norm_type (> 0, or inf) over every rank's shards (each rank's norm
  // all-gathered on the device: no host sync), every shard scaled by
  // min(max_norm / (norm + 1e-6), 1). Returns the norm (a float64 0-dim tensor on the
  // device). nn::utils::clip_grad_norm_ over the module's parameters would clip this
  // rank's local gradients instead; step() refuses gradients changed after backward.
  Tensor clip_grad_norm_(double max_norm, double norm_type = 2.0);

  // The wrapped optimizer (its parameters: this rank's blocks).
  optim::Optimizer& shard_optimizer();
  // Bytes of optimizer state this rank holds (0 before the first step).
  int64_t state_bytes() const;
  // Elements of the parameters this rank updates (its blocks, padding included),
  // and of all parameters.
  int64_t shard_numel() const;
  int64_t total_numel() const;

  // Collective: every rank writes its file; returns when all have.
  void save(const std::string& dir) const;
  // Collective: reads every file of the checkpoint in `dir`, whatever world size
  // wrote it; throws ember::Error before changing anything if it does not match.
  void load(const std::string& dir);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::parallel
