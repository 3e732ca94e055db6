#include "parallel/data_parallel.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/check.h"
#include "cuda/runtime.h"
#ifdef EMBER_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace ember::parallel {

std::vector<Device> all_gpus() {
  std::vector<Device> out;
  for (int i = 0; i < cuda::device_count(); ++i) out.push_back(Device::cuda(i));
  return out;
}

namespace {

// One thread per device, alive as long as the DataParallel: run() hands every
// thread its task, waits for all and rethrows the first failure.
class WorkerPool {
 public:
  WorkerPool(size_t n, std::function<void(size_t)> init) : tasks_(n), errors_(n) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this, i, init] { loop(i, init); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void run(const std::function<void(size_t)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < tasks_.size(); ++i) {
        tasks_[i] = [&fn, i] { fn(i); };
        errors_[i] = nullptr;
      }
      pending_ = tasks_.size();
    }
    wake_.notify_all();
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [this] { return pending_ == 0; });
    for (std::exception_ptr& e : errors_)
      if (e) std::rethrow_exception(e);
  }

 private:
  void loop(size_t i, const std::function<void(size_t)>& init) {
    init(i);
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        wake_.wait(lock, [&] { return stop_ || tasks_[i] != nullptr; });
        if (stop_) return;
        task = std::move(tasks_[i]);
        tasks_[i] = nullptr;
      }
      std::exception_ptr error;
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard<std::mutex> lock(mu_);
      errors_[i] = error;
      if (--pending_ == 0) done_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::function<void()>> tasks_;
  std::vector<std::exception_ptr> errors_;
  size_t pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

struct DataParallelBase::Impl {
  std::vector<Device> devices;
  std::vector<std::shared_ptr<nn::Module>> replicas;
  std::vector<std::vector<Tensor>> params;             // each replica's, in order
  std::vector<std::unique_ptr<cuda::Stream>> streams;  // CUDA replicas only
  std::vector<std::unique_ptr<optim::Optimizer>> optimizers;
#ifdef EMBER_HAVE_NCCL
  std::vector<std::unique_ptr<NcclCommunicator>> comms;
#endif
  // Each replica's gradients: one flat buffer on its own device, every .grad()
  // a view of it (its slot), all-reduced in place: no copy in or out.
  std::vector<Tensor> flats;
  std::vector<int64_t> offsets;  // slot j starts at offsets[j] in every flat
  std::shared_ptr<int> alive = std::make_shared<int>(0);  // the hooks' way to tell
  std::unique_ptr<WorkerPool> pool;                       // last: its threads use the rest

  bool on_cuda() const {
    return devices.front().is_cuda();
  }

  Tensor slot(size_t i, size_t j) const {
    const Tensor& p = params[i][j];
    return flats[i].slice(0, offsets[j], offsets[j] + p.numel()).view(p.sizes());
  }
  bool grad_is_slot(size_t i, size_t j) const {
    const Tensor& g = params[i][j].grad();
    return g.defined() && g.storage() == flats[i].storage() &&
           g.storage_offset() == flats[i].storage_offset() + offsets[j];
  }

  // Runs fn(i) on every device's thread. On CUDA each thread then waits for its
  // stream, so the caller may read replicas from any thread and stream afterwards.
  void run(const std::function<void(size_t)>& fn) {
    pool->run([&](size_t i) {
      fn(i);
      if (on_cuda()) streams[i]->synchronize();
    });
  }

  // Sums the flat gradients of all replicas into each of them.
  void all_reduce_flats() {
    if (on_cuda()) {
#ifdef EMBER_HAVE_NCCL
      // One host thread drives every GPU: one NCCL group, each on its replica's stream.
      std::vector<std::unique_ptr<cuda::StreamGuard>> guards;
      std::vector<NcclCommunicator*> cs;
      std::vector<FlatBuffer> bufs;
      for (size_t i = 0; i < devices.size(); ++i) {
        guards.push_back(std::make_unique<cuda::StreamGuard>(devices[i].index, streams[i]->get()));
        cs.push_back(comms[i].get());
        bufs.push_back(FlatBuffer::of(flats[i]));
      }
      NcclCommunicator::all_reduce_group(cs, bufs, ReduceOp::Sum);
      for (auto& s : streams) s->synchronize();
#endif
      return;
    }
    // CPU replicas: one sum in a fixed order, copied to all, so all hold the same bits.
    NoGradGuard no_grad;
    Tensor sum = flats[0].clone();
    for (size_t i = 1; i < flats.size(); ++i) sum.add_(flats[i]);
    for (Tensor& f : flats) f.copy_(sum);
  }
};

