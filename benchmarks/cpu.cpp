// bench_cpu: ember's CPU path, one case per run, so that benchmarks/bench_cpu.sh can
// interleave it with its libtorch peer (benchmarks/peer_cpu_libtorch.cpp, the same
// cases written with libtorch's C++ API) in one run of the day.
//   bench_cpu --case NAME --threads N [--rounds R]
// Cases (float32): matmul256, matmul1024 (n^3), linear (512x64 -> 256 with bias),
// gelu (the tanh form), softmax (last dim), layer_norm (weight and bias) on 512x256, digits_mlp (a
// training step of the 64-128-64-10 ReLU MLP, cross-entropy, Adam lr 1e-3, batch 64)
// and char_gpt (a training step of a 2-block character transformer: vocabulary 65,
// 4 heads, 64 dims, T 32, batch 16, causal attention from 3-D matmuls and softmax,
// GELU (tanh form) MLP 4x, pre-LayerNorm, AdamW lr 1e-3). Each case is validated before it is
// timed: the ops against float64 computed independently (the reference loops for
// matmul, formulas for the others), the steps by the loss, which must start near
// ln(classes) and fall over 20 steps on one batch. Then rounds of calls are timed
// (wall clock; each round's calls divided), and one line is printed:
//   bench_cpu case=NAME threads=N ms=MEDIAN min=MIN max=MAX
// Exit 1 when validation fails (no timing line).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "optim/adam.h"

namespace {

using namespace ember;
using Clock = std::chrono::steady_clock;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "bench_cpu: validation failed: %s\n", what.c_str());
  std::exit(1);
}

// max |got - want| <= atol + rtol |want| elementwise.
void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                  const char* what) {
  const std::vector<double> g = got.to(kFloat64).to_vector<double>();
  const std::vector<double> w = want.to(kFloat64).to_vector<double>();
  if (g.size() != w.size()) fail(std::string(what) + ": sizes differ");
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i])))
      fail(std::string(what) + ": element " + std::to_string(i) + " is " + std::to_string(g[i]) +
           ", float64 gives " + std::to_string(w[i]));
}

Tensor param(const Shape& s, double scale) {
  return (randn(s) * scale).requires_grad_();
}

// ----------------------------------------------------------------- the model steps

struct Mlp {
  std::vector<Tensor> p;  // w1 b1 w2 b2 w3 b3
  Tensor x, y;
  std::unique_ptr<optim::Adam> opt;
  Mlp() {
    const int64_t sizes[] = {64, 128, 64, 10};
    for (int i = 0; i < 3; ++i) {
      p.push_back(param({sizes[i + 1], sizes[i]}, 1.0 / std::sqrt(double(sizes[i]))));
      p.push_back(param({sizes[i + 1]}, 0.0));
    }
    x = randn({64, 64});
    y = randint(0, 10, {64});
    opt = std::make_unique<optim::Adam>(p, optim::AdamOptions(1e-3));
  }
  double step() {
    opt->zero_grad();
    Tensor h = linear(x, p[0], p[1], Activation::Relu);
    h = linear(h, p[2], p[3], Activation::Relu);
    Tensor loss = cross_entropy(linear(h, p[4], p[5]), y);
    loss.backward();
    opt->step();
    return loss.item();
  }
};

struct CharGpt {
  static constexpr int64_t V = 65, C = 64, H = 4, T = 32, B = 16, L = 2;
  std::vector<Tensor> p;
  Tensor wte, wpe, lnf_w, lnf_b, head;
  struct Block {
    Tensor ln1_w, ln1_b, wq, wk, wv, wo, bo, ln2_w, ln2_b, w1, b1, w2, b2;
  };
  std::vector<Block> blocks;
  Tensor idx, tgt, pos, mask;
  std::unique_ptr<optim::AdamW> opt;

  CharGpt() {
    auto add = [&](Tensor t) {
      p.push_back(t);
      return t;
    };
    wte = add(param({V, C}, 0.02));
    wpe = add(param({T, C}, 0.02));
    for (int l = 0; l < L; ++l) {
      Block b;
      b.ln1_w = add(ones({C}).requires_grad_());
      b.ln1_b = add(zeros({C}).requires_grad_());
      b.wq = add(param({C, C}, 0.02));
      b.wk = add(param({C, C}, 0.02));
      b.wv = add(param({C, C}, 0.02));
      b.wo = add(param({C, C}, 0.02));
      b.bo = add(zeros({C}).requires_grad_());
      b.ln2_w = add(ones({C}).requires_grad_());
      b.ln2_b = add(zeros({C}).requires_grad_());
      b.w1 = add(param({4 * C, C}, 0.02));
      b.b1 = add(zeros({4 * C}).requires_grad_());
      b.w2 = add(param({C, 4 * C}, 0.02));
      b.b2 = add(zeros({C}).requires_grad_());
      blocks.push_back(b);
    }
    lnf_w = add(ones({C}).requires_grad_());
    lnf_b = add(zeros({C}).requires_grad_());
    head = add(param({V, C}, 0.02));
    idx = randint(0, V, {B, T});
    tgt = randint(0, V, {B * T});
    pos = arange(0, T, 1, kInt64);
    std::vector<double> m(T * T);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) m[i * T + j] = j > i ? -INFINITY : 0.0;
    mask = from_vector(m, {T, T});
    opt = std::make_unique<optim::AdamW>(p, optim::AdamWOptions(1e-3));
  }
  // (B*T, C) -> (B*H, T, C/H)
  static Tensor heads(const Tensor& t) {
    return reshape(transpose(reshape(t, {B, T, H, C / H}), 1, 2), {B * H, T, C / H});
  }
  double step() {
    opt->zero_grad();
    Tensor x = reshape(embedding(wte, idx) + embedding(wpe, pos), {B * T, C});
    for (const Block& b : blocks) {
      Tensor h = layer_norm(x, {C}, b.ln1_w, b.ln1_b);
      Tensor q = heads(linear(h, b.wq)), k = heads(linear(h, b.wk)), v = heads(linear(h, b.wv));
      Tensor att = matmul(q, transpose(k, -1, -2)) * (1.0 / std::sqrt(double(C / H))) + mask;
      Tensor y = matmul(softmax(att, -1), v);  // (B*H, T, d)
      y = reshape(transpose(reshape(y, {B, H, T, C / H}), 1, 2), {B * T, C});
      x = x + linear(y, b.wo, b.bo);
      h = layer_norm(x, {C}, b.ln2_w, b.ln2_b);
      x = x + linear(linear(h, b.w1, b.b1, Activation::GeluTanh), b.w2, b.b2);  // peer: "tanh"
    }
    Tensor logits = linear(layer_norm(x, {C}, lnf_w, lnf_b), head);
    Tensor loss = cross_entropy(logits, tgt);
    loss.backward();
    opt->step();
    return loss.item();
  }
};

