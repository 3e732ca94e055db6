// The GPT training step (examples/gpt_model.h): bf16 autocast, clipping at 1.0
// without a host sync, ember's fused AdamW, for nanoGPT's shakespeare_char shape
// and GPT-2 124M's (12 layers, 12 heads, 768 dims, T 1024, batch 16, vocab
// 50304, tied head). Validated first (per shape: the fp32 first loss near
// ln(vocab), as an N(0, 0.02) start gives; bf16 autocast's first loss within 1%
// of fp32's from the same weights and batch; five bf16 steps on one batch lower
// the loss, all finite), then timed by wall clock: ms per step, tokens/s, model
// TFLOP/s (6 N + 12 L H D T per token, nanoGPT's estimate) and the peak allocated
// memory, with predict_memory's peak for the same step beside it; then the same step
// captured in a cuda::Graph ("... graphed" rows), checked bit for bit against an eager
// twin drawing the same dropout masks, timed by replays.
// benchmarks/peer_gpt.py runs the same steps in PyTorch (eager, torch.compile).
// The variants are the switches read at start-up: EMBER_GEMM, EMBER_ATTENTION,
// EMBER_ATTENTION_DROPOUT, EMBER_ATTENTION_MASK and EMBER_LINEAR_CROSS_ENTROPY (the
// head and loss in chunks of rows, or composed; docs/transformers.md).
//
//   bench_gpt [--only char|gpt2] [--json FILE] [--quick] [--eager]
//   bench_gpt --parity FILE [--device cpu|cuda] [--steps 20] [--batch B] [--block T]
//   bench_gpt --sdpa FILE [--device cpu|cuda]
//   bench_gpt --memory [--only char|gpt2]
//   bench_gpt --profile [--only char|gpt2] [--device cpu|cuda] [--steps 3] [--trace DIR]
//
// --parity: the char model (fp32, dropout 0, TF32 off) trained --steps steps on
// random token ids with AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on 2-D
// parameters) and clipping at 1.0; writes the initial weights, the batches and
// ember's loss per step to FILE (ember's checkpoint format) for
// `peer_gpt.py --parity FILE`, which repeats the run in PyTorch and compares.
// --sdpa: scaled_dot_product_attention cases (masks bool, additive and causal,
// broadcast batch dims, L != S), ember's outputs and gradients, for
// `peer_gpt.py --sdpa FILE` to compare with PyTorch's math backend.
// --quick: 3 rounds of 3 steps instead of 5 of 10-20; --eager: no graphed rows (half
// the process's time, for A/B runs of an eager-path change).
// --memory: predict_memory's peak allocated and reserved bytes for each shape's
// step (3 steps) against measure_memory's on the GPU; exits 1 unless equal.
// --profile: the same bf16 step (fp32 on the CPU) after 3 warm-up steps, --steps
// steps under profiler::Profile, each a "step" span: the key_averages table sorted
// by device time (CUDA events), and with --trace the Chrome trace of each shape
// (DIR/gpt_<shape>.json, the allocator's history on the same axis). Where the
// time of a GPT step goes: issue 28's first question.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../examples/gpt_model.h"
#include "check.h"
#include "core/meta.h"
#include "core/predict.h"
#include "core/profiler.h"
#include "cuda/blas.h"
#include "cuda/graph.h"
#include "ember.h"
#include "timing.h"

using namespace ember;
using gpt::GPT;
using gpt::GPTConfig;

namespace {

struct Workload {
  std::string name, shape;
  GPTConfig cfg;
  int64_t batch;
};

Workload char_workload() {
  Workload w{"gpt char step", "6x384 T256 b64", {}, 64};
  w.cfg.vocab_size = 65;  // shakespeare_char's vocabulary
  return w;
}

Workload gpt2_workload() {
  return {"gpt2-124M step", "12x768 T1024 b16", gpt::gpt2_124m(), 16};
}

// One model, its optimizer and a fixed batch on `device` (examples/gpt_model.h).
struct Trainer : gpt::TrainStep {
  Trainer(const Workload& w, Device device, bool bf16_autocast, uint64_t seed = 1337)
      : gpt::TrainStep(w.cfg, w.batch, device, bf16_autocast, seed) {}
};

// Wall milliseconds per step() (an eager step or a graph's replay): the median round
// of `rounds` x `steps` after `warmup` steps, one sync each.
template <typename F>
bench::Spread wall_ms(F&& step, int warmup, int rounds, int steps) {
  for (int i = 0; i < warmup; ++i) step();
  cuda::synchronize(0);
  std::vector<double> per;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    cuda::synchronize(0);
    per.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        steps);
  }
  return bench::spread_of(per);
}

