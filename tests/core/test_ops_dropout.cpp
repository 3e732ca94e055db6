// dropout (core/ops/dropout.cpp, kernel family dropout): the values against the
// documented mask (core/base/random.h's dropout_keeps at the generator's counters), the
// keep rate, the gradient, that nothing is saved for backward, the same bits at any
// thread count, bad input, and CUDA against the CPU (suite "cuda": skipped, not passed,
// without a GPU).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/autograd.h"
#include "core/base/random.h"
#include "core/ops.h"
#include "core/threads.h"
#include "error_text.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::dropout_mask;
using ember::testing::error_of;
using ember::testing::randn64;

namespace {

struct Threads {
  int saved = get_num_threads();
  ~Threads() { set_num_threads(saved); }
};

}  // namespace

TEST_CASE("dropout: x / (1 - p) where the documented counters keep, 0 elsewhere") {
  const double p = 0.3;
  const Tensor x = randn64({5, 7}, 3);
  Generator g(11);
  g.set_offset(40);
  const Tensor y = dropout(x, p, true, &g);
  CHECK(g.offset() == 40 + 35);
  const std::vector<double> m = dropout_mask(11, 40, 35, p), xv = x.to_vector<double>(),
                            yv = y.to_vector<double>();
  int kept = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    CHECK(yv[i] == (m[i] != 0.0 ? xv[i] * (1.0 / (1.0 - p)) : 0.0));
    kept += m[i] != 0.0;
  }
  CHECK(kept > 0);  // both kinds occur: the comparison can fail either way
  CHECK(kept < 35);
  // A non-contiguous input: its elements in row-major order take the counters.
  Generator g2(11);
  g2.set_offset(40);
  const Tensor xt = transpose(x, 0, 1);
  const Tensor yt = dropout(xt, p, true, &g2);
  const std::vector<double> xtv = contiguous(xt).to_vector<double>(), ytv = yt.to_vector<double>();
  for (size_t i = 0; i < m.size(); ++i)
    CHECK(ytv[i] == (m[i] != 0.0 ? xtv[i] * (1.0 / (1.0 - p)) : 0.0));
  // The next call draws the next counters: another mask.
  CHECK(dropout(x, p, true, &g).to_vector<double>() != yv);
}

TEST_CASE("dropout: keeps 1 - p of a large tensor, float32 and bfloat16 scaled once") {
  const int64_t n = 200000;
  for (double p : {0.1, 0.5, 0.9}) {
    CAPTURE(p);
    Generator g(5);
    const Tensor y = dropout(ones({n}), p, true, &g);
    const std::vector<double> v = y.to_vector<double>();
    double kept = 0;
    for (double e : v) kept += e != 0.0;
    // Binomial: the standard deviation of the fraction is below 0.0012 here.
    CHECK(std::fabs(kept / n - (1.0 - p)) < 0.006);
  }
  // bfloat16: float(x) * float(1 / (1 - p)), rounded once to bfloat16.
  const Tensor x = randn64({4096}, 9).to(kBFloat16);
  Generator g(6);
  const Tensor y = dropout(x, 0.1, true, &g);
  CHECK(y.dtype() == kBFloat16);
  const std::vector<double> m = dropout_mask(6, 0, 4096, 0.1), xv = x.to_vector<double>(),
                            yv = y.to_vector<double>();
  const float scale = static_cast<float>(1.0 / 0.9);
  for (size_t i = 0; i < m.size(); ++i) {
    const float want = m[i] != 0.0 ? static_cast<float>(xv[i]) * scale : 0.0f;
    CHECK(yv[i] == static_cast<double>(static_cast<float>(BFloat16(want))));
  }
}

TEST_CASE("dropout_keeps: independent neighbours, strides, seeds and high words") {
  // p = 0.5 over 2^20 counters: each agreement rate below is 0.5 (both kept: 0.25) for
  // independent bits; its binomial standard deviation is under 0.0005, the bounds 0.005.
  // A weak mixer fails here: counters one apart, a row apart (256: a GPT's attention
  // weights), 2^32 apart (the high word), or two seeds giving related bits.
  const uint32_t t = dropout_threshold(0.5);
  const int64_t n = int64_t{1} << 20;
  const uint64_t base = 0xFFF00000ull;  // runs across the 2^32 boundary
  int64_t kept = 0, both_next = 0, both_row = 0, same_high = 0, same_seed = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t c = base + static_cast<uint64_t>(i);
    const bool k = dropout_keeps(7, c, t);
    kept += k;
    both_next += k && dropout_keeps(7, c + 1, t);
    both_row += k && dropout_keeps(7, c + 256, t);
    same_high += k == dropout_keeps(7, c + (uint64_t{1} << 32), t);
    same_seed += k == dropout_keeps(8, c, t);
  }
  const double dn = static_cast<double>(n);
  CHECK(std::fabs(static_cast<double>(kept) / dn - 0.5) < 0.005);
  CHECK(std::fabs(static_cast<double>(both_next) / dn - 0.25) < 0.005);
  CHECK(std::fabs(static_cast<double>(both_row) / dn - 0.25) < 0.005);
  CHECK(std::fabs(static_cast<double>(same_high) / dn - 0.5) < 0.005);
  CHECK(std::fabs(static_cast<double>(same_seed) / dn - 0.5) < 0.005);
  // The threshold's edges: p = 0 keeps every counter (threshold 0: any bits are at or
  // above it), p near 1 almost none.
  CHECK(dropout_threshold(0.0) == 0u);
  int64_t rare = 0;
  for (uint64_t c = 0; c < 100000; ++c) rare += dropout_keeps(7, c, dropout_threshold(0.999));
  CHECK(rare > 50);
  CHECK(rare < 150);
}

