#include "parallel/distributed.h"

#include "core/autograd.h"
#include "core/ops.h"

namespace ember::parallel {

struct DistributedDataParallel::State {
  struct Bucket {
    std::vector<int64_t> params;  // parameter indices, in bucket order
    std::vector<int64_t> offsets;  // element offset of each in `flat`
    Tensor flat;
    int64_t pending = 0;  // gradients still missing in this backward
    std::shared_ptr<Work> work;
  };

  std::shared_ptr<Communicator> comm;
  DdpOptions options;
  std::vector<Tensor> params;
  std::vector<std::string> names;
  std::vector<int64_t> bucket_of;  // by parameter index
  std::vector<int64_t> slot_of;    // position inside its bucket
  std::vector<Bucket> buckets;

  bool require_sync = true;
  bool in_pass = false;
  std::vector<bool> ready;
  size_t next_launch = 0;
  std::vector<SyncEvent> trace;

  Tensor slot(int64_t p) {
    Bucket& b = buckets[bucket_of[p]];
    int64_t off = b.offsets[slot_of[p]];
    return b.flat.slice(0, off, off + params[p].numel()).view(params[p].sizes());
  }

  void start_pass() {
    in_pass = true;
    ready.assign(params.size(), false);
    next_launch = 0;
    trace.clear();
    for (Bucket& b : buckets) {
      b.pending = static_cast<int64_t>(b.params.size());
      b.work.reset();
    }
  }

