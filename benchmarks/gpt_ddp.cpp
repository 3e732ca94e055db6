// bench_gpt_ddp: bench_gpt's training step (examples/gpt_model.h: bf16 autocast on CUDA,
// clipping at 1.0, AdamW) data-parallel, one process per GPU (issue 32):
//
//   ember-run --nproc N bench_gpt_ddp [--mode ddp|zero] [--reduce f32|bf16]
//                                     [--only char|gpt2|tiny] [--json FILE] [--quick]
//   mpirun -np N bench_gpt_ddp ...      (also CPU ranks on the MPI backend: --only tiny)
//
// --mode ddp: DistributedDataParallel and AdamW on every rank; zero: the same DDP with
// ZeroRedundancyOptimizer (ZeRO-1: each rank keeps and updates its block of AdamW's
// state). --reduce bf16 sends the gradients as bfloat16 (DdpOptions::reduce_dtype).
// Each rank trains on its own batch of the workload's size (bench_gpt's: 64 x 256
// tokens for char, 16 x 1024 for GPT-2 124M), so N ranks step through N times the
// tokens: tokens/s per GPU against the same binary at --nproc 1 is the scaling
// efficiency. AdamW here is one group, weight decay 0.1 on every parameter (ZeRO's
// shards are flat, so bench_gpt's decay groups do not carry over; the peer,
// benchmarks/peer_gpt_ddp.py, does the same).
//
// Checked before timing, on every rank: (1) with the same batch on every rank, one
// step of the data-parallel model equals one step of a plain local copy of it (the
// average of equal gradients is that gradient: a sum left undivided, a wrong scale or
// a wrong ZeRO shard shows), to 1e-5 (bf16 reduce: 2e-2) relative over the parameters;
// (2) five steps on each rank's own batch leave the parameters equal on every rank bit
// for bit (a float64 checksum gathered from all: a missing or partial all-reduce lets
// the ranks drift apart) and lower the loss.
// A failed check prints no row and exits 1.
//
// Rank 0 prints, per workload: the step's wall time (each round's slowest rank, the
// median over rounds), tokens/s per GPU, and every rank's peak allocated memory.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../examples/gpt_model.h"
#include "benchmarks/check.h"
#include "core/memory.h"
#include "cuda/blas.h"
#include "ember.h"
#include "parallel/distributed.h"
#include "parallel/process_group.h"
#include "parallel/zero.h"
#include "timing.h"

using namespace ember;
using namespace ember::parallel;

namespace {

struct Workload {
  std::string name, shape;
  gpt::GPTConfig cfg;
  int64_t batch;  // per rank
};

Workload make_workload(const std::string& which) {
  if (which == "gpt2") return {"gpt2-124M step", "12x768 T1024 b16/rank", gpt::gpt2_124m(), 16};
  Workload w{"gpt char step", "6x384 T256 b64/rank", {}, 64};  // the default config's shape
  if (which == "tiny") {                                       // CPU ranks in seconds
    w = {"gpt tiny step", "2x32 T16 b4/rank", {}, 4};
    w.cfg.block_size = 16;
    w.cfg.n_layer = 2;
    w.cfg.n_head = 2;
    w.cfg.n_embd = 32;
  }
  w.cfg.dropout = 0.0;
  return w;
}

struct Options {
  bool zero = false;
  DType reduce = kFloat32;
  bool quick = false;
  std::string only, json;
};

optim::AdamWOptions adamw_options() {
  return optim::AdamWOptions(1e-3).betas({0.9, 0.99}).weight_decay(0.1);
}

// The model on `device` with AdamW, data-parallel over `pg` (DDP, or ZeRO-1 with
// o.zero) or, with no process group, plain: the local reference.
struct Replica {
  std::shared_ptr<gpt::GPT> model;
  std::unique_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
  bool bf16;

