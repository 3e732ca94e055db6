#include "parallel/distributed.h"

#include <optional>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/check.h"
#include "parallel/ddp_reducer.h"
#ifdef EMBER_HAVE_NCCL
#include "parallel/nccl_communicator.h"
#endif

namespace ember::parallel {

namespace detail {

namespace {
// Buckets are padded to a multiple of this many elements times the world size:
// every rank's block of a bucket then starts 256-byte aligned (float32).
constexpr int64_t kPadElems = 64;
}  // namespace

Reducer::Reducer(std::shared_ptr<Communicator> c, DdpOptions o, std::vector<Tensor> ps,
                 std::vector<std::string> ns)
    : comm(std::move(c)), options(o), params(std::move(ps)), names(std::move(ns)) {
  const int64_t world = comm->size();
  const int64_t n = static_cast<int64_t>(params.size());
  // Buckets in reverse registration order: gradients of the last layers arrive first.
  bucket_of.assign(n, -1);
  slot_of.assign(n, -1);
  for (int64_t p = n - 1; p >= 0; --p) {
    const Tensor& t = params[p];
    // The first bucket is small so that communication starts early.
    const int64_t limit =
        buckets.size() == 1 ? options.first_bucket_bytes() : options.bucket_bytes();
    bool fresh = buckets.empty();
    if (!fresh) {
      const Bucket& last = buckets.back();
      const int64_t bytes =
          (last.elems + t.numel()) * static_cast<int64_t>(element_size(t.dtype()));
      fresh = last.dtype != t.dtype() || bytes > limit;
    }
    if (fresh) {
      buckets.emplace_back();
      buckets.back().dtype = t.dtype();
    }
    Bucket& b = buckets.back();
    bucket_of[p] = static_cast<int64_t>(buckets.size()) - 1;
    slot_of[p] = static_cast<int64_t>(b.params.size());
    b.params.push_back(p);
    b.offsets.push_back(b.elems);
    b.elems += t.numel();
  }
  // One flat buffer per dtype, buckets one after another in launch order.
  std::vector<DType> dtypes;
  std::vector<int64_t> sizes;
  const int64_t unit = kPadElems * world;
  for (Bucket& b : buckets) {
    b.padded = (b.elems + unit - 1) / unit * unit;
    size_t f = 0;
    while (f < dtypes.size() && dtypes[f] != b.dtype) ++f;
    if (f == dtypes.size()) {
      dtypes.push_back(b.dtype);
      sizes.push_back(0);
    }
    b.flat = static_cast<int>(f);
    b.flat_offset = sizes[f];
    sizes[f] += b.padded;
  }
  const Device device = comm->device();
  for (size_t f = 0; f < dtypes.size(); ++f)
    flats.push_back(zeros({sizes[f]}, TensorOptions().dtype(dtypes[f]).device(device)));
  const bool bf16 = options.reduce_dtype() == kBFloat16;
  for (Bucket& b : buckets) {
    if (bf16 && b.dtype == kFloat32) {
      b.staging = zeros({b.padded}, TensorOptions().dtype(kBFloat16).device(device));
      b.received = zeros({b.padded}, TensorOptions().dtype(kBFloat16).device(device));
    }
  }
  if (device.is_cuda()) {
    device_ = device.index;
#ifdef EMBER_HAVE_NCCL
    if (auto* nccl = dynamic_cast<NcclCommunicator*>(comm.get())) comm_stream_ = nccl->stream();
#endif
    EMBER_CHECK(comm_stream_ != nullptr, "DistributedDataParallel: parameters on ", device,
                " need a communicator with a CUDA stream (NCCL), got ", comm->backend());
    grads_ready_ = std::make_unique<cuda::Event>(false);
    for (Bucket& b : buckets) b.tail = std::make_unique<cuda::Event>(false);
  }
  // Every gradient is a view of its slot from now on (an existing one is kept).
  NoGradGuard no_grad;
  if (bf16) {
    // NCCL connects send/receive pairs on first use, inside the call, which then
    // waits for the peers without a deadline: do it now, while every rank is here.
    Tensor a = zeros({world}, TensorOptions().dtype(kBFloat16).device(device));
    Tensor b = zeros({world}, TensorOptions().dtype(kBFloat16).device(device));
    comm->all_to_all(FlatBuffer::of(a), FlatBuffer::of(b));
  }
  for (int64_t p = 0; p < n; ++p) {
    Tensor s = slot(p);
    if (params[p].grad().defined()) s.copy_(params[p].grad());
    params[p].set_grad(s);
  }
}

Reducer::~Reducer() = default;

Tensor Reducer::slot(int64_t p) const {
  const Bucket& b = buckets[bucket_of[p]];
  const int64_t off = b.flat_offset + b.offsets[slot_of[p]];
  return flats[b.flat].slice(0, off, off + params[p].numel()).view(params[p].sizes());
}

Tensor Reducer::region(const Bucket& b) const {
  return flats[b.flat].slice(0, b.flat_offset, b.flat_offset + b.padded);
}

bool Reducer::grad_is_slot(int64_t p) const {
  const Tensor& g = params[p].grad();
  if (!g.defined()) return false;
  const Bucket& b = buckets[bucket_of[p]];
  return g.storage() == flats[b.flat].storage() &&
         g.storage_offset() ==
             flats[b.flat].storage_offset() + b.flat_offset + b.offsets[slot_of[p]] &&
         g.is_contiguous();
}

void Reducer::start_pass() {
  // Collectives of a pass nobody waited for (ZeRO mode without step()) finish first.
  wait_all();
  in_pass = true;
  ready.assign(params.size(), false);
  next_launch = 0;
  trace.clear();
  for (Bucket& b : buckets) {
    b.pending = static_cast<int64_t>(b.params.size());
    b.works.clear();
    b.fresh.clear();
    b.launched = false;
  }
}

void Reducer::launch_ready() {
  // In bucket order: each rank launches the same sequence, so the collectives match.
  while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
    launch(buckets[next_launch], next_launch);
    trace.push_back({SyncEvent::BucketLaunched, static_cast<int64_t>(next_launch)});
    ++next_launch;
  }
}

void Reducer::launch(Bucket& b, size_t index) {
  NoGradGuard no_grad;
  const std::string label = "DDP bucket " + std::to_string(index);
  std::optional<cuda::StreamGuard> on_comm;
  if (on_cuda()) {
    // The communication stream starts once the compute stream has produced the
    // gradients; the compute stream goes on with backward.
    grads_ready_->record(cuda::current_stream(device_));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, grads_ready_->get(), 0));
    on_comm.emplace(device_, comm_stream_);
  }
  // Gradients autograd left outside their slots (after zero_grad(), which set
  // them to none) are copied in here, off the compute stream.
  for (int64_t p : b.params) {
    if (grad_is_slot(p)) continue;
    slot(p).copy_(params[p].grad());
    b.fresh.push_back(params[p].grad());
  }
  const Tensor whole = region(b);
  if (options.reduce_dtype() == kBFloat16 && b.dtype == kFloat32) {
    launch_bf16(b, whole, label);
  } else if (shard_mode) {
    b.works.push_back(comm->reduce_scatter_async(FlatBuffer::of(whole), FlatBuffer::of(b.shard),
                                                 ReduceOp::Average, label));
    b.works.back()->keep_alive(b.shard);
  } else {
    b.works.push_back(comm->all_reduce_async(FlatBuffer::of(whole), ReduceOp::Average, label));
  }
  // A collective that times out may still write: its buffers must outlive it.
  b.works.back()->keep_alive(whole);
  if (b.tail) b.tail->record(comm_stream_);
  b.launched = true;
}

