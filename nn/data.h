// Data loading: a Dataset hands out single examples, a DataLoader groups them
// into batches (stacked along a new first dim), optionally shuffled, optionally
// prepared one batch ahead on a background thread, and, for a CUDA target,
// staged in pinned host memory and copied to the device asynchronously. For the
// meta device (core/meta.h) batches are made with their shapes only, where a CUDA
// target's device tensors would be, and no row is read.
//
//   auto data = std::make_shared<nn::TensorDataset>(x, y);
//   nn::DataLoader loader(data, nn::DataLoaderOptions().batch_size(32).shuffle(true));
//   for (const nn::Example& batch : loader) { ... batch.data, batch.target ... }
//
// Each range-for (each begin()) is one epoch. With shuffle, epoch e's order is a
// permutation determined by (seed, e) alone, the same on every machine.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <vector>

#include "core/state_dict.h"
#include "core/tensor.h"

namespace ember::nn {

// One example, or one batch of them. `target` may be undefined (unlabelled data).
struct Example {
  Tensor data;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Example `index`, in [0, size()). Called from the loader's background thread
  // when prefetching, so it must not touch unsynchronised shared state.
  virtual Example get(size_t index) const = 0;
  virtual size_t size() const = 0;
};

// Rows of `data` (and of `targets`, if given) as examples.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor data, Tensor targets = Tensor());
  Example get(size_t index) const override;
  size_t size() const override;
  const Tensor& data() const { return data_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor data_;
  Tensor targets_;
};

class DataLoaderOptions {
 public:
  DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}
  DataLoaderOptions& batch_size(int64_t v) {
    batch_size_ = v;
    return *this;
  }
  DataLoaderOptions& shuffle(bool v) {
    shuffle_ = v;
    return *this;
  }
  DataLoaderOptions& seed(uint64_t v) {
    seed_ = v;
    return *this;
  }
  // Drop the last batch when it has fewer than batch_size examples.
  DataLoaderOptions& drop_last(bool v) {
    drop_last_ = v;
    return *this;
  }
  // Prepare the next batch on a background thread while this one is used.
  DataLoaderOptions& prefetch(bool v) {
    prefetch_ = v;
    return *this;
  }
  // Where batches are delivered; CUDA stages through pinned memory.
  DataLoaderOptions& device(Device v) {
    device_ = v;
    return *this;
  }
  int64_t batch_size() const { return batch_size_; }
  bool shuffle() const { return shuffle_; }
  uint64_t seed() const { return seed_; }
  bool drop_last() const { return drop_last_; }
  bool prefetch() const { return prefetch_; }
  Device device() const { return device_; }

 private:
  int64_t batch_size_;
  bool shuffle_ = false;
  uint64_t seed_ = 0;
  bool drop_last_ = false;
  bool prefetch_ = false;
  Device device_ = kCPU;
};

class DataLoader {
  struct Epoch;
  struct Staging;

 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options = {});
  template <typename D>
  requires std::derived_from<D, Dataset> DataLoader(D dataset,
                                                    const DataLoaderOptions& options = {})
      : DataLoader(std::shared_ptr<const Dataset>(std::make_shared<D>(std::move(dataset))),
                   options) {}

  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Example;
    using difference_type = std::ptrdiff_t;
    using pointer = const Example*;
    using reference = const Example&;

    Iterator() = default;
    const Example& operator*() const;
    const Example* operator->() const { return &**this; }
    Iterator& operator++();
    // Iterators compare equal when both are exhausted (or are the same epoch at
    // the same batch).
    bool operator==(const Iterator& other) const;

   private:
    friend class DataLoader;
    explicit Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)) {}
    bool done() const;
    std::shared_ptr<Epoch> epoch_;
  };

  // Starts the next epoch (reshuffling when asked) and returns its first batch.
  Iterator begin();
  Iterator end() { return Iterator(); }

  size_t size() const;  // batches per epoch
  size_t dataset_size() const { return dataset_->size(); }
  // Epochs started so far; set_epoch(e) makes the next begin() epoch e (resume),
  // from its first batch.
  uint64_t epoch() const { return next_epoch_; }
  void set_epoch(uint64_t e) {
    next_epoch_ = e;
    next_batch_ = 0;
  }

  // Where the loader stands, for checkpoints (nn/checkpoint.h), as int64 scalars:
  //   epoch, batch    the epoch in progress and how many of its batches were
  //                   handed out (inside the loop body: the current one counts);
  //                   between epochs, the next epoch and 0
  //   dataset_size, batch_size, shuffle, seed, drop_last
  //                   what the position means; a loader that differs in any of
  //                   them cannot continue the same sequence and refuses to load
  // After load_state_dict, the next begin() continues that epoch with the batch
  // after the last one handed out: a run saved inside its loop and resumed sees
  // exactly the batches it would have seen.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);
  // The validation half of load_state_dict: throws as it would, changes nothing.
  void check_state_dict(const StateDict& state) const;
  // The order in which epoch e visits the dataset.
  std::vector<size_t> epoch_order(uint64_t e) const;
  const DataLoaderOptions& options() const { return options_; }

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  uint64_t next_epoch_ = 0;
  size_t next_batch_ = 0;         // the batch the next begin() starts at (resume)
  std::weak_ptr<Epoch> current_;  // the epoch last begun, while it is iterated
  std::shared_ptr<Staging> staging_;
};

}  // namespace ember::nn
