#include "parallel/zero.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>

#include "core/autograd.h"
#include "core/ops.h"
#include "nn/checkpoint.h"
#include "optim/adam.h"
#include "optim/sgd.h"
#include "parallel/ddp_reducer.h"

namespace ember::parallel {

namespace {

// The optimizer's kind as the checkpoint names it (Optimizer::name() is not public).
std::string optimizer_kind(const optim::Optimizer& o) {
  if (dynamic_cast<const optim::AdamW*>(&o)) return "AdamW";
  if (dynamic_cast<const optim::Adam*>(&o)) return "Adam";
  if (dynamic_cast<const optim::SGD*>(&o)) return "SGD";
  return "custom";
}

Tensor scalar_i64(int64_t v) {
  return from_vector(std::vector<double>{static_cast<double>(v)}, {}, kInt64);
}

Tensor vector_i64(const std::vector<int64_t>& v) {
  std::vector<double> d(v.begin(), v.end());
  return from_vector(d, {static_cast<int64_t>(d.size())}, kInt64);
}

std::vector<int64_t> to_i64(const Tensor& t) {
  return t.reshape({-1}).to_vector<int64_t>();
}

int dtype_code(DType t) {
  return static_cast<int>(t);
}

std::string shape_of(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string shard_file(const std::string& dir, int rank, int world) {
  return (std::filesystem::path(dir) /
          ("zero_rank" + std::to_string(rank) + "_of" + std::to_string(world) + ".ckpt"))
      .string();
}

// N for a file named zero_rank<r>_of<N>.ckpt, else 0.
int shard_file_world(const std::string& name) {
  auto digits = [&](size_t& i) {
    const size_t from = i;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') ++i;
    return i > from && i - from < 9 ? std::stoi(name.substr(from, i - from)) : -1;
  };
  const std::string head = "zero_rank", mid = "_of", tail = ".ckpt";
  if (name.rfind(head, 0) != 0) return 0;
  size_t i = head.size();
  if (digits(i) < 0 || name.compare(i, mid.size(), mid) != 0) return 0;
  i += mid.size();
  const int world = digits(i);
  return world > 0 && name.substr(i) == tail ? world : 0;
}

// The module's gradients under ZeRO-1 are this rank's own, and the reduce-scatter of
// each bucket starts from them during backward: changed in place afterwards (a
// clip_grad_norm_ over the module's parameters, a scaling), they would not reach the
// averaged shards the update reads, and on NCCL would race with the collective.
void check_gradients_untouched(const detail::Reducer& r, const char* what) {
  if (r.finished_versions.size() != r.flats.size()) return;
  for (size_t f = 0; f < r.flats.size(); ++f)
    EMBER_CHECK(r.flats[f].version() == r.finished_versions[f], "ZeroRedundancyOptimizer::", what,
                ": the module's gradients were changed in place after backward (by "
                "nn::utils::clip_grad_norm_ over the module's parameters, or a scaling). "
                "Under ZeRO-1 .grad() holds this rank's own gradient and the update reads the "
                "averaged shards: clip with ZeroRedundancyOptimizer::clip_grad_norm_, and "
                "scale the loss rather than the gradients");
}

}  // namespace

struct ZeroRedundancyOptimizer::Impl {
  std::shared_ptr<detail::Reducer> reducer;
  std::vector<Tensor> param_flats;   // the parameters, laid out as reducer->flats
  std::vector<Tensor> shard_params;  // per bucket: this rank's block of its parameters
  std::unique_ptr<optim::Optimizer> inner;
  std::string kind;
  bool shards_waited = false;  // clip_grad_norm_ waited for every bucket's shard