bool validate(const Workload& w) {
  Trainer f32(w, kCUDA, false), b16(w, kCUDA, true);
  const double l32 = f32.loss().item(), l16 = b16.loss().item();
  const double ln_v = std::log(static_cast<double>(w.cfg.vocab_size));
  std::vector<double> losses;
  for (int i = 0; i < 5; ++i) losses.push_back(b16.step().item());
  bool finite = true;
  for (double l : losses) finite = finite && std::isfinite(l);
  const bool ok = std::abs(l32 - ln_v) < 0.3 && std::abs(l16 - l32) <= 1e-2 * l32 && finite &&
                  losses.back() < losses.front();
  std::printf(
      "validate %s: fp32 first loss %.5f (ln vocab %.5f), bf16 %.5f (rel. diff %.1e); bf16 "
      "steps on one batch %.4f -> %.4f%s\n",
      w.name.c_str(), l32, ln_v, l16, std::abs(l16 - l32) / l32, losses.front(), losses.back(),
      ok ? "" : "  FAILED");
  return ok;
}

// The step captured in a cuda::Graph and replayed (dropout draws fresh counters at
// each replay), checked first against an eager twin with the same weights and batch,
// the default generator rewound before each eager step so both draw the same masks:
// the losses of 3 replays and then every parameter, bit for bit. Returns false when a
// check fails; no row when the step cannot be captured (the reason is printed).
bool graphed_row(const Workload& w, int rounds, int steps, bench::Table& table) {
  Trainer eager(w, kCUDA, true), graphed(w, kCUDA, true);
  Generator& gen = default_generator();
  auto twin_steps = [&](const std::function<void()>& graphed_step) {
    const uint64_t o = gen.offset();
    graphed_step();
    gen.set_offset(o);
    return eager.step();
  };
  // Warm-up: the optimizer state, handles and kernels exist before the capture.
  for (int i = 0; i < 3; ++i) twin_steps([&] { graphed.step(); });
  cuda::Graph graph;
  Tensor static_loss;
  std::string why;
  try {
    graph.capture([&] { static_loss = graphed.step(); });
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (!graph.captured()) {
    std::printf("%s graphed: the step could not be captured: %s\n", w.name.c_str(), why.c_str());
    return true;
  }
  double loss_err = 0, param_err = 0;
  for (int i = 0; i < 3; ++i) {
    const double le = twin_steps([&] { graph.replay(); }).item(), lg = static_loss.item();
    loss_err = std::max(loss_err, std::fabs(lg - le) / std::max(std::fabs(le), 1e-12));
  }
  const std::vector<Tensor> pe = eager.model->parameters(), pg = graphed.model->parameters();
  for (size_t i = 0; i < pe.size(); ++i)
    param_err = std::max(param_err, bench::rel_err_on_device(pg[i], pe[i]));
  std::printf("validate %s graphed: loss vs eager rel err %.2e, params %.2e (tolerance 0)\n",
              w.name.c_str(), loss_err, param_err);
  if (loss_err != 0 || param_err != 0) {
    std::printf("VALIDATION FAILED\n");
    return false;
  }
  const bench::Spread ms = wall_ms([&] { graph.replay(); }, 0, rounds, steps);
  const double tok_s = static_cast<double>(w.batch * w.cfg.block_size) / (ms.median / 1e3);
  table.add({w.name + " graphed", "bf16", w.shape, "ember", ms.median, tok_s / 1e3, "ktok/s",
             "cuda::Graph replays", ms.min, ms.max});
  return true;
}

void predicted_vs_measured(const Workload& w, int64_t measured_alloc, int64_t measured_reserved) {
  StepFactory factory = [&w](Device d) {
    auto t = std::make_shared<Trainer>(w, d, true);
    return StepFunction([t](int) { t->step(); });
  };
  const MemoryPrediction p = predict_memory(factory, PredictOptions().steps(3));
  std::printf(
      "memory %s: predict_memory peak allocated %lld B, reserved %lld B; measured peak "
      "allocated %lld B, reserved %lld B (over the timed steps, after a reset)\n",
      w.name.c_str(), static_cast<long long>(p.peak_allocated),
      static_cast<long long>(p.peak_reserved), static_cast<long long>(measured_alloc),
      static_cast<long long>(measured_reserved));
}

int parity(int argc, char** argv) {
  std::string path, device_name = "cpu";
  int64_t steps = 20, batch = 8, block = 64;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--parity") path = argv[i + 1];
    if (a == "--device") device_name = argv[i + 1];
    if (a == "--steps") steps = std::atoll(argv[i + 1]);
    if (a == "--batch") batch = std::atoll(argv[i + 1]);
    if (a == "--block") block = std::atoll(argv[i + 1]);
  }
  const Device device(device_name);
  Workload w = char_workload();
  w.cfg.dropout = 0.0;
  w.cfg.block_size = block;
  w.batch = batch;
  manual_seed(1337);
  GPT model(w.cfg);
  StateDict out;
  for (const auto& item : model.state_dict()) out.insert(item.first, item.second.clone());
  model.to(device);
  optim::AdamWOptions o = optim::AdamWOptions(1e-3).betas({0.9, 0.99});
  optim::AdamW opt(model.param_groups(o.weight_decay(0.1)), o);
  Generator g(11);
  Tensor xs = randint(0, w.cfg.vocab_size, {steps, batch, block}, TensorOptions(kInt64), &g);
  Tensor ys = randint(0, w.cfg.vocab_size, {steps, batch, block}, TensorOptions(kInt64), &g);
  std::vector<double> losses;
  for (int64_t s = 0; s < steps; ++s) {
    opt.zero_grad();
    Tensor loss = model.loss(select(xs, 0, s).to(device), select(ys, 0, s).to(device));
    loss.backward();
    nn::utils::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    losses.push_back(loss.item());
    std::printf("step %2lld loss %.7f\n", static_cast<long long>(s), losses.back());
  }
  out.insert("data.x", xs);
  out.insert("data.y", ys);
  out.insert("data.loss", from_vector(losses, {steps}, kFloat64));
  nn::save_state_dict(out, path);
  std::printf(
      "parity: %lld steps of the char model (batch %lld, block %lld, fp32) on %s; "
      "weights, batches and losses in %s\n",
      static_cast<long long>(steps), static_cast<long long>(batch), static_cast<long long>(block),
      device.str().c_str(), path.c_str());
  return 0;
}

