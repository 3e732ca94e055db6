// The CPU fast paths against their reference, and the thread pool behind
// ember::set_num_threads: the BLAS matrix product (core/kernels/cpu_linalg.h)
// against the double-accumulating reference loops at DESIGN.md's thresholds (fp32
// GEMM <= 1e-5, bf16 <= 1e-2 relative error; float64 <= 1e-12), on transposed,
// batched and shared operands; parallel_for's fixed chunks (grain edges, empty
// ranges, nesting, concurrent callers); element-wise ops bit for bit with the
// generic loop at 1, 2 and 3 threads; set_num_threads' checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/kernels/cpu_linalg.h"
#include "core/kernels/cpu_parallel.h"
#include "core/ops.h"
#include "core/threads.h"
#include "optim/adam.h"

// OpenBLAS's pthread build: 1 while its server threads run (declared weak: null with
// another BLAS or none).
extern "C" int blas_server_avail __attribute__((weak));

using namespace ember;
namespace cpu = ember::kernels::cpu;

namespace {

// Restores the thread count and the BLAS switch at scope exit.
struct ThreadsGuard {
  int saved = get_num_threads();
  bool blas = cpu::fast_paths();
  ~ThreadsGuard() {
    set_num_threads(saved);
    cpu::set_fast_paths(blas);
  }
};

double rel_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to(kFloat64).to_vector<double>();
  const std::vector<double> w = want.to(kFloat64).to_vector<double>();
  REQUIRE(g.size() == w.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) || std::isnan(w[i])) return INFINITY;
    num += (g[i] - w[i]) * (g[i] - w[i]);
    den += w[i] * w[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

Tensor reference_matmul(const Tensor& a, const Tensor& b) {
  ThreadsGuard g;
  cpu::set_fast_paths(false);
  return matmul(a, b);
}

double threshold(DType t) {
  return t == kFloat32 ? 1e-5 : t == kBFloat16 ? 1e-2 : 1e-12;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (!(x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i])))) return false;
  return true;
}

}  // namespace

TEST_CASE("cpu/blas: matmul matches the reference loops on every layout") {
  ThreadsGuard guard;
  cpu::set_fast_paths(true);
  if (!cpu::have_blas()) {
    MESSAGE("ember was built without OpenBLAS: the CPU matmul is the reference itself");
    return;
  }
  manual_seed(3);
  for (DType dt : {kFloat32, kFloat64, kBFloat16})
    for (int threads : {1, 2, 3}) {
      set_num_threads(threads);
      const std::string dt_name(dtype_name(dt));
      CAPTURE(dt_name);
      CAPTURE(threads);
      const TensorOptions o = TensorOptions(dt);
      // plain, odd sizes
      Tensor a = randn({37, 70}, o), b = randn({70, 45}, o);
      CHECK(rel_error(matmul(a, b), reference_matmul(a, b)) <= threshold(dt));
      // transposed operands read in place
      Tensor at = randn({70, 37}, o).t(), bt = randn({45, 70}, o).t();
      CHECK(rel_error(matmul(at, bt), reference_matmul(at, bt)) <= threshold(dt));
      // row-strided (a column slice) and a vector
      Tensor wide = randn({37, 90}, o);
      Tensor as = slice(wide, 1, 10, 80);
      CHECK(rel_error(matmul(as, b), reference_matmul(as, b)) <= threshold(dt));
      Tensor row = randn({1, 70}, o), col = randn({70, 1}, o);
      CHECK(rel_error(matmul(row, col), reference_matmul(row, col)) <= threshold(dt));
      // batched (small: spread over the pool), batched large, shared right operand
      Tensor ba = randn({6, 9, 11}, o), bb = randn({6, 11, 5}, o);
      CHECK(rel_error(matmul(ba, bb), reference_matmul(ba, bb)) <= threshold(dt));
      Tensor bbt = transpose(randn({6, 5, 11}, o), 1, 2);
      CHECK(rel_error(matmul(ba, bbt), reference_matmul(ba, bbt)) <= threshold(dt));
      Tensor shared = randn({11, 5}, o);
      CHECK(rel_error(matmul(ba, shared), reference_matmul(ba, shared)) <= threshold(dt));
      Tensor big_a = randn({3, 70, 80}, o), big_b = randn({3, 80, 60}, o);
      CHECK(rel_error(matmul(big_a, big_b), reference_matmul(big_a, big_b)) <= threshold(dt));
    }
}