void Reducer::launch_bf16(Bucket& b, const Tensor& whole, const std::string& label) {
  const int n = comm->size(), r = comm->rank();
  const int64_t block = b.padded / n;
  // On NCCL every step below is queued on the communication stream in order;
  // on MPI each collective is waited for before its result is read.
  auto settle = [&] {
    if (!on_cuda()) b.works.back()->wait();
  };
  b.staging.copy_(whole);  // float32 -> bfloat16
  b.works.push_back(comm->all_to_all_async(FlatBuffer::of(b.staging), FlatBuffer::of(b.received),
                                           label + " (bf16 all_to_all)"));
  b.works.back()->keep_alive(b.staging);
  b.works.back()->keep_alive(b.received);
  settle();
  // This rank's block from every rank, summed in float32.
  Tensor sum = b.received.view({n, block}).to(kFloat32).sum(0);
  sum.mul_(1.0 / n);
  if (shard_mode) {
    b.shard.copy_(sum);
    return;
  }
  Tensor mine = b.staging.slice(0, r * block, (r + 1) * block);
  mine.copy_(sum);
  b.works.push_back(comm->all_gather_async(FlatBuffer::of(mine), FlatBuffer::of(b.staging),
                                           label + " (bf16 all_gather)"));
  b.works.back()->keep_alive(b.staging);
  settle();
  Tensor out = whole;
  out.copy_(b.staging);  // bfloat16 -> float32
}