// scaled_dot_product_attention cases for peer_gpt.py --sdpa: inputs, masks, the
// output and the gradients of sum(out * w) of each, float32 on `device`.
int sdpa_cases(int argc, char** argv) {
  std::string path, device_name = "cpu";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--sdpa") == 0) path = argv[i + 1];
    if (std::strcmp(argv[i], "--device") == 0) device_name = argv[i + 1];
  }
  const Device device(device_name);
  struct Case {
    const char* name;
    Shape q, k, v, mask;
    int mask_kind;  // 0 none, 1 bool, 2 additive, 3 causal
    double dropout_p = 0.0;
  };
  const std::vector<Case> cases = {
      {"plain", {2, 3, 17, 16}, {2, 3, 23, 16}, {2, 3, 23, 8}, {}, 0},
      {"causal", {2, 4, 33, 32}, {2, 4, 33, 32}, {2, 4, 33, 32}, {}, 3},
      {"causal_l_lt_s", {1, 2, 9, 8}, {1, 2, 14, 8}, {1, 2, 14, 8}, {}, 3},
      {"bool_broadcast", {2, 3, 12, 16}, {1, 3, 20, 16}, {1, 3, 20, 4}, {12, 20}, 1},
      {"additive", {2, 2, 10, 8}, {2, 2, 10, 8}, {2, 2, 10, 8}, {2, 1, 10, 10}, 2},
      // Dropout: the peer applies ember's keep-mask (".keep", drawn as the composed
      // path draws it: u = rand((..., L, S)) from the call's generator, keep u >= p)
      // through PyTorch's math backend's dropout_mask, so both sides drop the same
      // weights.
      {"dropout", {2, 3, 16, 8}, {2, 3, 20, 8}, {2, 3, 20, 8}, {}, 0, 0.3},
      {"dropout_causal", {1, 2, 24, 16}, {1, 2, 24, 16}, {1, 2, 24, 16}, {}, 3, 0.5},
      {"dropout_additive", {2, 2, 10, 8}, {2, 2, 12, 8}, {2, 2, 12, 8}, {2, 1, 10, 12}, 2, 0.2},
  };
  StateDict out;
  Generator g(21);
  for (const Case& c : cases) {
    const std::string n = c.name;
    Tensor q = randn(c.q, TensorOptions(kFloat32), &g), k = randn(c.k, TensorOptions(kFloat32), &g),
           v = randn(c.v, TensorOptions(kFloat32), &g);
    Tensor mask;
    if (c.mask_kind == 1) mask = rand(c.mask, TensorOptions(kFloat32), &g).gt(0.25);
    if (c.mask_kind == 2) mask = randn(c.mask, TensorOptions(kFloat32), &g);
    Tensor qd = q.to(device).set_requires_grad(true), kd = k.to(device).set_requires_grad(true),
           vd = v.to(device).set_requires_grad(true);
    Generator drop(1000 + static_cast<uint64_t>(out.size()));
    Tensor o = scaled_dot_product_attention(qd, kd, vd, mask.defined() ? mask.to(device) : mask,
                                            c.dropout_p, c.mask_kind == 3, std::nullopt, &drop);
    if (c.dropout_p > 0.0) {
      // The composed path's draw, repeated from a generator in the same state.
      Generator again(1000 + static_cast<uint64_t>(out.size()));
      const Tensor u = rand({c.q[0], c.q[1], c.q[2], c.k[2]},
                            TensorOptions().dtype(kFloat32).device(device), &again);
      out.insert(n + ".keep", cast(ge(u, c.dropout_p), kInt64).to(kCPU));
      out.insert(n + ".dropout_p", full({}, c.dropout_p, kFloat64));
    }
    Tensor w = randn(o.sizes(), TensorOptions(kFloat32), &g);
    sum(o * w.to(device)).backward();
    out.insert(n + ".q", q);
    out.insert(n + ".k", k);
    out.insert(n + ".v", v);
    out.insert(n + ".w", w);
    out.insert(n + ".causal", full({}, c.mask_kind == 3 ? 1.0 : 0.0, kInt64));
    if (mask.defined()) out.insert(n + ".mask", mask.dtype() == kBool ? cast(mask, kInt64) : mask);
    if (c.mask_kind == 1) out.insert(n + ".mask_is_bool", full({}, 1.0, kInt64));
    out.insert(n + ".out", o.detach().to(kCPU));
    out.insert(n + ".dq", qd.grad().to(kCPU));
    out.insert(n + ".dk", kd.grad().to(kCPU));
    out.insert(n + ".dv", vd.grad().to(kCPU));
  }
  nn::save_state_dict(out, path);
  std::printf("sdpa: %zu cases (float32, %s) in %s\n", cases.size(), device.str().c_str(),
              path.c_str());
  return 0;
}

