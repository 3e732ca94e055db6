#include "nn/data.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/base/random.h"  // random_bits: the same mixer as ember's RNG
#include "core/device_services.h"
#include "core/ops.h"

namespace ember::nn {

// ---------------------------------------------------------------- TensorDataset

TensorDataset::TensorDataset(Tensor data, Tensor targets)
    : data_(std::move(data)), targets_(std::move(targets)) {
  EMBER_CHECK(data_.defined() && data_.dim() >= 1,
              "TensorDataset: data must be a tensor of at least 1 dim (examples along dim 0)");
  EMBER_CHECK(!targets_.defined() || (targets_.dim() >= 1 && targets_.size(0) == data_.size(0)),
              "TensorDataset: data has ", data_.size(0), " examples but targets have shape ",
              targets_.defined() ? shape_str(targets_.sizes()) : "");
  // Contiguous, so the loader can copy rows with memcpy.
  data_ = data_.detach().contiguous();
  if (targets_.defined()) targets_ = targets_.detach().contiguous();
}

Example TensorDataset::get(size_t index) const {
  EMBER_CHECK(index < size(), "TensorDataset: index ", index, " out of range for ", size(),
              " examples");
  const auto i = static_cast<int64_t>(index);
  return Example{data_.select(0, i), targets_.defined() ? targets_.select(0, i) : Tensor()};
}

size_t TensorDataset::size() const {
  return static_cast<size_t>(data_.size(0));
}

// ---------------------------------------------------------------- epochs

// Pinned staging for a CUDA target: two slots (the batch being copied to the
// device and the one being prepared), each with data and target buffers.
struct DataLoader::Staging {
  PinnedStaging buffers[2][2];
};

namespace {

// A batch as the producer leaves it: final (`batch`), or staged in pinned slot
// `slot` waiting for its copy to the device, or (slot kShapeOnly) only its shapes,
// for a device whose tensors hold no values (the meta device).
constexpr int kShapeOnly = -1;
struct HostBatch {
  Example batch;
  bool staged = false;
  int slot = 0;
  Shape shape[2];
  DType dtype[2] = {kFloat32, kFloat32};
  bool has_target = false;
};

Shape batch_shape(int64_t n, const Shape& example) {
  Shape s{n};
  s.insert(s.end(), example.begin(), example.end());
  return s;
}

// Copies the examples' `which` tensors (0: data, 1: target) row after row into dst.
void gather_rows(const std::vector<Example>& ex, int which, char* dst) {
  for (const Example& e : ex) {
    Tensor t = contiguous(which == 0 ? e.data : e.target);
    std::memcpy(dst, t.raw_data(), t.nbytes());
    dst += t.nbytes();
  }
}

// Stacks same-shaped tensors along a new first dim (any device, via cat).
Tensor stack(const std::vector<Example>& ex, int which) {
  std::vector<Tensor> rows;
  for (const Example& e : ex) rows.push_back((which == 0 ? e.data : e.target).unsqueeze(0));
  return cat(rows, 0);
}

}  // namespace

struct DataLoader::Epoch {
  std::shared_ptr<const Dataset> dataset;
  DataLoaderOptions options;
  std::vector<size_t> order;
  size_t num_batches = 0;
  uint64_t number = 0;  // which epoch of the loader this is
  size_t position = 0;  // index of the current batch
  Example current;
  std::shared_ptr<Staging> staging;
  // The target holds no values (the meta device): batches are shapes, and the
  // device tensors are made where a GPU's would be (deliver), without reading rows.
  bool shape_only = false;

  std::thread worker;
  std::mutex mutex;
  std::condition_variable cv;
  std::optional<HostBatch> ready;
  std::exception_ptr error;
  bool stop = false;

  // Starts at batch `first` (0, or where a resumed run left off).
  Epoch(std::shared_ptr<const Dataset> d, const DataLoaderOptions& o, std::vector<size_t> ord,
        size_t batches, std::shared_ptr<Staging> st, uint64_t epoch_number, size_t first)
      : dataset(std::move(d)),
        options(o),
        order(std::move(ord)),
        num_batches(batches),
        number(epoch_number),
        position(first),
        staging(std::move(st)),
        shape_only(!holds_data(o.device())) {
    if (position >= num_batches) return;
    if (options.prefetch()) worker = std::thread([this] { run(); });
    try {
      load(position);
    } catch (...) {
      shutdown();  // the destructor will not run for a constructor that throws
      throw;
    }
  }