void Reducer::on_grad_ready(int64_t p, const std::weak_ptr<Reducer>& self) {
  if (!require_sync) return;
  if (!in_pass) {
    start_pass();
    queue_backward_callback([self] {
      if (auto s = self.lock()) s->finish();
    });
  }
  Bucket& b = buckets[bucket_of[p]];
  EMBER_CHECK(!ready[p] || !b.launched, "DistributedDataParallel: parameter '", names[p],
              "' received a second gradient after its bucket's all-reduce started; "
              "use each parameter once per backward or call backward once per sync");
  if (!ready[p]) {
    ready[p] = true;
    --b.pending;
  }
  trace.push_back({SyncEvent::GradReady, p});
  launch_ready();
}

void Reducer::wait_bucket(Bucket& b) {
  if (!b.launched) return;
  // Taken out first: after a failure nothing is waited for twice.
  std::vector<std::shared_ptr<Work>> works = std::move(b.works);
  b.works.clear();
  b.launched = false;
  for (auto& w : works) w->wait();
  if (b.tail) {
    // wait() ordered the caller after the collectives; the bucket may have
    // queued more after them (bfloat16: the cast back).
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(cuda::current_stream(device_), b.tail->get(), 0));
  }
}

void Reducer::wait_all() {
  for (Bucket& b : buckets) {
    if (comm->broken()) {  // nothing more will complete; their buffers stay reserved
      for (auto& w : b.works) w->abandon_buffers();
      b.works.clear();
      b.launched = false;
      continue;
    }
    wait_bucket(b);
  }
}