template <typename M>
void validate_steps(M& m, double classes, const char* what) {
  const double first = m.step();
  double last = first;
  for (int i = 0; i < 19; ++i) last = m.step();
  if (!(std::fabs(first - std::log(classes)) < 0.5) || !(last < first - 0.05))
    fail(std::string(what) + ": loss " + std::to_string(first) + " -> " + std::to_string(last) +
         " over 20 steps (expected from about ln(" + std::to_string(int(classes)) +
         ") and falling)");
}

// ----------------------------------------------------------------- timing

struct Spread {
  double median, min, max;
};

// Median (min, max) over `rounds` rounds of the per-call wall time of `calls` calls.
Spread time_ms(const std::function<void()>& f, int rounds, int calls) {
  for (int i = 0; i < std::max(2, calls / 4); ++i) f();
  std::vector<double> v;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) f();
    v.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / calls);
  }
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  std::string name;
  int threads = 1, rounds = 7;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--case") && i + 1 < argc)
      name = argv[++i];
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc)
      rounds = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_cpu --case NAME --threads N [--rounds R]\n");
      return 2;
    }
  }
  set_num_threads(threads);
  // Which BLAS kernels the matrix rows ran on (bench_cpu.sh quotes the first).
  std::printf("# cpu blas: %s\n", cpu_blas_info().c_str());
  manual_seed(1);
  std::function<void()> f;
  int calls = 20;
  Tensor keep_a, keep_b, keep_c;
  if (name == "matmul256" || name == "matmul1024") {
    const int64_t n = name == "matmul256" ? 256 : 1024;
    keep_a = randn({n, n});
    keep_b = randn({n, n});
    const Tensor want = matmul(keep_a.to(kFloat64), keep_b.to(kFloat64));
    expect_close(matmul(keep_a, keep_b), want, 1e-5 * n, 1e-4, "matmul");
    f = [&] { matmul(keep_a, keep_b); };
    calls = n == 256 ? 50 : 5;
  } else if (name == "linear") {
    keep_a = randn({512, 64});
    keep_b = randn({256, 64});
    keep_c = randn({256});
    const Tensor want =
        add(matmul(keep_a.to(kFloat64), keep_b.to(kFloat64).t()), keep_c.to(kFloat64));
    expect_close(linear(keep_a, keep_b, keep_c), want, 1e-4, 1e-4, "linear");
    f = [&] { linear(keep_a, keep_b, keep_c); };
    calls = 50;
  } else if (name == "gelu" || name == "softmax" || name == "layer_norm") {
    keep_a = randn({512, 256});
    keep_b = randn({256});
    keep_c = randn({256});
    const Tensor x = keep_a.to(kFloat64);
    Tensor want;
    if (name == "gelu") {  // the tanh form, as the peer's torch::gelu(a, "tanh")
      const Tensor inner = (x + pow(x, 3.0) * 0.044715) * std::sqrt(2.0 / M_PI);
      want = x * 0.5 * (tanh(inner) + 1.0);
      expect_close(gelu(keep_a, "tanh"), want, 1e-6, 1e-5, "gelu");
      f = [&] { gelu(keep_a, "tanh"); };
    } else if (name == "softmax") {
      const Tensor e = exp(x - max(x, -1, true).values);
      want = e / sum(e, -1, true);
      expect_close(softmax(keep_a, -1), want, 1e-7, 1e-5, "softmax");
      f = [&] { softmax(keep_a, -1); };
    } else {
      const Tensor mu = mean(x, -1, true), d = x - mu;
      const Tensor var = mean(d * d, -1, true);
      want = d / sqrt(var + 1e-5) * keep_b.to(kFloat64) + keep_c.to(kFloat64);
      expect_close(layer_norm(keep_a, {256}, keep_b, keep_c), want, 1e-5, 1e-5, "layer_norm");
      f = [&] { layer_norm(keep_a, {256}, keep_b, keep_c); };
    }
    calls = 50;
  } else if (name == "digits_mlp") {
    static Mlp m;
    validate_steps(m, 10, "digits_mlp");
    f = [&] { m.step(); };
    calls = 20;
  } else if (name == "char_gpt") {
    static CharGpt m;
    validate_steps(m, CharGpt::V, "char_gpt");
    f = [&] { m.step(); };
    calls = 5;
  } else {
    std::fprintf(stderr, "bench_cpu: unknown case '%s'\n", name.c_str());
    return 2;
  }
  const Spread s = time_ms(f, rounds, calls);
  std::printf("bench_cpu case=%s threads=%d ms=%.5f min=%.5f max=%.5f\n", name.c_str(), threads,
              s.median, s.min, s.max);
  return 0;
}