TEST_CASE("cpu/blas: linear and its backward through the BLAS match the reference") {
  ThreadsGuard guard;
  manual_seed(4);
  Tensor x = randn({33, 20}), w = randn({17, 20}), b = randn({17});
  auto run = [&](bool blas, std::vector<Tensor>& grads) {
    cpu::set_fast_paths(blas);
    Tensor xx = x.detach().requires_grad_(), ww = w.detach().requires_grad_(),
           bb = b.detach().requires_grad_();
    Tensor y = linear(xx, ww, bb, Activation::Gelu);
    sum(y * y).backward();
    grads = {xx.grad(), ww.grad(), bb.grad()};
    return y;
  };
  std::vector<Tensor> g_fast, g_ref;
  const Tensor y_fast = run(true, g_fast), y_ref = run(false, g_ref);
  CHECK(rel_error(y_fast, y_ref) <= 1e-5);
  for (size_t i = 0; i < 3; ++i) CHECK(rel_error(g_fast[i], g_ref[i]) <= 1e-5);
}

TEST_CASE("cpu/blas: the fused Linear (bias in the output, one GEMM) matches the reference") {
  // Fast paths on: linear() takes the CPU's fused forward and its two backward GEMMs
  // (core/kernels/cpu_linalg.cpp); off: the composition over the reference loops.
  ThreadsGuard guard;
  manual_seed(6);
  for (DType dt : {kFloat32, kFloat64}) {
    const TensorOptions o(dt);
    // x as a column slice of a wider tensor: rows strided, each row contiguous.
    Tensor wide = randn({70, 45}, o), w = randn({23, 40}, o), b = randn({23}, o);
    Tensor x = wide.slice(1, 2, 42);
    for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu}) {
      for (bool with_bias : {true, false}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(std::string(activation_name(act)));
        CAPTURE(with_bias);
        // fused where ember has OpenBLAS (blas_core() names its kernels) and the fast
        // paths are on, else composed
        cpu::set_fast_paths(true);
        CHECK(kernels::kernels_for(kCPU).linear_fused_supported({kCPU, dt}) ==
              !cpu::blas_core().empty());
        std::vector<Tensor> grads[2];
        Tensor y[2];
        for (int fast = 0; fast < 2; ++fast) {
          cpu::set_fast_paths(fast == 1);
          Tensor xx = x.detach().requires_grad_(), ww = w.detach().requires_grad_(),
                 bb = b.detach().requires_grad_();
          y[fast] = linear(xx, ww, with_bias ? bb : Tensor(), act);
          sum(y[fast] * y[fast]).backward();
          grads[fast] = {xx.grad(), ww.grad()};
          if (with_bias) grads[fast].push_back(bb.grad());
        }
        CHECK(rel_error(y[1], y[0]) <= threshold(dt));
        for (size_t i = 0; i < grads[0].size(); ++i)
          CHECK(rel_error(grads[1][i], grads[0][i]) <= threshold(dt));
      }
    }
  }
  // Fast paths off, or bfloat16: no fused Linear (the op composes).
  cpu::set_fast_paths(false);
  CHECK_FALSE(kernels::kernels_for(kCPU).linear_fused_supported({kCPU, kFloat32}));
  cpu::set_fast_paths(true);
  CHECK_FALSE(kernels::kernels_for(kCPU).linear_fused_supported({kCPU, kBFloat16}));
  // No input features: y is the bias (or zeros), no GEMM.
  Tensor y0 = linear(zeros({3, 0}), zeros({2, 0}), Tensor());
  CHECK(y0.to_vector<float>() == std::vector<float>(6, 0.0f));
}