  Communicator& comm() const { return *reducer->comm; }
  int64_t block(const detail::Bucket& b) const { return b.padded / comm().size(); }
  Tensor param_region(const detail::Bucket& b) const {
    return param_flats[b.flat].slice(0, b.flat_offset, b.flat_offset + b.padded);
  }
};

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(DistributedDataParallel& ddp,
                                                 const OptimizerFactory& make)
    : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(make != nullptr, "ZeroRedundancyOptimizer: the optimizer factory is empty");
  Impl& m = *impl_;
  m.reducer = ddp.state_;
  detail::Reducer& r = *m.reducer;
  EMBER_CHECK(!r.shard_mode,
              "ZeroRedundancyOptimizer: this DistributedDataParallel already has "
              "one (one ZeroRedundancyOptimizer per DistributedDataParallel)");
  EMBER_CHECK(!r.in_pass, "ZeroRedundancyOptimizer: constructed during a backward pass");
  for (size_t p = 0; p < r.params.size(); ++p) {
    const Tensor& t = r.params[p];
    EMBER_CHECK(t.dtype() == kFloat32 || t.dtype() == kFloat64,
                "ZeroRedundancyOptimizer: "
                "parameter '",
                r.names[p], "' is ", t.dtype(), "; the fused updates take float32 and float64");
    EMBER_CHECK(t.is_contiguous(), "ZeroRedundancyOptimizer: parameter '", r.names[p],
                "' is not contiguous");
  }
  r.wait_all();
  NoGradGuard no_grad;
  const int n = m.comm().size(), rank = m.comm().rank();
  for (const Tensor& f : r.flats) m.param_flats.push_back(zeros_like(f));
  // Every parameter becomes a view of the flat buffer (as Module::to moves one).
  for (size_t p = 0; p < r.params.size(); ++p) {
    const detail::Bucket& b = r.buckets[r.bucket_of[p]];
    const int64_t off = b.flat_offset + b.offsets[r.slot_of[p]];
    const Tensor& t = r.params[p];
    Tensor dst = m.param_flats[b.flat].slice(0, off, off + t.numel()).view(t.sizes());
    dst.copy_(t.detach());
    TensorImpl& impl = t.impl();
    impl.storage = dst.storage();
    impl.offset = dst.storage_offset();
  }
  for (detail::Bucket& b : r.buckets) {
    const int64_t blk = b.padded / n;
    b.shard = zeros({blk}, TensorOptions().dtype(b.dtype).device(m.comm().device()));
    m.shard_params.push_back(m.param_flats[b.flat].slice(0, b.flat_offset + rank * blk,
                                                         b.flat_offset + (rank + 1) * blk));
  }
  m.inner = make(m.shard_params);
  EMBER_CHECK(m.inner != nullptr, "ZeroRedundancyOptimizer: the optimizer factory returned null");
  EMBER_CHECK(
      m.inner->param_groups().size() == 1 && m.inner->num_parameters() == m.shard_params.size(),
      "ZeroRedundancyOptimizer: the factory must build one parameter group over the ",
      m.shard_params.size(), " shard tensors it is given; got ", m.inner->param_groups().size(),
      " group(s) of ", m.inner->num_parameters(), " parameter(s)");
  for (size_t i = 0; i < m.shard_params.size(); ++i)
    EMBER_CHECK(m.inner->param_groups()[0].params()[i].is_same(m.shard_params[i]),
                "ZeroRedundancyOptimizer: the factory must keep the shard tensors it is given, in "
                "order (parameter ",
                i, " differs)");
  m.kind = optimizer_kind(*m.inner);
  r.shard_mode = true;
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  if (!impl_ || !impl_->reducer) return;
  detail::Reducer& r = *impl_->reducer;
  try {
    r.wait_all();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember: ~ZeroRedundancyOptimizer: %s\n", e.what());
  }
  // DDP goes back to all-reduce; the parameters stay where they are (views).
  r.shard_mode = false;
  for (detail::Bucket& b : r.buckets) {
    b.shard = Tensor();
    b.fresh.clear();
  }
}

void ZeroRedundancyOptimizer::step() {
  Impl& m = *impl_;
  detail::Reducer& r = *m.reducer;
  EMBER_CHECK(!r.in_pass, "ZeroRedundancyOptimizer::step: called during backward");
  for (size_t p = 0; p < r.params.size(); ++p) {
    const detail::Bucket& b = r.buckets[r.bucket_of[p]];
    EMBER_CHECK(r.params[p].storage() == m.param_flats[b.flat].storage(),
                "ZeroRedundancyOptimizer::step: parameter '", r.names[p],
                "' no longer lives in "
                "the optimizer's flat buffer (moved with Module::to or replaced after the "
                "optimizer was built)");
  }
  for (size_t i = 0; i < r.buckets.size(); ++i)
    EMBER_CHECK(r.buckets[i].launched || m.shards_waited, "ZeroRedundancyOptimizer::step: bucket ",
                i,
                " has no reduced gradient; run a synchronised backward (not under no_sync) "
                "before each step()");
  check_gradients_untouched(r, "step");
  m.shards_waited = false;
  NoGradGuard no_grad;
  std::vector<std::shared_ptr<Work>> gathers;
  for (size_t i = 0; i < r.buckets.size(); ++i) {
    detail::Bucket& b = r.buckets[i];
    // The bucket's averaged block is here (the host waits under the deadline;
    // the compute stream is ordered after it); the later buckets' reduce-scatters
    // go on meanwhile.
    r.wait_bucket(b);
    b.fresh.clear();
    for (size_t j = 0; j < m.shard_params.size(); ++j)
      m.shard_params[j].set_grad(j == i ? b.shard : Tensor());
    m.inner->step();
    gathers.push_back(m.comm().all_gather_async(FlatBuffer::of(m.shard_params[i]),
                                                FlatBuffer::of(m.param_region(b)),
                                                "ZeRO bucket " + std::to_string(i)));
    gathers.back()->keep_alive(m.param_flats[b.flat]);
  }
  for (size_t j = 0; j < m.shard_params.size(); ++j) m.shard_params[j].set_grad(r.buckets[j].shard);
  // Everyone's updated parameters are in place before the next forward reads them.
  for (auto& w : gathers) w->wait();
}

Tensor ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type) {
  Impl& m = *impl_;
  detail::Reducer& r = *m.reducer;
  const char* who = "ZeroRedundancyOptimizer::clip_grad_norm_";
  EMBER_CHECK(!std::isnan(max_norm), who, ": max_norm is NaN");
  EMBER_CHECK(norm_type > 0 && !std::isnan(norm_type), who,
              ": norm_type must be > 0 (or inf), got ", norm_type);
  EMBER_CHECK(!r.in_pass, who, ": called during backward");
  for (size_t i = 0; i < r.buckets.size(); ++i)
    EMBER_CHECK(r.buckets[i].launched || m.shards_waited, who, ": bucket ", i,
                " has no reduced gradient; run a synchronised backward before clipping");
  check_gradients_untouched(r, "clip_grad_norm_");
  // Every shard first (the norm needs all of them); step() then finds them waited.
  for (detail::Bucket& b : r.buckets) r.wait_bucket(b);
  m.shards_waited = true;
  NoGradGuard no_grad;
  std::vector<Tensor> shards;
  for (const detail::Bucket& b : r.buckets) shards.push_back(b.shard);
  // This rank's norm, every rank's gathered (on the device: no host sync), combined.
  const Tensor local = reshape(multi_tensor_norm(shards, norm_type), {1});
  const Tensor all = m.comm().all_gather(local);
  const Tensor total =
      std::isinf(norm_type) ? max(all) : pow(sum(pow(all, norm_type)), 1.0 / norm_type);
  // clip_grad_norm_'s coefficient, min(max_norm / (total + 1e-6), 1), applied in place.
  const Tensor coef = clamp(div(full({}, max_norm, total.options()), add(total, 1e-6)),
                            -std::numeric_limits<double>::infinity(), 1.0);
  multi_tensor_mul_(shards, reshape(coef, {1}));
  return total;
}