// predict_memory against measure_memory (the same step on the GPU, its allocator
// fresh) for each shape's bf16 step: peak allocated and reserved bytes.
int memory_check(const std::string& only) {
  if (!bench::have_gpu("bench_gpt --memory")) return 0;
  int failures = 0;
  for (const Workload& w : {char_workload(), gpt2_workload()}) {
    if (!only.empty() && w.name.find(only == "char" ? "char" : "gpt2") == std::string::npos)
      continue;
    StepFactory factory = [&w](Device d) {
      auto t = std::make_shared<Trainer>(w, d, true);
      return StepFunction([t](int) { t->step(); });
    };
    const MemoryPrediction p = predict_memory(factory, PredictOptions().steps(3));
    const MemoryPrediction m = measure_memory(factory, kCUDA, PredictOptions().steps(3));
    const bool same = p.peak_allocated == m.peak_allocated && p.peak_reserved == m.peak_reserved;
    std::printf(
        "memory %s (3 steps): predicted peak allocated %lld B, reserved %lld B; measured "
        "%lld B, %lld B: %s\n",
        w.name.c_str(), static_cast<long long>(p.peak_allocated),
        static_cast<long long>(p.peak_reserved), static_cast<long long>(m.peak_allocated),
        static_cast<long long>(m.peak_reserved), same ? "equal" : "DIFFER");
    failures += same ? 0 : 1;
  }
  return failures ? 1 : 0;
}