TEST_CASE("cpu/blas: OpenBLAS's own threads are stopped once ember is loaded") {
  // OpenBLAS starts a server thread per core when it loads, each spinning for about
  // 2^28 cycles before it sleeps; ember never asks OpenBLAS for threads and stops them
  // (cpu_linalg.cpp), so they take no core from ember's pool.
  if (!cpu::have_blas() || &blas_server_avail == nullptr) {
    MESSAGE("not OpenBLAS's pthread build: nothing to stop");
    return;
  }
  CHECK(blas_server_avail == 0);
  // Products still run (OpenBLAS on the calling thread, tiles on ember's pool).
  ThreadsGuard guard;
  set_num_threads(2);
  Tensor a = full({128, 128}, 1.0), b = full({128, 128}, 2.0);
  CHECK(matmul(a, b).to_vector<float>() == std::vector<float>(128 * 128, 256.0f));
  CHECK(blas_server_avail == 0);
}

TEST_CASE("cpu/blas: a matmul gives the same bits at a given thread count, run after run") {
  ThreadsGuard guard;
  manual_seed(5);
  Tensor a = randn({300, 200}), b = randn({200, 250});
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    const Tensor first = matmul(a, b);
    for (int r = 0; r < 3; ++r) CHECK(same_bits(matmul(a, b), first));
  }
}