void ZeroRedundancyOptimizer::zero_grad(bool set_to_none) {
  detail::Reducer& r = *impl_->reducer;
  impl_->shards_waited = false;
  NoGradGuard no_grad;
  for (size_t p = 0; p < r.params.size(); ++p) {
    if (set_to_none) {
      r.params[p].set_grad(Tensor());
    } else {
      if (!r.grad_is_slot(static_cast<int64_t>(p)))
        r.params[p].set_grad(r.slot(static_cast<int64_t>(p)));
      r.slot(static_cast<int64_t>(p)).zero_();
    }
  }
}

optim::Optimizer& ZeroRedundancyOptimizer::shard_optimizer() {
  return *impl_->inner;
}

int64_t ZeroRedundancyOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const Tensor& p : impl_->shard_params) {
    const optim::ParamState* s = impl_->inner->state(p);
    if (!s) continue;
    for (const auto& [name, t] : s->buffers) bytes += static_cast<int64_t>(t.nbytes());
  }
  return bytes;
}

int64_t ZeroRedundancyOptimizer::shard_numel() const {
  int64_t n = 0;
  for (const Tensor& p : impl_->shard_params) n += p.numel();
  return n;
}

int64_t ZeroRedundancyOptimizer::total_numel() const {
  int64_t n = 0;
  for (const Tensor& p : impl_->reducer->params) n += p.numel();
  return n;
}