DataParallelBase::DataParallelBase(std::shared_ptr<nn::Module> first, ModuleFactory factory,
                                   std::vector<Device> devices)
    : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(!devices.empty(),
              "DataParallel: no devices (no GPU found? pass devices "
              "explicitly, e.g. {kCPU, kCPU} to run replicas on the host)");
  EMBER_CHECK(factory != nullptr, "DataParallel: the module factory is empty");
  const bool cuda_devices = devices.front().is_cuda();
  for (size_t i = 0; i < devices.size(); ++i) {
    EMBER_CHECK(devices[i].is_cuda() == cuda_devices, "DataParallel: devices mix CPU and CUDA (",
                devices.front(), " and ", devices[i], ")");
    for (size_t j = 0; j < i && cuda_devices; ++j)
      EMBER_CHECK(!(devices[j] == devices[i]), "DataParallel: device ", devices[i],
                  " is listed twice (NCCL needs one rank per GPU)");
    if (cuda_devices) cuda::check_device(devices[i].index);
  }
#ifndef EMBER_HAVE_NCCL
  EMBER_CHECK(!cuda_devices,
              "DataParallel: ember was built without NCCL, so replicas can only "
              "run on CPU");
#endif
  Impl& m = *impl_;
  m.devices = devices;
  if (!first) first = factory();
  EMBER_CHECK(first != nullptr, "DataParallel: the module factory returned null");
  first->to(devices[0]);
  m.replicas.push_back(first);
  for (size_t i = 1; i < devices.size(); ++i) {
    std::shared_ptr<nn::Module> r = factory();
    EMBER_CHECK(r != nullptr, "DataParallel: the module factory returned null");
    r->to(devices[i]);
    StateDict state;
    for (const auto& [name, t] : first->state_dict()) state.insert(name, t.to(devices[i]));
    r->load_state_dict(state);  // throws naming any key the factory's module lacks
    m.replicas.push_back(std::move(r));
  }
  if (cuda_devices) {
    for (const Device& d : devices) m.streams.push_back(std::make_unique<cuda::Stream>(d.index));
#ifdef EMBER_HAVE_NCCL
    std::vector<int> ids;
    for (const Device& d : devices) ids.push_back(d.index);
    m.comms = NcclCommunicator::create_all(ids);
#endif
  }
  // The gradient buffers, and every .grad() a view of its slot from here on.
  for (size_t i = 0; i < devices.size(); ++i) m.params.push_back(m.replicas[i]->parameters());
  int64_t total = 0;
  for (const Tensor& p : m.params[0]) {
    EMBER_CHECK(p.dtype() == m.params[0].front().dtype(), "DataParallel: the parameters mix ",
                m.params[0].front().dtype(), " and ", p.dtype(), "; one dtype per model");
    m.offsets.push_back(total);
    total += p.numel();
  }
  const DType dtype = m.params[0].empty() ? kFloat32 : m.params[0].front().dtype();
  for (size_t i = 0; i < devices.size(); ++i) {
    NoGradGuard no_grad;
    m.flats.push_back(zeros({total}, TensorOptions().dtype(dtype).device(devices[i])));
    for (size_t j = 0; j < m.params[i].size(); ++j) {
      Tensor s = m.slot(i, j);
      if (m.params[i][j].grad().defined()) s.copy_(m.params[i][j].grad());
      m.params[i][j].set_grad(s);
      // A gradient autograd made afresh (after zero_grad) goes into the slot as
      // soon as it exists, and the fresh buffer is freed: one copy, no pile-up.
      const size_t ri = i, rj = j;
      Impl* self = &m;
      std::weak_ptr<int> alive = m.alive;  // replica 0 may outlive this DataParallel
      m.params[i][j].register_post_accumulate_grad_hook([self, alive, ri, rj](const Tensor& param) {
        if (alive.expired() || self->grad_is_slot(ri, rj)) return;
        NoGradGuard ng;
        Tensor s = self->slot(ri, rj);
        s.copy_(param.grad());
        param.set_grad(s);
      });
    }
  }
  m.pool = std::make_unique<WorkerPool>(devices.size(), [this](size_t i) {
    const Device d = impl_->devices[i];
    if (d.is_cuda()) {
      cuda::set_device(d.index);
      cuda::set_current_stream(d.index, impl_->streams[i]->get());
    }
  });
}

DataParallelBase::~DataParallelBase() {
  if (impl_) impl_->pool.reset();  // join the threads before the replicas go
}

const std::vector<Device>& DataParallelBase::devices() const {
  return impl_->devices;
}

nn::Module& DataParallelBase::replica_module(size_t i) {
  EMBER_CHECK(i < impl_->replicas.size(), "DataParallel: replica ", i, " of ",
              impl_->replicas.size());
  return *impl_->replicas[i];
}