TEST_CASE("cpu/parallel: chunks cover the range once, at fixed bounds, by the grain") {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CAPTURE(threads);
    const int64_t grain = 100;
    for (int64_t n : {int64_t{0}, int64_t{1}, grain - 1, grain, 2 * grain - 1, 2 * grain, 3 * grain,
                      3 * grain + 1, int64_t{1000}}) {
      CAPTURE(n);
      std::vector<int> hits(static_cast<size_t>(n), 0);
      std::atomic<int> calls{0};
      cpu::parallel_for(n, grain, [&](int64_t b, int64_t e) {
        ++calls;
        CHECK(b < e);
        for (int64_t i = b; i < e; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int h : hits) CHECK(h == 1);
      const int64_t chunks = cpu::chunk_count(n, grain);
      CHECK(calls.load() == chunks);
      // below two grains (or with one thread) the work stays in one call
      if (n < 2 * grain || threads == 1) CHECK(chunks <= 1);
      if (n >= 2 * grain) CHECK(chunks == std::min<int64_t>(threads, n / grain));
    }
  }
}

TEST_CASE("cpu/parallel: nested and concurrent calls complete on the calling threads") {
  ThreadsGuard guard;
  set_num_threads(3);
  std::atomic<int64_t> total{0};
  cpu::parallel_for(30, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      cpu::parallel_for(30, 10, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  CHECK(total.load() == 900);
  std::vector<std::thread> users;
  std::vector<int64_t> sums(4, 0);
  for (int u = 0; u < 4; ++u)
    users.emplace_back([&, u] {
      for (int r = 0; r < 20; ++r) {
        std::vector<int64_t> part(3, 0);
        cpu::parallel_chunks(3000, cpu::chunk_count(3000, 1000),
                             [&](int64_t c, int64_t b, int64_t e) {
                               for (int64_t i = b; i < e; ++i) part[static_cast<size_t>(c)] += i;
                             });
        sums[static_cast<size_t>(u)] += part[0] + part[1] + part[2];
      }
    });
  for (std::thread& t : users) t.join();
  for (int64_t s : sums) CHECK(s == 20 * (2999 * 3000 / 2));
}

TEST_CASE("cpu/parallel: element-wise ops give the generic loop's bits at 1, 2 and 3 threads") {
  ThreadsGuard guard;
  manual_seed(6);
  const int64_t n = 3 * cpu::kElementwiseGrain + 17;  // enough for three chunks
  Tensor x = randn({n}), y = randn({n});
  Tensor rows = randn({n / 64, 64});  // a strided plan: rows split over threads
  Tensor bias = randn({64});
  set_num_threads(1);
  const Tensor e1 = exp(x), s1 = add(x, y), g1 = gelu(x), t1 = gelu_tanh(x), r1 = add(rows, bias);
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    CAPTURE(threads);
    CHECK(same_bits(exp(x), e1));
    CHECK(same_bits(add(x, y), s1));
    CHECK(same_bits(gelu(x), g1));
    CHECK(same_bits(gelu_tanh(x), t1));
    CHECK(same_bits(add(rows, bias), r1));
  }
  // each is also the definition, element by element
  const std::vector<float> xs = x.to_vector<float>(), es = e1.to_vector<float>();
  for (size_t i = 0; i < xs.size(); i += 997)
    CHECK(es[i] == static_cast<float>(std::exp(static_cast<double>(xs[i]))));
}

TEST_CASE("cpu/parallel: empty tensors and k = 0 products at every thread count") {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CHECK(exp(zeros({0, 5})).numel() == 0);
    CHECK(matmul(zeros({0, 4}), zeros({4, 3})).sizes() == Shape{0, 3});
    CHECK(matmul(ones({2, 0}), ones({0, 3})).to_vector<double>() == std::vector<double>(6, 0.0));
  }
}

TEST_CASE("cpu/threads: set_num_threads checks its argument and get_num_threads reports it") {
  ThreadsGuard guard;
  set_num_threads(2);
  CHECK(get_num_threads() == 2);
  set_num_threads(1);
  CHECK(get_num_threads() == 1);
  CHECK_THROWS_WITH_AS(set_num_threads(0), doctest::Contains("set_num_threads"), Error);
  CHECK_THROWS_AS(set_num_threads(-3), Error);
  CHECK(get_num_threads() == 1);
}

namespace {

// (y, d_x, d_w, d_b) of layer_norm(x) with the fast paths on or off, the loss
// sum(y * u) for a fixed u.
std::vector<Tensor> layer_norm_run(bool fast, const Tensor& x, const Tensor& w, const Tensor& b,
                                   const Tensor& u) {
  cpu::set_fast_paths(fast);
  Tensor xx = x.detach().requires_grad_(), ww = w.detach().requires_grad_(),
         bb = b.detach().requires_grad_();
  Tensor y = layer_norm(xx, {x.size(-1)}, ww, bb);
  sum(y * u).backward();
  return {y, xx.grad(), ww.grad(), bb.grad()};
}

// batch_norm forward and backward on the fast path (fused) or the composed
// reference: y, d_x, d_w, d_b (undefined where not asked), the running statistics
// after, and the autograd node's name.
struct BatchNormRun {
  std::vector<Tensor> out;
  std::string node;
};
BatchNormRun batch_norm_run(bool fast, const Tensor& x, const Tensor& w, const Tensor& b,
                            const Tensor& rm, const Tensor& rv, bool training, const Tensor& u) {
  cpu::set_fast_paths(fast);
  Tensor xx = x.detach().requires_grad_();
  Tensor ww = w.defined() ? w.detach().requires_grad_() : Tensor();
  Tensor bb = b.defined() ? b.detach().requires_grad_() : Tensor();
  Tensor m = rm.defined() ? rm.detach().clone() : Tensor();
  Tensor v = rv.defined() ? rv.detach().clone() : Tensor();
  Tensor y = batch_norm(xx, m, v, ww, bb, training, 0.25, 1e-5);
  BatchNormRun r;
  r.node = y.grad_fn() ? y.grad_fn()->name() : "";
  sum(y * u).backward();
  r.out = {y, xx.grad(), ww.defined() ? ww.grad() : Tensor(), bb.defined() ? bb.grad() : Tensor(),
           m, v};
  return r;
}

}  // namespace

TEST_CASE("cpu/fast: float32 softmax and log_softmax match the double reference") {
  ThreadsGuard guard;
  manual_seed(7);
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CAPTURE(threads);
    for (int64_t cols : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{33}, int64_t{256}}) {
      CAPTURE(cols);
      Tensor x = randn({300, cols}) * 4.0;
      for (bool log : {false, true}) {
        cpu::set_fast_paths(false);
        const Tensor want = log ? log_softmax(x, -1) : softmax(x, -1);
        cpu::set_fast_paths(true);
        const Tensor got = log ? log_softmax(x, -1) : softmax(x, -1);
        CHECK(rel_error(got, want) <= 1e-6);
        // backward, through autograd
        auto grad = [&](bool fast) {
          cpu::set_fast_paths(fast);
          Tensor xx = x.detach().requires_grad_();
          Tensor y = log ? log_softmax(xx, -1) : softmax(xx, -1);
          sum(y * y).backward();
          return xx.grad();
        };
        CHECK(rel_error(grad(true), grad(false)) <= 1e-5);
      }
    }
  }
  // -inf entries, a NaN row, an all -inf row: the reference's values
  cpu::set_fast_paths(true);
  const double inf = INFINITY, nan = NAN;
  Tensor x = tensor({{0.0, -inf, 1.0, -inf}, {1.0, nan, 2.0, 3.0}, {-inf, -inf, -inf, -inf}});
  const std::vector<double> y = softmax(x, -1).to_vector<double>();
  const double e = std::exp(1.0);
  CHECK(y[0] == doctest::Approx(1 / (1 + e)).epsilon(1e-6));
  CHECK(y[1] == 0.0);
  CHECK(y[2] == doctest::Approx(e / (1 + e)).epsilon(1e-6));
  CHECK(y[3] == 0.0);
  for (int i = 4; i < 12; ++i) CHECK(std::isnan(y[static_cast<size_t>(i)]));
}