void ZeroRedundancyOptimizer::save(const std::string& dir) const {
  const Impl& m = *impl_;
  const detail::Reducer& r = *m.reducer;
  const int n = m.comm().size(), rank = m.comm().rank();
  NoGradGuard no_grad;
  StateDict sd;
  sd.insert("zero.world_size", scalar_i64(n));
  sd.insert("zero.rank", scalar_i64(rank));
  sd.insert("zero.optimizer." + m.kind, scalar_i64(1));
  for (size_t p = 0; p < r.params.size(); ++p) {
    const detail::Bucket& b = r.buckets[r.bucket_of[p]];
    std::vector<int64_t> v{r.bucket_of[p], b.offsets[r.slot_of[p]],
                           dtype_code(r.params[p].dtype())};
    for (int64_t d : r.params[p].sizes()) v.push_back(d);
    sd.insert("layout." + r.names[p], vector_i64(v));
  }
  for (size_t i = 0; i < r.buckets.size(); ++i)
    sd.insert("bucket." + std::to_string(i), vector_i64({r.buckets[i].elems, r.buckets[i].padded}));
  const std::string group = "param_groups.0.";
  for (const auto& [key, t] : m.inner->state_dict()) {
    if (key.rfind(group, 0) == 0) {
      if (key != group + "params") sd.insert("options." + key.substr(group.size()), t.cpu());
    } else {
      sd.insert(key, t.cpu());  // state.<bucket>.<buffer or step>: this rank's blocks
    }
  }
  std::filesystem::create_directories(dir);
  nn::save_state_dict(sd, shard_file(dir, rank, n));
  m.comm().barrier();  // every file is complete before anyone reads them
}