int profile_steps(int argc, char** argv) {
  std::string only, trace_dir, device_name = cuda::is_available() ? "cuda" : "cpu";
  int64_t steps = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
    if (std::strcmp(argv[i], "--device") == 0) device_name = argv[i + 1];
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoll(argv[i + 1]);
    if (std::strcmp(argv[i], "--trace") == 0) trace_dir = argv[i + 1];
  }
  if (steps < 1) {
    std::fprintf(stderr, "bench_gpt --profile: --steps must be >= 1, got %lld\n",
                 static_cast<long long>(steps));
    return 2;
  }
  const Device device(device_name);
  std::vector<Workload> work;
  if (only.empty() || only == "char") work.push_back(char_workload());
  if (only.empty() || only == "gpt2") work.push_back(gpt2_workload());
  if (work.empty()) {
    std::fprintf(stderr, "bench_gpt --profile: --only takes char or gpt2, got %s\n", only.c_str());
    return 2;
  }
  for (const Workload& w : work) {
    Trainer t(w, device, device.is_cuda());
    for (int i = 0; i < 3; ++i) t.step();
    if (device.is_cuda()) cuda::synchronize(device.index);
    if (!trace_dir.empty()) caching_allocator(device).record_memory_history(true);
    profiler::Profile prof;
    for (int64_t i = 0; i < steps; ++i) {
      profiler::RecordFunction range("step");
      t.step();
    }
    prof.stop();
    std::printf("== profile: %s (%s, %s), %lld steps on %s\n%s", w.name.c_str(), w.shape.c_str(),
                device.is_cuda() ? "bf16 autocast" : "fp32", static_cast<long long>(steps),
                device.str().c_str(), prof.table("device", 40).c_str());
    if (!trace_dir.empty()) {
      const memory::MemorySnapshot history = memory_snapshot(device);
      caching_allocator(device).record_memory_history(false);
      const std::string path =
          trace_dir + "/gpt_" + (w.cfg.n_layer == 12 ? std::string("gpt2") : "char") + ".json";
      prof.export_chrome_trace(path, &history);
      std::printf("trace: %s\n", path.c_str());
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--parity") == 0) return parity(argc, argv);
    if (std::strcmp(argv[i], "--sdpa") == 0) return sdpa_cases(argc, argv);
    if (std::strcmp(argv[i], "--profile") == 0) return profile_steps(argc, argv);
  }
  if (!bench::have_gpu("bench_gpt")) return 0;
  bool quick = false, memory = false, eager_only = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--memory") == 0) memory = true;
    if (std::strcmp(argv[i], "--eager") == 0) eager_only = true;
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[i + 1];
  }
  if (!only.empty() && only != "char" && only != "gpt2") {
    std::fprintf(stderr, "bench_gpt: --only takes char or gpt2, got %s\n", only.c_str());
    return 2;
  }
  if (memory) return memory_check(only);
  std::vector<Workload> work;
  if (only.empty() || only == "char") work.push_back(char_workload());
  if (only.empty() || only == "gpt2") work.push_back(gpt2_workload());
  bench::Table table("gpt: one training step (bf16 autocast, fused AdamW, clip 1.0), wall time");
  int failures = 0;
  for (const Workload& w : work) {
    if (!validate(w)) {
      ++failures;
      continue;
    }
    empty_cache(kCUDA);
    Trainer t(w, kCUDA, true);
    const int warmup = 3, rounds = quick ? 3 : 5, steps = quick ? 3 : (w.batch == 64 ? 20 : 10);
    t.step();
    reset_peak_memory_stats(kCUDA);
    const bench::Spread ms = wall_ms([&] { t.step(); }, warmup, rounds, steps);
    const int64_t peak = max_memory_allocated(kCUDA), reserved = max_memory_reserved(kCUDA);
    const double tokens = static_cast<double>(w.batch * w.cfg.block_size);
    const double tok_s = tokens / (ms.median / 1e3);
    const double tflops = gpt::flops_per_token(*t.model, w.cfg.block_size) * tok_s / 1e12;
    char note[160];
    std::snprintf(note, sizeof note, "%.1f TFLOP/s, peak %.0f MiB, %.2fM params", tflops,
                  static_cast<double>(peak) / (1 << 20),
                  static_cast<double>(t.model->num_parameters()) / 1e6);
    table.add(
        {w.name, "bf16", w.shape, "ember", ms.median, tok_s / 1e3, "ktok/s", note, ms.min, ms.max});
    predicted_vs_measured(w, peak, reserved);
    if (!eager_only && !graphed_row(w, rounds, steps, table)) ++failures;
  }
  table.write_json(bench::json_path(argc, argv));
  if (failures) std::printf("%d validation failure(s)\n", failures);
  return failures ? 1 : 0;
}