TEST_CASE("cpu/fast: the fused float32 layer norm matches the composed reference") {
  ThreadsGuard guard;
  manual_seed(8);
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    CAPTURE(threads);
    for (int64_t cols : {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{300}}) {
      CAPTURE(cols);
      Tensor x = randn({257, cols}) * 3.0 + 2.0, w = randn({cols}), b = randn({cols});
      Tensor u = randn({257, cols});
      const std::vector<Tensor> got = layer_norm_run(true, x, w, b, u);
      const std::vector<Tensor> want = layer_norm_run(false, x, w, b, u);
      CHECK(rel_error(got[0], want[0]) <= 1e-6);
      if (cols > 1) CHECK(rel_error(got[1], want[1]) <= 1e-5);  // d_x is 0 at one column
      CHECK(rel_error(got[2], want[2]) <= 1e-5);
      CHECK(rel_error(got[3], want[3]) <= 1e-5);
      // the same bits again at this thread count
      const std::vector<Tensor> again = layer_norm_run(true, x, w, b, u);
      for (size_t i = 0; i < 4; ++i) CHECK(same_bits(again[i], got[i]));
    }
  }
  cpu::set_fast_paths(true);
  CHECK(layer_norm(zeros({0, 8}), {8}).numel() == 0);
}

TEST_CASE("cpu/fast: the fused float32 batch norm matches the composed reference") {
  ThreadsGuard guard;
  manual_seed(9);
  const std::vector<Shape> shapes = {
      {8, 3, 5, 5}, {64, 32, 8, 8}, {5, 7}, {2, 4, 1, 33}, {3, 2, 40}};
  for (const auto& shape : shapes) {
    const int64_t c = shape[1];
    CAPTURE(shape_str(shape));
    Tensor x = randn(shape) * 3.0 + 2.0, u = randn(shape);
    Tensor w = randn({c}), b = randn({c});
    Tensor rm = randn({c}), rv = rand({c}) + 0.5;
    for (bool training : {true, false}) {
      for (bool affine : {true, false}) {
        CAPTURE(training);
        CAPTURE(affine);
        const Tensor wa = affine ? w : Tensor(), ba = affine ? b : Tensor();
        set_num_threads(1);
        const BatchNormRun want = batch_norm_run(false, x, wa, ba, rm, rv, training, u);
        const BatchNormRun got = batch_norm_run(true, x, wa, ba, rm, rv, training, u);
        CHECK(got.node == "BatchNormBackward");
        CHECK(want.node != "BatchNormBackward");
        CHECK(rel_error(got.out[0], want.out[0]) <= 1e-6);  // y
        CHECK(rel_error(got.out[1], want.out[1]) <= 1e-5);  // d_x
        if (affine) {
          CHECK(rel_error(got.out[2], want.out[2]) <= 1e-5);  // d_w
          CHECK(rel_error(got.out[3], want.out[3]) <= 1e-5);  // d_b
        }
        CHECK(rel_error(got.out[4], want.out[4]) <= 1e-6);  // running mean
        CHECK(rel_error(got.out[5], want.out[5]) <= 1e-6);  // running var
        // Each channel is one thread's, whole: the same bits at every thread count.
        for (int threads : {2, 3}) {
          set_num_threads(threads);
          CAPTURE(threads);
          const BatchNormRun again = batch_norm_run(true, x, wa, ba, rm, rv, training, u);
          for (size_t i = 0; i < got.out.size(); ++i)
            if (got.out[i].defined()) CHECK(same_bits(again.out[i], got.out[i]));
        }
      }
    }
  }
  // Without running statistics (training only), and float64 composes.
  cpu::set_fast_paths(true);
  Tensor x = randn({6, 4, 3});
  const Tensor y = batch_norm(x.requires_grad_(), Tensor(), Tensor());
  CHECK(y.grad_fn()->name() == std::string("BatchNormBackward"));
  const Tensor mean_c = mean(mean(y.detach(), 2), 0);
  CHECK(mean_c.abs().max().item() < 1e-6);
  const Tensor y64 = batch_norm(randn({6, 4, 3}, kFloat64).requires_grad_(), Tensor(), Tensor());
  CHECK(y64.grad_fn()->name() != std::string("BatchNormBackward"));
}