  Replica(const Workload& w, Device device, const Options& o, const ProcessGroup* pg) {
    manual_seed(1337);
    model = std::make_shared<gpt::GPT>(w.cfg);
    model->to(device);
    bf16 = device.is_cuda();
    if (pg != nullptr)
      ddp = std::make_unique<DistributedDataParallel>(model, pg->communicator,
                                                      DdpOptions().reduce_dtype(o.reduce));
    if (ddp && o.zero)
      zero = std::make_unique<ZeroRedundancyOptimizer>(*ddp, [](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(std::move(p), adamw_options());
      });
    else
      opt = std::make_unique<optim::AdamW>(model->parameters(), adamw_options());
  }
  Tensor step(const Tensor& x, const Tensor& y) {
    if (zero)
      zero->zero_grad();
    else
      opt->zero_grad();
    Tensor l;
    {
      AutocastGuard autocast(kBFloat16, bf16);
      l = model->loss(x, y);
    }
    l.backward();
    if (zero) {
      // Under ZeRO-1 .grad() is this rank's own gradient: the averaged one is clipped
      // where it lives, in the shards.
      zero->clip_grad_norm_(1.0);
      zero->step();
    } else {
      nn::utils::clip_grad_norm_tensor_(model->parameters(), 1.0);
      opt->step();
    }
    return l.detach();
  }
};

std::pair<Tensor, Tensor> tokens(const Workload& w, uint64_t seed, Device device) {
  Generator g(seed);
  Tensor x = randint(0, w.cfg.vocab_size, {w.batch, w.cfg.block_size}, TensorOptions(kInt64), &g);
  Tensor y = randint(0, w.cfg.vocab_size, {w.batch, w.cfg.block_size}, TensorOptions(kInt64), &g);
  return {x.to(device), y.to(device)};
}

// Every parameter of m, in float64, one after another.
Tensor flat64(const nn::Module& m) {
  NoGradGuard no_grad;
  std::vector<Tensor> parts;
  for (const Tensor& p : m.parameters()) parts.push_back(reshape(p.to(kFloat64), {-1}));
  return cat(parts, 0);
}

// This rank's value, gathered from every rank (rank order), as doubles.
std::vector<double> gather(Communicator& comm, double v) {
  Tensor t = full({1}, v, TensorOptions(kFloat64).device(comm.device()));
  return comm.all_gather(t).to(kCPU).to_vector<double>();
}

void sync(Device d) {
  if (d.is_cuda()) cuda::synchronize(d.index);
}

bool report(const ProcessGroup& pg, const char* what, bool ok, const std::string& detail) {
  // Every rank's verdict: one failing rank fails all.
  const std::vector<double> all = gather(*pg.communicator, ok ? 1.0 : 0.0);
  bool every = true;
  for (double v : all) every = every && v == 1.0;
  if (pg.rank == 0)
    std::printf("validate %-40s %s%s\n", what, detail.c_str(), every ? "" : "  FAILED");
  return every;
}

bool validate(const Workload& w, const ProcessGroup& pg, const Options& o) {
  // (1) The same batch everywhere: one data-parallel step equals one local step.
  {
    Replica dp(w, pg.device, o, &pg), local(w, pg.device, o, nullptr);
    auto [x, y] = tokens(w, 11, pg.device);
    dp.step(x, y);
    local.step(x, y);
    const double err = bench::rel_err_on_device(flat64(*dp.model), flat64(*local.model));
    const double tol = o.reduce == kBFloat16 ? 2e-2 : 1e-5;
    char detail[96];
    std::snprintf(detail, sizeof detail, "rel err %.2e (tolerance %.0e)", err, tol);
    if (!report(pg, "one step, same batch: data-parallel = local", err <= tol, detail))
      return false;
  }
  // (2) Each rank its own batch: the ranks stay equal and the loss falls.
  Replica dp(w, pg.device, o, &pg);
  auto [x, y] = tokens(w, 100 + static_cast<uint64_t>(pg.rank), pg.device);
  double first = 0, last = 0;
  for (int i = 0; i < 5; ++i) {
    const double l = dp.step(x, y).item();
    if (i == 0) first = l;
    last = l;
  }
  const Tensor params = flat64(*dp.model);
  const double checksum = sum(mul(params, params)).item();
  const std::vector<double> sums = gather(*pg.communicator, checksum);
  bool equal = true;
  for (double s : sums) equal = equal && s == sums[0];
  char detail[128];
  std::snprintf(detail, sizeof detail, "checksums %s over %d rank(s); rank 0 loss %.4f -> %.4f",
                equal ? "equal" : "DIFFER", pg.world_size, first, last);
  return report(pg, "five steps, own batches: ranks equal",
                equal && std::isfinite(last) && last < first, detail);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--mode" && has_value) {
      const std::string m = argv[++i];
      if (m != "ddp" && m != "zero") {
        std::fprintf(stderr, "bench_gpt_ddp: --mode takes ddp or zero, got %s\n", m.c_str());
        return 2;
      }
      o.zero = m == "zero";
    } else if (a == "--reduce" && has_value) {
      const std::string r = argv[++i];
      if (r != "f32" && r != "bf16") {
        std::fprintf(stderr, "bench_gpt_ddp: --reduce takes f32 or bf16, got %s\n", r.c_str());
        return 2;
      }
      o.reduce = r == "bf16" ? kBFloat16 : kFloat32;
    } else if (a == "--only" && has_value) {
      o.only = argv[++i];
      if (o.only != "char" && o.only != "gpt2" && o.only != "tiny") {
        std::fprintf(stderr, "bench_gpt_ddp: --only takes char, gpt2 or tiny, got %s\n",
                     o.only.c_str());
        return 2;
      }
    } else if (a == "--json" && has_value) {
      o.json = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: bench_gpt_ddp [--mode ddp|zero] [--reduce f32|bf16] "
                   "[--only char|gpt2|tiny] [--json FILE] [--quick]\n");
      return 2;
    }
  }
  ProcessGroup pg = init_process_group();
  std::vector<std::string> names;
  if (!o.only.empty())
    names.push_back(o.only);
  else if (pg.device.is_cuda())
    names = {"char", "gpt2"};
  else
    names = {"tiny"};
  const std::string impl = std::string("ember ") + (o.zero ? "zero1" : "ddp") + " x" +
                           std::to_string(pg.world_size) +
                           (o.reduce == kBFloat16 ? " bf16-reduce" : "");
  if (pg.rank == 0)
    std::printf("bench_gpt_ddp: %d rank(s), %s backend, %s; %s\n", pg.world_size,
                pg.communicator->backend(), pg.device.str().c_str(), impl.c_str());
  if (pg.device.is_cuda()) cuda::set_allow_tf32(true);
  bench::Table* table = nullptr;
  std::unique_ptr<bench::Table> owned;
  if (pg.rank == 0) {
    owned = std::make_unique<bench::Table>(
        "gpt_ddp: one data-parallel training step per rank (wall time, slowest rank)");
    table = owned.get();
  }
  int failures = 0;
  for (const std::string& name : names) {
    const Workload w = make_workload(name);
    if (!validate(w, pg, o)) {
      ++failures;
      continue;
    }
    if (pg.device.is_cuda()) empty_cache(pg.device);
    Replica dp(w, pg.device, o, &pg);
    auto [x, y] = tokens(w, 100 + static_cast<uint64_t>(pg.rank), pg.device);
    const int warmup = 3, rounds = o.quick ? 3 : 5;
    const int steps = o.quick ? 3 : (name == "gpt2" ? 10 : 20);
    for (int i = 0; i < warmup; ++i) dp.step(x, y);
    sync(pg.device);
    if (pg.device.is_cuda()) reset_peak_memory_stats(pg.device);
    std::vector<double> per;
    for (int r = 0; r < rounds; ++r) {
      pg.communicator->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) dp.step(x, y);
      sync(pg.device);
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
          steps;
      const std::vector<double> all = gather(*pg.communicator, ms);
      per.push_back(*std::max_element(all.begin(), all.end()));
    }
    const double peak = pg.device.is_cuda() ? static_cast<double>(max_memory_allocated(pg.device))
                                            : static_cast<double>(memory_allocated(pg.device));
    const std::vector<double> peaks = gather(*pg.communicator, peak);
    const bench::Spread s = bench::spread_of(per);
    if (table != nullptr) {
      const double tok_s = static_cast<double>(w.batch * w.cfg.block_size) / (s.median / 1e3);
      std::string note = "peak MiB per rank:";
      for (double p : peaks) {
        char mib[32];
        std::snprintf(mib, sizeof mib, " %.1f", p / (1 << 20));
        note += mib;
      }
      table->add({w.name, pg.device.is_cuda() ? "bf16" : "f32", w.shape, impl, s.median,
                  tok_s / 1e3, "ktok/s/GPU", note, s.min, s.max});
    }
  }
  if (table != nullptr && !o.json.empty()) table->write_json(o.json.c_str());
  return failures ? 1 : 0;
}