  ~Epoch() { shutdown(); }

  void shutdown() {
    {
      std::lock_guard lock(mutex);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }

  HostBatch produce(size_t b) {
    NoGradGuard no_grad;
    const size_t bs = static_cast<size_t>(options.batch_size());
    const size_t first = b * bs, last = std::min(first + bs, order.size());
    const auto n = static_cast<int64_t>(last - first);
    // Fast path: rows of a CPU TensorDataset are copied straight from its tensors.
    const auto* td = dynamic_cast<const TensorDataset*>(dataset.get());
    if (td && td->data().is_cpu() && (!td->targets().defined() || td->targets().is_cpu())) {
      const Tensor sources[2] = {td->data(), td->targets()};
      auto row_shape = [](const Tensor& t) {
        return Shape(t.sizes().begin() + 1, t.sizes().end());
      };
      return assemble(
          b, n, sources[1].defined(),
          {row_shape(sources[0]), sources[1].defined() ? row_shape(sources[1]) : Shape{}},
          {sources[0].dtype(), sources[1].defined() ? sources[1].dtype() : kFloat32},
          [&](int which, char* dst) {
            const Tensor& src = sources[which];
            const size_t row = src.nbytes() / static_cast<size_t>(src.size(0));
            const char* base = static_cast<const char*>(src.raw_data());
            for (size_t i = first; i < last; ++i, dst += row)
              std::memcpy(dst, base + order[i] * row, row);
          });
    }
    std::vector<Example> ex;
    ex.reserve(last - first);
    for (size_t i = first; i < last; ++i) ex.push_back(dataset->get(order[i]));
    const Example& e0 = ex.front();
    EMBER_CHECK(e0.data.defined(), "DataLoader: example ", order[first], " has undefined data");
    for (size_t k = 1; k < ex.size(); ++k) {
      const Example& e = ex[k];
      const bool same_target = e.target.defined() == e0.target.defined() &&
                               (!e0.target.defined() || (e.target.sizes() == e0.target.sizes() &&
                                                         e.target.dtype() == e0.target.dtype()));
      EMBER_CHECK(e.data.defined() && e.data.sizes() == e0.data.sizes() &&
                      e.data.dtype() == e0.data.dtype() && e.data.device() == e0.data.device() &&
                      same_target,
                  "DataLoader: example ", order[first + k],
                  " differs in shape, dtype or device from example ", order[first],
                  " of the same batch (data ",
                  e.data.defined() ? shape_str(e.data.sizes()) : "undefined", " vs ",
                  shape_str(e0.data.sizes()), "); examples in a batch must stack");
    }
    const bool has_target = e0.target.defined();
    if (!e0.data.is_cpu()) {  // data already on a device: stack there
      HostBatch hb;
      hb.has_target = has_target;
      hb.batch.data = stack(ex, 0).to(options.device());
      if (has_target) hb.batch.target = stack(ex, 1).to(options.device());
      return hb;
    }
    return assemble(b, n, has_target, {e0.data.sizes(), has_target ? e0.target.sizes() : Shape{}},
                    {e0.data.dtype(), has_target ? e0.target.dtype() : kFloat32},
                    [&](int which, char* dst) { gather_rows(ex, which, dst); });
  }

  // A batch of n rows of the given per-row shapes and dtypes (data, target),
  // written by write_rows(which, dst) into a CPU tensor or a pinned slot.
  HostBatch assemble(size_t b, int64_t n, bool has_target, const std::array<Shape, 2>& row_shapes,
                     const std::array<DType, 2>& dtypes,
                     const std::function<void(int, char*)>& write_rows) {
    OpSite site("DataLoader batch");
    HostBatch hb;
    hb.has_target = has_target;
    for (int which = 0; which < (has_target ? 2 : 1); ++which) {
      hb.shape[which] = batch_shape(n, row_shapes[static_cast<size_t>(which)]);
      hb.dtype[which] = dtypes[static_cast<size_t>(which)];
      if (shape_only) {
        hb.staged = true;
        hb.slot = kShapeOnly;
      } else if (!staging) {  // the host, or a device that takes no host copies
        Tensor out = empty(hb.shape[which], hb.dtype[which]);
        write_rows(which, static_cast<char*>(out.raw_data()));
        (which == 0 ? hb.batch.data : hb.batch.target) = out;
      } else {
        hb.staged = true;
        hb.slot = static_cast<int>(b % 2);
        const size_t bytes =
            static_cast<size_t>(numel_of(hb.shape[which])) * element_size(hb.dtype[which]);
        write_rows(which, static_cast<char*>(
                              staging->buffers[hb.slot][which].acquire(bytes, options.device())));
      }
    }
    return hb;
  }

  // On the consuming thread: queue the device copies of a staged batch.
  Example deliver(HostBatch hb) {
    if (!hb.staged) return std::move(hb.batch);
    OpSite site("DataLoader batch");
    const Device dev = options.device();
    Example out;
    for (int which = 0; which < (hb.has_target ? 2 : 1); ++which) {
      Tensor t = empty(hb.shape[which], TensorOptions(hb.dtype[which]).device(dev));
      if (hb.slot == kShapeOnly) {
        (which == 0 ? out.data : out.target) = t;
        continue;
      }
      staging->buffers[hb.slot][which].copy_to_device(t.raw_data(), t.nbytes(), dev);
      (which == 0 ? out.data : out.target) = t;
    }
    return out;
  }

  // Background thread: prepares batch b once batch b-1 has been taken, so the
  // pinned slot it writes was last used two batches ago (its copy is queued).
  void run() {
    for (size_t b = position; b < num_batches; ++b) {
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return stop || !ready.has_value(); });
        if (stop) return;
      }
      std::optional<HostBatch> hb;
      std::exception_ptr failure;
      try {
        hb = produce(b);
      } catch (...) {
        failure = std::current_exception();
      }
      std::lock_guard lock(mutex);
      if (failure) {
        error = failure;
        cv.notify_all();
        return;
      }
      ready = std::move(hb);
      cv.notify_all();
    }
  }

  HostBatch take(size_t b) {
    if (!options.prefetch()) return produce(b);
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return ready.has_value() || error != nullptr; });
    if (!ready && error) std::rethrow_exception(error);
    HostBatch hb = std::move(*ready);
    ready.reset();
    cv.notify_all();
    return hb;
  }

  void load(size_t b) { current = deliver(take(b)); }

  void advance() {
    EMBER_CHECK(position < num_batches, "DataLoader: advancing past the end of the epoch");
    ++position;
    current = Example{};
    if (position < num_batches) load(position);
  }
};