TEST_CASE("cpu/fast: Adam updates give the same bits at 1, 2 and 3 threads") {
  ThreadsGuard guard;
  std::vector<std::vector<double>> results;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    manual_seed(9);
    Tensor p = randn({3 * cpu::kElementwiseGrain + 5}).requires_grad_();
    optim::Adam opt({p}, optim::AdamOptions(1e-2));
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      sum(p * p).backward();
      opt.step();
    }
    results.push_back(p.detach().to_vector<double>());
  }
  CHECK(results[1] == results[0]);
  CHECK(results[2] == results[0]);
}

TEST_CASE("cpu/parallel: sums over rows and columns give the same bits at 1, 2 and 3 threads") {
  ThreadsGuard guard;
  manual_seed(10);
  Tensor x = randn({700, 300});
  set_num_threads(1);
  const Tensor r1 = sum(x, 0), c1 = sum(x, 1), m1 = mean(x, 0);
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    CHECK(same_bits(sum(x, 0), r1));
    CHECK(same_bits(sum(x, 1), c1));
    CHECK(same_bits(mean(x, 0), m1));
  }
  // and the definition: column 17's sum in double, rounded once
  const std::vector<float> xs = x.to_vector<float>();
  double s = 0;
  for (int64_t r = 0; r < 700; ++r) s += xs[static_cast<size_t>(r * 300 + 17)];
  CHECK(r1.to_vector<float>()[17] == static_cast<float>(s));
}

