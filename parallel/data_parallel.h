// DataParallel: one process, one persistent replica per device, one host thread
// per device (a worker pool created once). Each step scatters the batch (inputs
// and targets) along dim 0, runs forward, the loss and backward on every device at
// once, then all-reduces the gradients (NCCL, in one group; on CPU "devices", an
// in-process sum), so every replica holds the same gradient and its own optimizer
// makes the same update. Nothing is gathered to the first device: each replica's
// rows, activations, loss, gradients and optimizer state stay on its own device;
// only each replica's scalar loss reaches the host. (PyTorch's nn.DataParallel
// gathers the outputs to GPU 0 and computes the loss there, which is why its GPU 0
// fills up.) Gradients are views of one flat buffer per replica, all-reduced in
// place: no copy in or out; a gradient autograd makes afresh (after zero_grad())
// is copied into its slot as it arrives and freed.
//
// Replicas: nn::Module has no clone(), so replicas come from a factory that builds
// the same architecture; replica 0's state_dict is then loaded into every other
// replica, so they start bit-identical whatever the factory's initialisation.
// Buffers (e.g. running statistics) follow PyTorch's DataParallel rule: replica
// 0's buffers are copied to every replica at the start of each step, so only
// replica 0's buffer updates persist.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "nn/module.h"
#include "optim/optimizer.h"

namespace ember::parallel {

// Every CUDA device present (cuda:0 ... cuda:n-1); empty without a GPU.
std::vector<Device> all_gpus();

class DataParallelBase {
 public:
  using ModuleFactory = std::function<std::shared_ptr<nn::Module>()>;
  using OptimizerFactory =
      std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> params)>;
  // The loss of one replica on its chunk, reduced by mean over the chunk's rows.
  using LossFn =
      std::function<Tensor(nn::Module& replica, const Tensor& input, const Tensor& target)>;

  // `first` (may be null: the factory builds it) becomes replica 0 on devices[0].
  DataParallelBase(std::shared_ptr<nn::Module> first, ModuleFactory factory,
                   std::vector<Device> devices);
  ~DataParallelBase();
  DataParallelBase(const DataParallelBase&) = delete;
  DataParallelBase& operator=(const DataParallelBase&) = delete;

  const std::vector<Device>& devices() const;
  size_t size() const { return devices().size(); }

  // One step's forward and backward on the whole batch. Chunks are torch.chunk's:
  // ceil(B / n) rows each, the last smaller (or empty). Each replica's mean loss is
  // weighted by its share of rows, so the summed gradient is exactly the gradient
  // of the mean loss over the whole batch, whatever the split. Gradients add to
  // what .grad() held (zero_grad() as usual; replica 0's .grad() is the one
  // carried over). Returns the whole batch's loss.
  double forward_backward(const Tensor& input, const Tensor& target, const LossFn& loss_fn);

  // One optimizer per replica, built by `make` from the replica's parameters.
  void set_optimizer(const OptimizerFactory& make);
  void step();  // every replica's optimizer, each on its device's thread
  void zero_grad(bool set_to_none = true);
  // Copies replica 0's buffers to every other replica (done by forward_backward).
  void sync_buffers();

 protected:
  nn::Module& replica_module(size_t i);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

template <typename M>
class DataParallel : public DataParallelBase {
 public:
  using Factory = std::function<std::shared_ptr<M>()>;
  using TypedLossFn = std::function<Tensor(M& replica, const Tensor& input, const Tensor& target)>;

  // Replicas built by `factory` on `devices` (default: every GPU).
  explicit DataParallel(Factory factory, std::vector<Device> devices = all_gpus())
      : DataParallelBase(nullptr, erase(factory), std::move(devices)) {}
  // `module` becomes replica 0 (moved to devices[0]); `factory` builds the others.
  DataParallel(std::shared_ptr<M> module, Factory factory, std::vector<Device> devices = all_gpus())
      : DataParallelBase(std::move(module), erase(factory), std::move(devices)) {}

  M& replica(size_t i) { return static_cast<M&>(replica_module(i)); }
  double forward_backward(const Tensor& input, const Tensor& target, const TypedLossFn& loss_fn) {
    return DataParallelBase::forward_backward(input, target,
                                              [&](nn::Module& m, const Tensor& x, const Tensor& y) {
                                                return loss_fn(static_cast<M&>(m), x, y);
                                              });
  }

 private:
  static ModuleFactory erase(Factory f) {
    return [f = std::move(f)]() -> std::shared_ptr<nn::Module> { return f(); };
  }
};

}  // namespace ember::parallel