void Reducer::finish() {
  if (!in_pass) return;
  NoGradGuard no_grad;
  std::string unused;
  for (size_t p = 0; p < params.size(); ++p) {
    if (ready[p]) continue;
    if (options.find_unused_parameters()) {
      // Counted as zero: whatever the slot held (and a stray .grad()) goes.
      if (!grad_is_slot(static_cast<int64_t>(p))) params[p].set_grad(slot(static_cast<int64_t>(p)));
      slot(static_cast<int64_t>(p)).zero_();
      --buckets[bucket_of[p]].pending;
    } else {
      unused += (unused.empty() ? "'" : ", '") + names[p] + "'";
    }
  }
  try {
    if (unused.empty()) launch_ready();
    // ZeRO-1 waits bucket by bucket in its step(), updating as buckets arrive.
    if (!shard_mode) wait_all();
  } catch (...) {
    in_pass = false;
    throw;
  }
  in_pass = false;
  if (!unused.empty()) {
    wait_all();  // what was launched still has to finish before the slots are reused
    EMBER_FAIL("DistributedDataParallel: parameter(s) ", unused,
               " received no gradient in this backward pass (rank ", comm->rank(),
               "). Make every parameter take part in the loss, or construct with "
               "DdpOptions().find_unused_parameters(true) to treat them as zero "
               "(the same parameters must be unused on every rank)");
  }
  // Every .grad() back on its slot; the copies made at launch are done reading
  // the fresh tensors once the caller's stream is ordered after the bucket.
  for (size_t p = 0; p < params.size(); ++p)
    if (!grad_is_slot(static_cast<int64_t>(p))) params[p].set_grad(slot(static_cast<int64_t>(p)));
  if (!shard_mode)
    for (Bucket& b : buckets) b.fresh.clear();
  finished_versions.clear();
  for (const Tensor& f : flats) finished_versions.push_back(f.version());
}

}  // namespace detail

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<Communicator> communicator,
                                                 DdpOptions options)
    : module_(std::move(module)) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: module is null");
  EMBER_CHECK(communicator != nullptr, "DistributedDataParallel: communicator is null");
  EMBER_CHECK(options.first_bucket_bytes() > 0 && options.bucket_bytes() > 0,
              "DistributedDataParallel: bucket sizes must be positive, got first_bucket_bytes ",
              options.first_bucket_bytes(), " and bucket_bytes ", options.bucket_bytes());
  EMBER_CHECK(options.reduce_dtype() == kFloat32 || options.reduce_dtype() == kBFloat16,
              "DistributedDataParallel: reduce_dtype must be float32 or bfloat16, got ",
              options.reduce_dtype());
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (auto& [name, p] : module_->named_parameters()) {
    if (!p.requires_grad()) continue;
    EMBER_CHECK(p.device() == communicator->device(), "DistributedDataParallel: parameter '", name,
                "' is on ", p.device(), " but the ", communicator->backend(),
                " communicator of rank ", communicator->rank(), " works on ",
                communicator->device(), "; move the module first");
    EMBER_CHECK(is_floating(p.dtype()), "DistributedDataParallel: parameter '", name, "' is ",
                p.dtype(), "; only floating parameters can be averaged");
    EMBER_CHECK(p.dtype() != kBFloat16 || communicator->device().is_cuda(),
                "DistributedDataParallel: parameter '", name, "' is bfloat16, which the ",
                communicator->backend(), " backend cannot sum");
    names.push_back(name);
    params.push_back(p);
  }
  EMBER_CHECK(!params.empty(),
              "DistributedDataParallel: the module has no parameter that "
              "requires grad");

  // Same values everywhere before the first step.
  {
    NoGradGuard no_grad;
    for (const Tensor& p : params) communicator->broadcast(p.detach(), 0);
  }
  state_ = std::make_shared<detail::Reducer>(communicator, options, params, names);
  if (options.broadcast_buffers()) sync_buffers();

  std::weak_ptr<detail::Reducer> weak = state_;
  for (int64_t p = 0; p < static_cast<int64_t>(params.size()); ++p) {
    params[p].register_post_accumulate_grad_hook([weak, p](const Tensor&) {
      if (auto st = weak.lock()) st->on_grad_ready(p, weak);
    });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  // Collectives still in flight read the gradient buffers: let them finish.
  try {
    state_->wait_all();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: ~DistributedDataParallel: %s\n", e.what());
  }
}

Communicator& DistributedDataParallel::communicator() {
  return *state_->comm;
}
const DdpOptions& DistributedDataParallel::options() const {
  return state_->options;
}

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

DistributedDataParallel::NoSync::~NoSync() {
  ddp_.state_->require_sync = previous_;
}

void DistributedDataParallel::finish_gradient_sync() {
  state_->finish();
}

std::vector<BucketInfo> DistributedDataParallel::buckets() const {
  std::vector<BucketInfo> out;
  for (const detail::Bucket& b : state_->buckets) {
    BucketInfo info;
    for (int64_t p : b.params) info.parameters.push_back(state_->names[p]);
    info.bytes = b.padded * static_cast<int64_t>(element_size(b.dtype));
    out.push_back(std::move(info));
  }
  return out;
}

const std::vector<SyncEvent>& DistributedDataParallel::last_sync_trace() const {
  return state_->trace;
}

}  // namespace ember::parallel