TEST_CASE("cpu/fast: float32 GELU (both forms) and its derivative match the double reference") {
  ThreadsGuard guard;
  for (const char* form : {"none", "tanh"}) {
    CAPTURE(form);
    manual_seed(11);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      Tensor x = randn({3 * cpu::kElementwiseGrain + 3}) * 3.0;
      auto run = [&](bool fast, Tensor& grad) {
        cpu::set_fast_paths(fast);
        Tensor xx = x.detach().requires_grad_();
        Tensor y = gelu(xx, form);
        sum(y * y).backward();
        grad = xx.grad();
        return y;
      };
      Tensor g_fast, g_ref;
      const Tensor y_fast = run(true, g_fast), y_ref = run(false, g_ref);
      CHECK(rel_error(y_fast, y_ref) <= 1e-6);
      CHECK(rel_error(g_fast, g_ref) <= 1e-6);
    }
    // specials as the reference: inf, -inf (NaN: -inf * 0), NaN, far tails, zero
    const double inf = INFINITY, nan = NAN;
    Tensor s = tensor({inf, -inf, nan, -30.0, 30.0, 0.0, -0.0, 1e-30}, kFloat32);
    cpu::set_fast_paths(false);
    const std::vector<double> want = gelu(s, form).to_vector<double>();
    cpu::set_fast_paths(true);
    const std::vector<double> got = gelu(s, form).to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      if (std::isnan(want[i]))
        CHECK(std::isnan(got[i]));
      else if (std::isinf(want[i]))
        CHECK(got[i] == want[i]);
      else
        CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE(
    "cpu/fast: index_add and embedding's backward give the reference's bits at 1, 2, 3 threads") {
  ThreadsGuard guard;
  manual_seed(12);
  // Repeated indices (many source rows into few destination rows), as embedding's
  // backward over a small vocabulary; outer > 1 through index_add on dim 1.
  const Tensor idx = randint(0, 37, {600});
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dt);
    const Tensor w = randn({37, 96}).to(dt);
    auto embed_grad = [&](bool fast) {
      cpu::set_fast_paths(fast);
      Tensor ww = w.detach().requires_grad_();
      Tensor y = embedding(ww, idx.reshape({20, 30}));
      sum(y * y).backward();
      return ww.grad();
    };
    const Tensor x = randn({3, 37, 40}).to(dt), src = randn({3, 600, 40}).to(dt);
    auto added = [&](bool fast) {
      cpu::set_fast_paths(fast);
      return index_add(x, 1, idx, src);
    };
    set_num_threads(1);
    const Tensor want_e = embed_grad(false), want_a = added(false);
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      set_num_threads(threads);
      CHECK(same_bits(embed_grad(true), want_e));
      CHECK(same_bits(added(true), want_a));
    }
  }
  // padding_idx's row stays zero on the fast path; an empty index adds nothing
  cpu::set_fast_paths(true);
  set_num_threads(2);
  Tensor ww = randn({37, 8}).requires_grad_();
  sum(embedding(ww, idx, 5)).backward();
  CHECK(sum(abs(ww.grad().select(0, 5))).item() == 0.0);
  CHECK(same_bits(index_add(zeros({4, 3}), 0, zeros({0}, kInt64), zeros({0, 3})), zeros({4, 3})));
}