  // Launches, in bucket order, every bucket whose gradients are all in: each
  // rank launches the same sequence, so the collectives match.
  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      Bucket& b = buckets[next_launch];
      // The Work holds the bucket: after a timeout it outlives this DDP if need be.
      b.work = comm->all_reduce_async(b.flat, ReduceOp::Average,
                                      "DDP bucket " + std::to_string(next_launch));
      trace.push_back({SyncEvent::BucketLaunched, static_cast<int64_t>(next_launch)});
      ++next_launch;
    }
  }

  void on_grad_ready(int64_t p, const std::weak_ptr<State>& self) {
    if (!require_sync) return;
    if (!in_pass) {
      start_pass();
      queue_backward_callback([self] {
        if (auto s = self.lock()) s->finish();
      });
    }
    Bucket& b = buckets[bucket_of[p]];
    EMBER_CHECK(!ready[p] || !b.work, "DistributedDataParallel: parameter '", names[p],
                "' received a second gradient after its bucket's all-reduce started; "
                "use each parameter once per backward or call backward once per sync");
    slot(p).copy_(params[p].grad());
    if (!ready[p]) {
      ready[p] = true;
      --b.pending;
    }
    trace.push_back({SyncEvent::GradReady, p});
    launch_ready();
  }

  void finish() {
    if (!in_pass) return;
    NoGradGuard no_grad;
    std::string unused;
    for (size_t p = 0; p < params.size(); ++p) {
      if (ready[p]) continue;
      if (options.find_unused_parameters()) {
        slot(static_cast<int64_t>(p)).zero_();
        --buckets[bucket_of[p]].pending;
      } else {
        unused += (unused.empty() ? "'" : ", '") + names[p] + "'";
      }
    }
    try {
      if (unused.empty()) launch_ready();
      for (Bucket& b : buckets)
        if (b.work) b.work->wait();
    } catch (...) {
      in_pass = false;
      throw;
    }
    in_pass = false;
    EMBER_CHECK(unused.empty(), "DistributedDataParallel: parameter(s) ", unused,
                " received no gradient in this backward pass (rank ", comm->rank(),
                "). Make every parameter take part in the loss, or construct with "
                "DdpOptions().find_unused_parameters(true) to treat them as zero "
                "(the same parameters must be unused on every rank)");
    for (size_t p = 0; p < params.size(); ++p) {
      Tensor g = slot(static_cast<int64_t>(p));
      if (params[p].grad().defined()) params[p].mutable_grad().copy_(g);
      else params[p].set_grad(g.clone());
    }
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<Communicator> communicator,
                                                 DdpOptions options)
    : module_(std::move(module)), state_(std::make_shared<State>()) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: module is null");
  EMBER_CHECK(communicator != nullptr, "DistributedDataParallel: communicator is null");
  EMBER_CHECK(options.first_bucket_bytes() > 0 && options.bucket_bytes() > 0,
              "DistributedDataParallel: bucket sizes must be positive, got first_bucket_bytes ",
              options.first_bucket_bytes(), " and bucket_bytes ", options.bucket_bytes());
  State& s = *state_;
  s.comm = std::move(communicator);
  s.options = options;
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    EMBER_CHECK(p.device() == s.comm->device(), "DistributedDataParallel: parameter '", name,
                "' is on ", p.device(), " but the ", s.comm->backend(), " communicator of rank ",
                s.comm->rank(), " works on ", s.comm->device(), "; move the module first");
    EMBER_CHECK(is_floating(p.dtype()), "DistributedDataParallel: parameter '", name, "' is ",
                p.dtype(), "; only floating parameters can be averaged");
    s.names.push_back(name);
    s.params.push_back(p);
  }
  EMBER_CHECK(!s.params.empty(), "DistributedDataParallel: the module has no parameter that "
              "requires grad");

  // Same values everywhere before the first step.
  {
    NoGradGuard no_grad;
    for (const Tensor& p : s.params) s.comm->broadcast(p.detach(), 0);
  }
  if (options.broadcast_buffers()) sync_buffers();

  // Buckets in reverse registration order: gradients of the last layers arrive first.
  const int64_t n = static_cast<int64_t>(s.params.size());
  s.bucket_of.assign(n, -1);
  s.slot_of.assign(n, -1);
  int64_t bucket_elems = 0;
  for (int64_t p = n - 1; p >= 0; --p) {
    const Tensor& t = s.params[p];
    // The first bucket is small so that communication starts early.
    const int64_t limit =
        s.buckets.size() == 1 ? options.first_bucket_bytes() : options.bucket_bytes();
    bool fresh = s.buckets.empty();
    if (!fresh) {
      State::Bucket& last = s.buckets.back();
      const Tensor& first = s.params[last.params.front()];
      const int64_t bytes = (bucket_elems + t.numel()) * element_size(t.dtype());
      fresh = first.dtype() != t.dtype() || bytes > limit;
    }
    if (fresh) {
      s.buckets.emplace_back();
      bucket_elems = 0;
    }
    State::Bucket& b = s.buckets.back();
    s.bucket_of[p] = static_cast<int64_t>(s.buckets.size()) - 1;
    s.slot_of[p] = static_cast<int64_t>(b.params.size());
    b.params.push_back(p);
    b.offsets.push_back(bucket_elems);
    bucket_elems += t.numel();
  }
  for (State::Bucket& b : s.buckets) {
    const Tensor& first = s.params[b.params.front()];
    int64_t elems = b.offsets.back() + s.params[b.params.back()].numel();
    b.flat = zeros({elems}, TensorOptions().dtype(first.dtype()).device(first.device()));
  }

  std::weak_ptr<State> weak = state_;
  for (int64_t p = 0; p < n; ++p) {
    s.params[p].register_post_accumulate_grad_hook([weak, p](const Tensor&) {
      if (auto st = weak.lock()) st->on_grad_ready(p, weak);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() = default;

Communicator& DistributedDataParallel::communicator() { return *state_->comm; }
const DdpOptions& DistributedDataParallel::options() const { return state_->options; }

void DistributedDataParallel::sync_buffers() {
  NoGradGuard no_grad;
  for (auto& [name, b] : module_->named_buffers()) {
    EMBER_CHECK(b.device() == state_->comm->device(), "DistributedDataParallel: buffer '", name,
                "' is on ", b.device(), ", the communicator on ", state_->comm->device());
    state_->comm->broadcast(b, 0);
  }
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.state_->require_sync) {
  ddp.state_->require_sync = false;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.state_->require_sync = previous_; }

void DistributedDataParallel::finish_gradient_sync() { state_->finish(); }

std::vector<BucketInfo> DistributedDataParallel::buckets() const {
  std::vector<BucketInfo> out;
  for (const State::Bucket& b : state_->buckets) {
    BucketInfo info;
    for (int64_t p : b.params) info.parameters.push_back(state_->names[p]);
    info.bytes = static_cast<int64_t>(b.flat.nbytes());
    out.push_back(std::move(info));
  }
  return out;
}

const std::vector<SyncEvent>& DistributedDataParallel::last_sync_trace() const {
  return state_->trace;
}

}  // namespace ember::parallel