// ---------------------------------------------------------------- DataLoader

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, const DataLoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  EMBER_CHECK(options_.batch_size() > 0, "DataLoader: batch_size must be positive, got ",
              options_.batch_size());
  check_device(options_.device());
}

size_t DataLoader::size() const {
  const size_t n = dataset_->size(), bs = static_cast<size_t>(options_.batch_size());
  return options_.drop_last() ? n / bs : (n + bs - 1) / bs;
}

std::vector<size_t> DataLoader::epoch_order(uint64_t e) const {
  std::vector<size_t> order(dataset_->size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!options_.shuffle()) return order;
  // Fisher-Yates driven by a counter-based mix of (seed, epoch): no hidden state,
  // so any epoch's order can be recomputed (and a resumed run sees the same).
  const uint64_t key = random_bits(options_.seed(), e);
  for (size_t i = order.size(); i-- > 1;) {
    const size_t j = static_cast<size_t>(random_bits(key, i) % (i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

DataLoader::Iterator DataLoader::begin() {
  const uint64_t e = next_epoch_++;
  // Pinned buffers are reused across epochs unless an earlier epoch still runs.
  if (pinned_staging(options_.device()) && (!staging_ || staging_.use_count() > 1))
    staging_ = std::make_shared<Staging>();
  const size_t first = std::exchange(next_batch_, 0);
  auto epoch =
      std::make_shared<Epoch>(dataset_, options_, epoch_order(e), size(), staging_, e, first);
  current_ = epoch;
  return Iterator(std::move(epoch));
}

// ---------------------------------------------------------------- state

namespace {

Tensor int_scalar(uint64_t v) {
  Tensor t = empty({}, kInt64);
  *t.data_ptr<int64_t>() = static_cast<int64_t>(v);
  return t;
}

constexpr const char* kLoaderKeys[] = {"epoch",   "batch", "dataset_size", "batch_size",
                                       "shuffle", "seed",  "drop_last"};

}  // namespace

StateDict DataLoader::state_dict() const {
  uint64_t epoch = next_epoch_, batch = next_batch_;
  if (auto running = current_.lock(); running && running->position < running->num_batches) {
    // Inside the loop body the current batch has been handed out.
    epoch = running->number;
    batch = running->position + 1;
    if (batch == running->num_batches) {  // the last one: the epoch is done
      epoch += 1;
      batch = 0;
    }
  }
  StateDict sd;
  sd.insert("epoch", int_scalar(epoch));
  sd.insert("batch", int_scalar(batch));
  sd.insert("dataset_size", int_scalar(dataset_->size()));
  sd.insert("batch_size", int_scalar(static_cast<uint64_t>(options_.batch_size())));
  sd.insert("shuffle", int_scalar(options_.shuffle() ? 1 : 0));
  sd.insert("seed", int_scalar(options_.seed()));
  sd.insert("drop_last", int_scalar(options_.drop_last() ? 1 : 0));
  return sd;
}

void DataLoader::check_state_dict(const StateDict& state) const {
  for (const char* key : kLoaderKeys) {
    const Tensor* t = state.find(key);
    EMBER_CHECK(t != nullptr, "DataLoader::load_state_dict: missing key '", key, "'");
    EMBER_CHECK(t->defined() && t->dtype() == kInt64 && t->numel() == 1,
                "DataLoader::load_state_dict: '", key, "' must be an int64 scalar");
  }
  for (const auto& entry : state) {
    const auto& key = entry.first;  // not a structured binding: clang 14 cannot capture one
    EMBER_CHECK(std::find_if(std::begin(kLoaderKeys), std::end(kLoaderKeys),
                             [&](const char* k) { return key == k; }) != std::end(kLoaderKeys),
                "DataLoader::load_state_dict: unexpected key '", key, "'");
  }
  auto value = [&](const char* key) { return *state.at(key).to(kCPU).data_ptr<int64_t>(); };
  const StateDict mine = state_dict();
  std::string differ;
  for (const char* key : {"dataset_size", "batch_size", "shuffle", "seed", "drop_last"}) {
    const int64_t saved = value(key), have = *mine.at(key).data_ptr<int64_t>();
    if (saved != have)
      differ += std::string(differ.empty() ? "" : ", ") + key + " " + std::to_string(saved) +
                " (this loader: " + std::to_string(have) + ")";
  }
  EMBER_CHECK(differ.empty(), "DataLoader::load_state_dict: the state was saved by a loader with ",
              differ, "; this one would not continue the same sequence of batches");
  EMBER_CHECK(value("epoch") >= 0 && value("batch") >= 0 &&
                  static_cast<uint64_t>(value("batch")) < std::max<size_t>(size(), 1),
              "DataLoader::load_state_dict: position (epoch ", value("epoch"), ", batch ",
              value("batch"), ") is out of range for ", size(), " batches per epoch");
}

void DataLoader::load_state_dict(const StateDict& state) {
  check_state_dict(state);
  next_epoch_ = static_cast<uint64_t>(*state.at("epoch").to(kCPU).data_ptr<int64_t>());
  next_batch_ = static_cast<size_t>(*state.at("batch").to(kCPU).data_ptr<int64_t>());
}

bool DataLoader::Iterator::done() const {
  return !epoch_ || epoch_->position >= epoch_->num_batches;
}

const Example& DataLoader::Iterator::operator*() const {
  EMBER_CHECK(!done(), "DataLoader: dereferencing an exhausted iterator");
  return epoch_->current;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  EMBER_CHECK(epoch_ != nullptr, "DataLoader: incrementing an end iterator");
  epoch_->advance();
  return *this;
}

bool DataLoader::Iterator::operator==(const Iterator& other) const {
  if (done() || other.done()) return done() && other.done();
  return epoch_ == other.epoch_;
}

}  // namespace ember::nn