TEST_CASE("cpu/fast: the fused float32 cross-entropy matches the composed reference") {
  ThreadsGuard guard;
  manual_seed(13);
  for (int64_t classes : {int64_t{1}, int64_t{10}, int64_t{65}, int64_t{1000}}) {
    CAPTURE(classes);
    const int64_t rows = 517;
    const Tensor x = randn({rows, classes}) * 3.0;
    Tensor t = randint(0, classes, {rows});
    std::vector<double> tv = t.to_vector<double>();
    for (size_t r = 0; r < tv.size(); r += 7) tv[r] = -100;  // some ignored rows
    t = from_vector(tv, {rows}, kInt64);
    for (Reduction red : {Reduction::Mean, Reduction::Sum, Reduction::None})
      for (double ls : {0.0, 0.1}) {
        CAPTURE(static_cast<int>(red));
        CAPTURE(ls);
        const CrossEntropyOptions o(red, -100, ls);
        auto run = [&](bool fast, Tensor& grad) {
          cpu::set_fast_paths(fast);
          Tensor xx = x.detach().requires_grad_();
          Tensor l = cross_entropy(xx, t, o);
          // an incoming gradient that is not 1, to cover the scaling
          (red == Reduction::None ? sum(l * 0.5) : l * 3.0).backward();
          grad = xx.grad();
          return l;
        };
        set_num_threads(1);
        Tensor g_ref, g1;
        const Tensor l_ref = run(false, g_ref), l1 = run(true, g1);
        CHECK(rel_error(l1, l_ref) <= 1e-5);
        CHECK(rel_error(g1, g_ref) <= 1e-5);
        for (int threads : {2, 3}) {  // the same bits at every thread count
          CAPTURE(threads);
          set_num_threads(threads);
          Tensor g;
          const Tensor l = run(true, g);
          CHECK(same_bits(l, l1));
          CHECK(same_bits(g, g1));
        }
      }
  }
  cpu::set_fast_paths(true);
  // a target out of range names the op; every row ignored: Mean is NaN, as PyTorch
  CHECK_THROWS_WITH_AS(
      cross_entropy(zeros({2, 3}), from_vector(std::vector<double>{0, 3}, {2}, kInt64)),
      doctest::Contains("cross_entropy: target 3 is out of range [0, 3)"), ember::Error);
  const Tensor all_ignored = from_vector(std::vector<double>{-100, -100}, {2}, kInt64);
  CHECK(std::isnan(cross_entropy(zeros({2, 3}), all_ignored).item()));
  // a NaN row gives a NaN loss; the other rows' gradient is untouched
  const double nan = NAN;
  Tensor xn = tensor({{0.0, nan, 1.0}, {1.0, 2.0, 3.0}}, kFloat32).requires_grad_();
  Tensor ln = cross_entropy(xn, from_vector(std::vector<double>{0, 1}, {2}, kInt64),
                            CrossEntropyOptions(Reduction::None));
  CHECK(std::isnan(ln.to_vector<double>()[0]));
  CHECK(
      ln.to_vector<double>()[1] ==
      doctest::Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 2.0).epsilon(1e-6));
}

TEST_CASE(
    "cpu/parallel: strided copies (contiguous of a view) give each element at 1, 2, 3 threads") {
  ThreadsGuard guard;
  manual_seed(14);
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kInt64, kBool}) {
    CAPTURE(dt);
    const int64_t B = 16, T = 64, H = 4, D = 40;  // 163,840 elements: several chunks
    const Tensor x = (randn({B, T, H, D}) * 5.0).to(dt);
    const std::vector<double> xv = x.to(kFloat64).to_vector<double>();
    for (int threads : {1, 2, 3}) {
      CAPTURE(threads);
      set_num_threads(threads);
      // (B, T, H, D) -> (B, H, T, D), as attention's heads
      const std::vector<double> got =
          contiguous(transpose(x, 1, 2)).to(kFloat64).to_vector<double>();
      bool ok = got.size() == xv.size();
      for (int64_t b = 0; ok && b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = 0; t < T; ++t)
            for (int64_t d = 0; d < D; ++d)
              ok = ok && got[static_cast<size_t>(((b * H + h) * T + t) * D + d)] ==
                             xv[static_cast<size_t>(((b * T + t) * H + h) * D + d)];
      CHECK(ok);
      // the innermost dim strided: (B, T, D, H) from a transpose of the last two
      const std::vector<double> g2 =
          contiguous(transpose(x, 2, 3)).to(kFloat64).to_vector<double>();
      bool ok2 = true;
      for (int64_t i = 0; ok2 && i < B * T; ++i)
        for (int64_t d = 0; d < D; ++d)
          for (int64_t h = 0; h < H; ++h)
            ok2 = ok2 && g2[static_cast<size_t>((i * D + d) * H + h)] ==
                             xv[static_cast<size_t>((i * H + h) * D + d)];
      CHECK(ok2);
      // a broadcast source, and a strided destination (copy_ into a transposed view)
      const Tensor row = x.select(0, 0).select(0, 0);  // (H, D)
      const Tensor wide = contiguous(expand(unsqueeze(row, 0), {300, H, D}));
      CHECK(same_bits(wide.select(0, 299), row));
      Tensor dst = zeros({B, H, T, D}, dt);
      Tensor view = transpose(dst, 1, 2);
      copy_(view, x);
      CHECK(same_bits(transpose(dst, 1, 2), x));
    }
  }
}