void ZeroRedundancyOptimizer::load(const std::string& dir) {
  Impl& m = *impl_;
  detail::Reducer& r = *m.reducer;
  const int n = m.comm().size(), rank = m.comm().rank();
  const char* who = "ZeroRedundancyOptimizer::load";
  namespace fs = std::filesystem;
  EMBER_CHECK(fs::is_directory(dir), who, ": ", dir, " is not a directory");
  // Which world size wrote it: every file must say the same.
  std::set<int> worlds;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const int w = shard_file_world(entry.path().filename().string());
    if (w > 0) worlds.insert(w);
  }
  EMBER_CHECK(!worlds.empty(), who, ": no zero_rank<r>_of<N>.ckpt file in ", dir);
  EMBER_CHECK(worlds.size() == 1, who, ": ", dir, " mixes checkpoints written by ", *worlds.begin(),
              " and ", *worlds.rbegin(), " ranks");
  const int old_n = *worlds.begin();
  std::vector<StateDict> files;
  for (int k = 0; k < old_n; ++k) {
    const std::string path = shard_file(dir, k, old_n);
    EMBER_CHECK(fs::exists(path), who, ": ", path, " (rank ", k, " of ", old_n,
                ") is missing from the checkpoint");
    files.push_back(nn::load_state_dict_file(path));
  }
  const StateDict& f0 = files.front();

  // The optimizer kind.
  std::string saved_kind = "unknown";
  for (const auto& [key, t] : f0)
    if (key.rfind("zero.optimizer.", 0) == 0) saved_kind = key.substr(15);
  EMBER_CHECK(saved_kind == m.kind, who, ": ", dir, " holds the state of ", saved_kind,
              ", but this ZeroRedundancyOptimizer wraps ", m.kind);

  // The model: every parameter at the same place with the same shape and dtype.
  std::ostringstream problems;
  int count = 0;
  auto problem = [&](const auto&... parts) {
    ++count;
    problems << "\n  ";
    (problems << ... << parts);
  };
  std::set<std::string> ours;
  for (size_t p = 0; p < r.params.size(); ++p) {
    ours.insert(r.names[p]);
    const Tensor* t = f0.find("layout." + r.names[p]);
    if (!t) {
      problem("parameter '", r.names[p], "' is not in the checkpoint");
      continue;
    }
    const std::vector<int64_t> v = to_i64(*t);
    std::vector<int64_t> dims(r.params[p].sizes().begin(), r.params[p].sizes().end());
    const detail::Bucket& b = r.buckets[r.bucket_of[p]];
    if (v.size() < 3) {
      problem("parameter '", r.names[p], "': malformed layout entry");
    } else if (std::vector<int64_t>(v.begin() + 3, v.end()) != dims ||
               v[2] != dtype_code(r.params[p].dtype())) {
      problem("parameter '", r.names[p], "': the checkpoint has shape ",
              shape_of(std::vector<int64_t>(v.begin() + 3, v.end())), " ", static_cast<DType>(v[2]),
              ", the model ", shape_of(dims), " ", r.params[p].dtype());
    } else if (v[0] != r.bucket_of[p] || v[1] != b.offsets[r.slot_of[p]]) {
      problem("parameter '", r.names[p], "' sits in bucket ", v[0], " at element ", v[1],
              " in the checkpoint, in bucket ", r.bucket_of[p], " at ", b.offsets[r.slot_of[p]],
              " here (other bucket sizes?)");
    }
  }
  for (const auto& [key, t] : f0)
    if (key.rfind("layout.", 0) == 0 && !ours.count(key.substr(7)))
      problem("the checkpoint has a parameter '", key.substr(7), "' this model lacks");
  std::vector<int64_t> old_padded(r.buckets.size(), 0);
  for (size_t i = 0; i < r.buckets.size(); ++i) {
    const Tensor* t = f0.find("bucket." + std::to_string(i));
    if (!t || t->numel() != 2) {
      problem("bucket ", i, " is not in the checkpoint");
      continue;
    }
    const std::vector<int64_t> v = to_i64(*t);
    if (v[0] != r.buckets[i].elems)
      problem("bucket ", i, " holds ", v[0], " elements in the checkpoint, ", r.buckets[i].elems,
              " here");
    old_padded[i] = v[1];
  }
  if (f0.contains("bucket." + std::to_string(r.buckets.size())))
    problem("the checkpoint has more than the ", r.buckets.size(), " buckets of this model");
  EMBER_CHECK(count == 0, who, ": ", dir, " does not match this model (", count, " problem",
              count == 1 ? "" : "s", "; nothing was changed):", problems.str());

  // This rank's blocks for today's world size, in the wrapped optimizer's format.
  NoGradGuard no_grad;
  StateDict sd;
  for (const auto& [field, value] : m.inner->param_groups()[0].options().fields()) {
    const Tensor* t = f0.find("options." + field);
    EMBER_CHECK(t != nullptr, who, ": ", dir, " lacks the option '", field, "' of ", m.kind);
    sd.insert("param_groups.0." + field, *t);
  }
  std::vector<int64_t> ids;
  for (size_t i = 0; i < r.buckets.size(); ++i) ids.push_back(static_cast<int64_t>(i));
  sd.insert("param_groups.0.params", vector_i64(ids));
  for (size_t i = 0; i < r.buckets.size(); ++i) {
    const detail::Bucket& b = r.buckets[i];
    const std::string prefix = "state." + std::to_string(i) + ".";
    const int64_t old_block = old_padded[i] / old_n, blk = b.padded / n;
    for (const auto& [key, t] : f0) {
      if (key.rfind(prefix, 0) != 0) continue;
      if (key == prefix + "step") {
        sd.insert(key, t);
        continue;
      }
      // The whole bucket's buffer from every old rank's block, then this rank's.
      std::vector<Tensor> parts;
      for (int k = 0; k < old_n; ++k) {
        const Tensor* part = files[k].find(key);
        EMBER_CHECK(part != nullptr && part->numel() == old_block, who, ": ",
                    shard_file(dir, k, old_n), " lacks '", key, "' (or it is not ", old_block,
                    " elements)");
        parts.push_back(part->reshape({-1}));
      }
      Tensor whole = zeros({std::max(b.padded, old_padded[i])}, TensorOptions(t.dtype()));
      whole.slice(0, 0, b.elems).copy_(cat(parts, 0).slice(0, 0, b.elems));
      sd.insert(key, whole.slice(0, rank * blk, (rank + 1) * blk).contiguous());
    }
  }
  try {
    m.inner->check_state_dict(sd);
  } catch (const Error& e) {
    EMBER_FAIL(who, ": ", dir, " does not match this ", m.kind, ": ", e.what());
  }
  m.inner->load_state_dict(sd);
}

}  // namespace ember::parallel