TEST_CASE("dropout: the gradient is the same mask and scale; nothing is saved") {
  const double p = 0.4;
  Tensor x = randn64({6, 9}, 21);
  x.set_requires_grad(true);
  const Tensor w = randn64({6, 9}, 22);
  Generator g(13);
  Tensor h = mul(x, 1.0);  // a non-leaf the test modifies in place before backward
  Tensor y = dropout(h, p, true, &g);
  CHECK(y.grad_fn() != nullptr);
  // The dropout saves no tensor, so changing its input in place leaves its backward
  // valid (a saved input would make the backward refuse).
  {
    NoGradGuard no_grad;
    h.add_(Scalar(1.0));
  }
  sum(mul(y, w)).backward();
  const std::vector<double> m = dropout_mask(13, 0, 54, p), wv = w.to_vector<double>(),
                            gv = x.grad().to_vector<double>();
  for (size_t i = 0; i < m.size(); ++i) CHECK(gv[i] == m[i] * wv[i] * (1.0 / (1.0 - p)));
  // Against finite differences (float64), a fresh generator per call: the same mask.
  CHECK_GRADCHECK(
      [](const std::vector<Tensor>& in) {
        Generator gen(17);
        return dropout(in[0], 0.25, true, &gen);
      },
      {randn64({3, 5}, 23)});
}

TEST_CASE("dropout: the same bits at 1, 2 and 3 threads") {
  Threads restore;
  const Tensor x = randn64({300000}, 31).to(kFloat32);
  std::vector<double> first;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    Generator g(8);
    const std::vector<double> v = dropout(x, 0.2, true, &g).to_vector<double>();
    if (first.empty())
      first = v;
    else
      CHECK(v == first);
  }
}

TEST_CASE("dropout: p = 0 and eval return x, p = 1 zeros, none drawing; bad input named") {
  const Tensor x = randn64({4}, 1);
  Generator g(3);
  CHECK(dropout(x, 0.0, true, &g).is_same(x));
  CHECK(dropout(x, 0.5, false, &g).is_same(x));
  CHECK(dropout(x, 1.0, true, &g).to_vector<double>() == std::vector<double>(4, 0.0));
  CHECK(g.offset() == 0);
  CHECK(contains(error_of([&] { (void)dropout(x, 1.5, true, &g); }),
                 "dropout: probability must be in [0, 1], got 1.5"));
  CHECK(contains(error_of([&] { (void)dropout(x, -0.1, true, &g); }),
                 "dropout: probability must be in [0, 1], got -0.1"));
  CHECK(contains(error_of([&] { (void)dropout(ones({3}, kInt64), 0.5, true, &g); }),
                 "dropout: takes float32, float64 or bfloat16, got int64"));
  CHECK(contains(error_of([&] { (void)dropout(Tensor(), 0.5, true, &g); }), "dropout"));
  CHECK(g.offset() == 0);  // refused calls draw nothing
}

TEST_CASE("dropout on CUDA: the CPU's values and gradients, bit for bit" *
          doctest::test_suite("cuda")) {
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dt);
    // 37037 elements: whole 16-byte packs and a tail for the vector kernel (float32 and
    // bfloat16; float64 takes the strided one).
    const Tensor x0 = randn64({1001, 37}, 41).to(dt);
    const Tensor w = randn64({1001, 37}, 42).to(dt);
    std::vector<std::vector<double>> out;
    for (Device d : {kCPU, kCUDA}) {
      Tensor x = x0.to(d).detach();
      x.set_requires_grad(true);
      Generator g(99);
      g.set_offset(123);
      Tensor y = dropout(x, 0.35, true, &g);
      sum(mul(y, w.to(d))).backward();
      out.push_back(y.to(kCPU).to_vector<double>());
      out.push_back(x.grad().to(kCPU).to_vector<double>());
    }
    CHECK(out[2] == out[0]);
    CHECK(out[3] == out[1]);
  }
}
