// peer_cpu_libtorch: the libtorch (C++) peer of bench_cpu (benchmarks/cpu.cpp): the
// same cases on libtorch's CPU kernels, validated the same way (against float64,
// the steps by their loss), timed the same way, one case per run:
//   peer_cpu_libtorch --case NAME --threads N [--rounds R]
// prints: peer_cpu case=NAME threads=N ms=MEDIAN min=MIN max=MAX
// Built by benchmarks/bench_cpu.sh against the torch package's headers and
// libraries (never by ember's build).
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using torch::Tensor;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "peer_cpu: validation failed: %s\n", what.c_str());
  std::exit(1);
}

void expect_close(const Tensor& got, const Tensor& want, double atol, double rtol,
                  const char* what) {
  if (!torch::allclose(got.to(torch::kFloat64), want, rtol, atol))
    fail(std::string(what) + ": differs from float64 by " +
         std::to_string((got.to(torch::kFloat64) - want).abs().max().item<double>()));
}

Tensor param(at::IntArrayRef s, double scale) {
  return (torch::randn(s) * scale).requires_grad_();
}

struct Mlp {
  std::vector<Tensor> p;
  Tensor x, y;
  std::unique_ptr<torch::optim::Adam> opt;
  Mlp() {
    const int64_t sizes[] = {64, 128, 64, 10};
    for (int i = 0; i < 3; ++i) {
      p.push_back(param({sizes[i + 1], sizes[i]}, 1.0 / std::sqrt(double(sizes[i]))));
      p.push_back(param({sizes[i + 1]}, 0.0));
    }
    x = torch::randn({64, 64});
    y = torch::randint(0, 10, {64});
    opt = std::make_unique<torch::optim::Adam>(p, torch::optim::AdamOptions(1e-3));
  }
  double step() {
    opt->zero_grad();
    Tensor h = torch::relu(torch::linear(x, p[0], p[1]));
    h = torch::relu(torch::linear(h, p[2], p[3]));
    Tensor loss = torch::cross_entropy_loss(torch::linear(h, p[4], p[5]), y);
    loss.backward();
    opt->step();
    return loss.item<double>();
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
  std::unique_ptr<torch::optim::AdamW> opt;

  CharGpt() {
    auto add = [&](Tensor t) {
      p.push_back(t);
      return t;
    };
    wte = add(param({V, C}, 0.02));
    wpe = add(param({T, C}, 0.02));
    for (int l = 0; l < L; ++l) {
      Block b;
      b.ln1_w = add(torch::ones({C}).requires_grad_());
      b.ln1_b = add(torch::zeros({C}).requires_grad_());
      b.wq = add(param({C, C}, 0.02));
      b.wk = add(param({C, C}, 0.02));
      b.wv = add(param({C, C}, 0.02));
      b.wo = add(param({C, C}, 0.02));
      b.bo = add(torch::zeros({C}).requires_grad_());
      b.ln2_w = add(torch::ones({C}).requires_grad_());
      b.ln2_b = add(torch::zeros({C}).requires_grad_());
      b.w1 = add(param({4 * C, C}, 0.02));
      b.b1 = add(torch::zeros({4 * C}).requires_grad_());
      b.w2 = add(param({C, 4 * C}, 0.02));
      b.b2 = add(torch::zeros({C}).requires_grad_());
      blocks.push_back(b);
    }
    lnf_w = add(torch::ones({C}).requires_grad_());
    lnf_b = add(torch::zeros({C}).requires_grad_());
    head = add(param({V, C}, 0.02));
    idx = torch::randint(0, V, {B, T});
    tgt = torch::randint(0, V, {B * T});
    pos = torch::arange(T);
    mask = torch::full({T, T}, -INFINITY).triu(1);
    opt = std::make_unique<torch::optim::AdamW>(p, torch::optim::AdamWOptions(1e-3));
  }
  static Tensor heads(const Tensor& t) {
    return t.reshape({B, T, H, C / H}).transpose(1, 2).reshape({B * H, T, C / H});
  }
  double step() {
    opt->zero_grad();
    Tensor x = (torch::embedding(wte, idx) + torch::embedding(wpe, pos)).reshape({B * T, C});
    for (const Block& b : blocks) {
      Tensor h = torch::layer_norm(x, {C}, b.ln1_w, b.ln1_b);
      Tensor q = heads(torch::linear(h, b.wq)), k = heads(torch::linear(h, b.wk)),
             v = heads(torch::linear(h, b.wv));
      Tensor att = torch::matmul(q, k.transpose(-1, -2)) * (1.0 / std::sqrt(double(C / H))) + mask;
      Tensor y = torch::matmul(torch::softmax(att, -1), v);
      y = y.reshape({B, H, T, C / H}).transpose(1, 2).reshape({B * T, C});
      x = x + torch::linear(y, b.wo, b.bo);
      h = torch::layer_norm(x, {C}, b.ln2_w, b.ln2_b);
      x = x + torch::linear(torch::gelu(torch::linear(h, b.w1, b.b1), "tanh"), b.w2, b.b2);
    }
    Tensor logits = torch::linear(torch::layer_norm(x, {C}, lnf_w, lnf_b), head);
    Tensor loss = torch::cross_entropy_loss(logits, tgt);
    loss.backward();
    opt->step();
    return loss.item<double>();
  }
};

template <typename M>
void validate_steps(M& m, double classes, const char* what) {
  const double first = m.step();
  double last = first;
  for (int i = 0; i < 19; ++i) last = m.step();
  if (!(std::fabs(first - std::log(classes)) < 0.5) || !(last < first - 0.05))
    fail(std::string(what) + ": loss " + std::to_string(first) + " -> " + std::to_string(last));
}

struct Spread {
  double median, min, max;
};
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
    else
      return 2;
  }
  torch::set_num_threads(threads);
  torch::manual_seed(1);
  std::function<void()> f;
  int calls = 20;
  Tensor a, b, c;
  if (name == "matmul256" || name == "matmul1024") {
    const int64_t n = name == "matmul256" ? 256 : 1024;
    a = torch::randn({n, n});
    b = torch::randn({n, n});
    expect_close(torch::matmul(a, b), torch::matmul(a.to(torch::kFloat64), b.to(torch::kFloat64)),
                 1e-5 * n, 1e-4, "matmul");
    f = [&] { torch::matmul(a, b); };
    calls = n == 256 ? 50 : 5;
  } else if (name == "linear") {
    a = torch::randn({512, 64});
    b = torch::randn({256, 64});
    c = torch::randn({256});
    expect_close(torch::linear(a, b, c),
                 torch::linear(a.to(torch::kFloat64), b.to(torch::kFloat64), c.to(torch::kFloat64)),
                 1e-4, 1e-4, "linear");
    f = [&] { torch::linear(a, b, c); };
    calls = 50;
  } else if (name == "gelu" || name == "softmax" || name == "layer_norm") {
    a = torch::randn({512, 256});
    b = torch::randn({256});
    c = torch::randn({256});
    const Tensor x = a.to(torch::kFloat64);
    if (name == "gelu") {
      expect_close(torch::gelu(a, "tanh"), torch::gelu(x, "tanh"), 1e-6, 1e-5, "gelu");
      f = [&] { torch::gelu(a, "tanh"); };
    } else if (name == "softmax") {
      expect_close(torch::softmax(a, -1), torch::softmax(x, -1), 1e-7, 1e-5, "softmax");
      f = [&] { torch::softmax(a, -1); };
    } else {
      expect_close(torch::layer_norm(a, {256}, b, c),
                   torch::layer_norm(x, {256}, b.to(torch::kFloat64), c.to(torch::kFloat64)), 1e-5,
                   1e-5, "layer_norm");
      f = [&] { torch::layer_norm(a, {256}, b, c); };
    }
    calls = 50;
  } else if (name == "digits_mlp") {
    static Mlp m;
    validate_steps(m, 10, "digits_mlp");
    f = [&] { m.step(); };
  } else if (name == "char_gpt") {
    static CharGpt m;
    validate_steps(m, CharGpt::V, "char_gpt");
    f = [&] { m.step(); };
    calls = 5;
  } else {
    return 2;
  }
  const Spread s = time_ms(f, rounds, calls);
  std::printf("peer_cpu case=%s threads=%d ms=%.5f min=%.5f max=%.5f\n", name.c_str(), threads,
              s.median, s.min, s.max);
  return 0;
}