void DataParallelBase::sync_buffers() {
  Impl& m = *impl_;
  auto source = m.replicas[0]->named_buffers();
  if (source.empty() || m.devices.size() == 1) return;
  m.run([&](size_t i) {
    if (i == 0) return;
    NoGradGuard no_grad;
    auto mine = m.replicas[i]->named_buffers();
    for (size_t j = 0; j < mine.size(); ++j)
      mine[j].second.copy_(source[j].second.to(m.devices[i]));
  });
}

double DataParallelBase::forward_backward(const Tensor& input, const Tensor& target,
                                          const LossFn& loss_fn) {
  EMBER_CHECK(input.defined() && target.defined() && input.dim() >= 1 && target.dim() >= 1,
              "DataParallel: input and target must be defined tensors with a batch dimension");
  const int64_t batch = input.size(0);
  EMBER_CHECK(batch >= 1 && target.size(0) == batch, "DataParallel: input has ", batch,
              " rows, target ", target.size(0), "; both need the same batch of at least 1");
  Impl& m = *impl_;
  // The workers read input and target on their own streams: let the caller's
  // stream finish writing them first.
  for (const Tensor* t : {&input, &target})
    if (t->is_cuda()) {
      cuda::DeviceGuard guard(t->device().index);
      EMBER_CUDA_CHECK(cudaStreamSynchronize(cuda::current_stream(t->device().index)));
    }
  sync_buffers();
  const int64_t n = static_cast<int64_t>(m.devices.size());
  const int64_t chunk = (batch + n - 1) / n;
  std::vector<double> losses(n, 0.0);

  m.run([&](size_t i) {
    const int64_t begin = std::min<int64_t>(batch, static_cast<int64_t>(i) * chunk);
    const int64_t end = std::min<int64_t>(batch, begin + chunk);
    const Device d = m.devices[i];
    std::vector<Tensor>& params = m.params[i];
    NoGradGuard outside;
    // What .grad() held is carried by replica 0 alone, so that the sum below
    // counts it once; the other replicas start from zero.
    const bool keep = i == 0;
    bool all_slots = true, all_none = true;
    for (size_t j = 0; j < params.size(); ++j) {
      all_slots = all_slots && m.grad_is_slot(i, j);
      all_none = all_none && !params[j].grad().defined();
    }
    if (all_slots) {
      if (!keep) m.flats[i].zero_();
    } else if (!all_none) {
      for (size_t j = 0; j < params.size(); ++j) {
        const Tensor g = params[j].grad();
        Tensor s = m.slot(i, j);
        if (!keep || !g.defined())
          s.zero_();
        else if (!m.grad_is_slot(i, j))
          s.copy_(g);
        params[j].set_grad(s);
      }
    }
    if (end > begin) {
      // Only this replica's rows reach its device; the loss stays there too.
      Tensor x = input.slice(0, begin, end).to(d);
      Tensor y = target.slice(0, begin, end).to(d);
      EnableGradGuard grad_on;
      Tensor loss = loss_fn(*m.replicas[i], x, y);
      EMBER_CHECK(loss.numel() == 1, "DataParallel: the loss function returned shape ",
                  shape_str(loss.sizes()), ", expected a single value");
      const double share = static_cast<double>(end - begin) / static_cast<double>(batch);
      (loss * share).backward();
      losses[i] = loss.item() * share;  // one scalar crosses to the host per replica
    }
    // A parameter that got no gradient counts as zero (a replica with no rows:
    // all of them); with all_none nothing was zeroed before.
    for (size_t j = 0; j < params.size(); ++j) {
      if (m.grad_is_slot(i, j)) continue;
      Tensor s = m.slot(i, j);
      s.zero_();
      params[j].set_grad(s);
    }
  });

  m.all_reduce_flats();
  double total = 0;
  for (double l : losses) total += l;
  return total;
}

void DataParallelBase::set_optimizer(const OptimizerFactory& make) {
  Impl& m = *impl_;
  m.optimizers.clear();
  for (auto& r : m.replicas) {
    m.optimizers.push_back(make(r->parameters()));
    EMBER_CHECK(m.optimizers.back() != nullptr,
                "DataParallel: the optimizer factory returned null");
  }
}

void DataParallelBase::step() {
  Impl& m = *impl_;
  EMBER_CHECK(m.optimizers.size() == m.replicas.size(),
              "DataParallel: step() before set_optimizer()");
  m.run([&](size_t i) { m.optimizers[i]->step(); });
}

void DataParallelBase::zero_grad(bool set_to_none) {
  Impl& m = *impl_;
  m.run([&](size_t i) { m.replicas[i]->zero_grad(set_to_none); });
}

}  // namespace ember::parallel
