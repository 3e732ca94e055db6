// Bad input to tensors and ops that the per-op suites do not already cover:
// sizes whose element count or byte count overflows, views whose arithmetic
// would overflow, empty tensors, non-contiguous views, devices that do not
// exist, and anomaly mode (NaN/Inf) naming the first op that produced one. Each
// failure is an ember::Error naming the problem, and leaves nothing changed
// (inputs, graph, the allocator's statistics).
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "core/anomaly.h"
#include "core/autograd.h"
#include "core/base/env_switch.h"
#include "core/memory.h"
#include "core/ops.h"
#include "cuda/runtime.h"
#include "error_text.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

using V = std::vector<double>;
constexpr int64_t kBig = int64_t{1} << 40;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// The host allocator's counters that a failed op must leave as they were.
struct HostCounters {
  int64_t allocated = memory_allocated(kCPU);
  int64_t reserved = memory_reserved(kCPU);
  bool operator==(const HostCounters&) const = default;
};

}  // namespace

TEST_CASE("bad input/sizes: element and byte counts that overflow are refused") {
  const HostCounters before;
  CHECK(contains(error_of([] {
                   empty({kBig, kBig});
                 }),
                 "empty: shape [1099511627776, 1099511627776] has more elements than int64"));
  // The factory the user called names itself (zeros is full(0) inside).
  CHECK(contains(error_of([] { zeros({kMax, 2}); }), "zeros: shape [9223372036854775807, 2]"));
  CHECK(contains(error_of([] { ones({-1, 2}); }), "ones: negative size -1 in shape [-1, 2]"));
  CHECK(contains(error_of([] { zeros_like(Tensor()); }), "zeros_like: the tensor to copy"));
  CHECK(contains(error_of([] {
                   zeros({2, 3}).reshape({4, -1});
                 }),
                 "reshape: shape [4, -1] is invalid for input of shape [2, 3] (6 elements)"));
  CHECK(contains(error_of([] {
                   zeros({2, 3}).t().reshape({5});
                 }),
                 "reshape: shape [5] is invalid"));
  CHECK(contains(error_of([] { Tensor().flatten(); }), "flatten: input is an undefined tensor"));
  // 2^61 float64 elements fit int64 but their 2^64 bytes do not fit size_t.
  CHECK(contains(error_of([] { empty({int64_t{1} << 61}, kFloat64); }),
                 "empty: shape [2305843009213693952] of float64 needs more bytes than size_t"));
  CHECK(contains(error_of([] { rand({kBig, kBig}); }), "rand: shape"));
  CHECK(contains(error_of([] { arange(0, 1e300); }), "arange: [0, 1e+300) in steps of 1 has"));
  // No elements, however large the other sizes: allowed, and its strides do not
  // overflow (found by fuzz_checkpoint; its input is kept in tests/fuzz/corpus).
  Tensor none = empty({0, int64_t{1} << 50, int64_t{1} << 56});
  CHECK(none.numel() == 0);
  CHECK(none.nbytes() == 0);
  CHECK(none.is_contiguous());
  CHECK(none.contiguous().sizes() == none.sizes());
  CHECK(HostCounters{} == before);
}

TEST_CASE("bad input/views: view, expand and slice arithmetic cannot overflow") {
  Tensor e = zeros({0});
  // 2^32 * 2^32 wraps to 0 in int64: it must not pass as a view of 0 elements.
  CHECK(contains(error_of([&] {
                   e.view({int64_t{1} << 32, int64_t{1} << 32});
                 }),
                 "view: shape [4294967296, 4294967296] has more elements than int64"));
  Tensor one = ones({1});
  CHECK(contains(error_of([&] { one.expand({-5}); }), "expand: invalid size -5"));
  CHECK(contains(error_of([&] {
                   one.expand({kBig, kBig});
                 }),
                 "expand: shape [1099511627776, 1099511627776] has more elements"));
  // A huge step gives one element, and the stride stays as it was.
  Tensor a = arange(5, kFloat64);
  Tensor s = a.slice(0, 0, 5, kMax);
  CHECK(s.sizes() == Shape{1});
  CHECK(s.to_vector<double>() == V{0});
  CHECK(a.slice(0, 1, 5, kMax - 1).to_vector<double>() == V{1});
  CHECK(a.slice(0, std::numeric_limits<int64_t>::min(), kMax, 2).to_vector<double>() == V{0, 2, 4});
  CHECK(a.slice(0, 3, 2).numel() == 0);
}

TEST_CASE("bad input/empty tensors: ops on zero elements give empty or defined results") {
  Tensor x = zeros({0, 3}, TensorOptions(kFloat64).requires_grad());
  Tensor w = ones({2, 3}, TensorOptions(kFloat64).requires_grad());
  Tensor y = linear(x, w, ones({2}, kFloat64));
  CHECK(y.sizes() == Shape{0, 2});
  y.sum().backward();
  CHECK(x.grad().sizes() == Shape{0, 3});
  CHECK(w.grad().to_vector<double>() == V(6, 0.0));  // no rows: no gradient
  CHECK(sum(zeros({0})).item() == 0.0);
  CHECK(std::isnan(mean(zeros({0})).item()));  // as PyTorch: mean of nothing is NaN
  CHECK(matmul(zeros({2, 0}), zeros({0, 3})).to_vector<double>() == V(6, 0.0));
  CHECK((zeros({0, 3}) + ones({3})).sizes() == Shape{0, 3});
  CHECK(cat({zeros({0, 2}), ones({1, 2})}).to_vector<double>() == V{1, 1});
  CHECK(zeros({0}).contiguous().numel() == 0);
  CHECK(contains(error_of([] { zeros({0}).item(); }), "item: tensor has 0 elements"));
}

TEST_CASE("bad input/non-contiguous views: every op reads strides, results equal a copy's") {
  Generator gen(7);
  Tensor base = randn({4, 6}, kFloat64, &gen);
  Tensor t = base.t();                 // (6, 4), strides (1, 6)
  Tensor sl = base.slice(1, 0, 6, 2);  // (4, 3), strides (6, 2)
  REQUIRE(!t.is_contiguous());
  REQUIRE(!sl.is_contiguous());
  const Tensor tc = t.contiguous(), slc = sl.contiguous();
  CHECK((t * 2.0 + t).to_vector<double>() == (tc * 2.0 + tc).to_vector<double>());
  CHECK(exp(sl).to_vector<double>() == exp(slc).to_vector<double>());
  CHECK(sum(t, 0).to_vector<double>() == sum(tc, 0).to_vector<double>());
  CHECK(max(sl, 1).values.to_vector<double>() == max(slc, 1).values.to_vector<double>());
  CHECK(matmul(t, sl).to_vector<double>() == matmul(tc, slc).to_vector<double>());
  Tensor w = randn({5, 4}, kFloat64, &gen);
  CHECK(linear(t, w).to_vector<double>() == linear(tc, w).to_vector<double>());
  CHECK(linear(tc, w.t().t()).to_vector<double>() == linear(tc, w).to_vector<double>());
  CHECK(mse_loss(sl, slc * 0.5).item() == mse_loss(slc, slc * 0.5).item());
  CHECK(t.reshape({24}).to_vector<double>() == tc.reshape({24}).to_vector<double>());
  CHECK(contains(error_of([&] { t.view({24}); }), "view: input of shape [6, 4]"));
  // In place through a strided view writes only the viewed elements.
  Tensor z = zeros({2, 4}, kFloat64);
  Tensor cols = z.slice(1, 1, 4, 2);
  cols.fill_(1.0);
  CHECK(z.to_vector<double>() == V{0, 1, 0, 1, 0, 1, 0, 1});
}

TEST_CASE("bad input/devices: a CUDA device that does not exist is an error, nothing allocated") {
  // One past the last device: cuda:0 on a machine without a GPU, cuda:N with N GPUs.
  const int n = cuda::device_count();
  const Device missing = Device::cuda(n);
  const std::string index = "cuda: device index " + std::to_string(n) + " is not available";
  Tensor a = ones({2});
  const HostCounters before;
  const std::string msg = error_of([&] { zeros({2}, missing); });
  CHECK(contains(msg, index + " (this machine has " + std::to_string(n) + " CUDA device" +
                          (n == 1 ? "" : "s") + ")"));
  CHECK(contains(error_of([&] { a.to(missing); }), index));
  CHECK(HostCounters{} == before);
  CHECK(a.to_vector<double>() == V{1, 1});
}

TEST_CASE("bad input/failed ops change nothing: inputs, versions, graph, allocator") {
  Tensor a = ones({2, 3}, TensorOptions().requires_grad());
  Tensor b = ones({3, 3}), c = ones({2, 2}), w = ones({4, 5}), t = ones({3, 2});
  Tensor i = ones({2}, kInt64), bf = ones({2, 3}, kBFloat16);
  const uint64_t version = a.version();
  const HostCounters before;  // every operand exists: a failed op allocates nothing
  CHECK(contains(error_of([&] { a + b; }), "add: shapes [2, 3] and [3, 3]"));
  CHECK(contains(error_of([&] { matmul(a, c); }), "matmul"));
  CHECK(contains(error_of([&] { linear(a, w); }), "linear: input has 3 features"));
  CHECK(contains(error_of([&] { mse_loss(a, t); }), "mse_loss: prediction of shape"));
  CHECK(contains(error_of([&] { sum(a, 2); }), "sum: dim 2 is out of range"));
  CHECK(
      contains(error_of([&] { cross_entropy(a, bf); }), "cross_entropy: target must be an int64"));
  CHECK(contains(error_of([&] { cross_entropy(b, i); }),
                 "cross_entropy: logits of shape [3, 3] and target of shape [2] have different "
                 "batch sizes (3 and 2)"));
  CHECK(contains(error_of([&] { where(a, a, a); }), "where: the condition must be a bool tensor"));
  CHECK(contains(error_of([&] { layer_norm(a, {2}); }),
                 "layer_norm: normalized_shape [2] does not "
                 "match the trailing dims of the input of shape [2, 3]"));
  CHECK(HostCounters{} == before);
  CHECK(a.version() == version);
  CHECK(!a.grad().defined());
  CHECK(a.to_vector<double>() == V(6, 1.0));
  // In-place: a broadcast that does not fit leaves the destination untouched.
  Tensor d = zeros({2, 3}), four = ones({4});
  const uint64_t d_version = d.version();
  CHECK(
      contains(error_of([&] { d.add_(four); }), "add_: shapes [2, 3] and [4] cannot be broadcast"));
  CHECK(d.to_vector<double>() == V(6, 0.0));
  CHECK(d.version() == d_version);
}

TEST_CASE("anomaly/forward: the first op to produce NaN or Inf is named") {
  Tensor x = tensor({1.0, -1.0, 4.0}, TensorOptions(kFloat64).requires_grad());
  CHECK(!is_anomaly_enabled());
  {
    // Off (the default): NaN flows silently, as in PyTorch.
    Tensor y = sqrt(x);
    CHECK(std::isnan(y.to_vector<double>()[1]));
  }
  DetectAnomalyGuard guard;
  CHECK(is_anomaly_enabled());
  const std::string msg = error_of([&] { (x * 2.0).sqrt().sum(); });
  CHECK(contains(msg, "anomaly detected: forward of Sqrt (grad_fn SqrtBackward) produced NaN"));
  CHECK(contains(msg, "from finite inputs"));
  CHECK(contains(error_of([&] { log(x - 1.0); }), "forward of Log (grad_fn LogBackward)"));
  CHECK(contains(error_of([&] { log(x - 1.0); }), "NaN and Inf"));  // log(0), log(-2)
  CHECK(contains(error_of([&] { x / (x - 1.0); }),
                 "forward of Div (grad_fn DivBackward) "
                 "produced Inf"));
  // Data that arrives with NaN is blamed on the data, at the first op that sees it.
  Tensor bad = tensor({1.0, std::nan(""), 0.0}, kFloat64);
  const std::string data_msg = error_of([&] { mse_loss(x, bad); });
  CHECK(contains(data_msg, "forward of MseLoss"));
  CHECK(contains(data_msg, "its input 1 already held NaN"));
  // Finite work passes, and ops outside autograd are not checked.
  CHECK((x * 2.0).sum().item() == 8.0);
  NoGradGuard no_grad;
  CHECK(std::isnan(sqrt(x).to_vector<double>()[1]));
}

TEST_CASE("anomaly/backward: the node returning a NaN or Inf gradient is named") {
  DetectAnomalyGuard guard;
  // sqrt(0) is fine forward (0), its gradient 1 / (2 sqrt(0)) is Inf.
  Tensor x = tensor({0.0, 1.0}, TensorOptions(kFloat64).requires_grad());
  Tensor y = sqrt(x).sum();
  const std::string msg = error_of([&] { y.backward(); });
  CHECK(contains(msg, "anomaly detected: backward of SqrtBackward returned Inf"));
  CHECK(contains(msg, "input 0 of shape [2]"));
  CHECK(!x.grad().defined());  // the leaf never received the bad gradient
  // Without anomaly mode the same backward completes with Inf in the gradient.
  set_detect_anomaly(false);
  Tensor x2 = tensor({0.0, 1.0}, TensorOptions(kFloat64).requires_grad());
  sqrt(x2).sum().backward();
  CHECK(std::isinf(x2.grad().to_vector<double>()[0]));
}

TEST_CASE("anomaly/guard: nests and restores; all_finite on every dtype") {
  CHECK(!is_anomaly_enabled());
  {
    DetectAnomalyGuard on;
    {
      DetectAnomalyGuard off(false);
      CHECK(!is_anomaly_enabled());
    }
    CHECK(is_anomaly_enabled());
  }
  CHECK(!is_anomaly_enabled());
  CHECK(all_finite(tensor({1.0, 2.0})));
  CHECK(!all_finite(tensor({1.0, INFINITY})));
  CHECK(!all_finite(tensor({1.0, NAN}).to(kBFloat16)));
  CHECK(all_finite(arange(3, kInt64)));
  CHECK(all_finite(zeros({0})));
  CHECK(!all_finite(tensor({{1.0, NAN}, {2.0, 3.0}}).t()));
}

TEST_CASE("base/env_setting: unset gives the fallback, a digit in range its value, else an error") {
  constexpr const char* kVar = "EMBER_TEST_ENV_SETTING";
  auto read = [&](const char* value, int fallback, int max) {
    if (value != nullptr)
      setenv(kVar, value, 1);
    else
      unsetenv(kVar);
    std::atomic<int> state{-1};
    return env_setting(state, kVar, fallback, max);
  };
  CHECK(read(nullptr, 3, 6) == 3);
  CHECK(read("", 2, 6) == 2);
  CHECK(read("0", 3, 6) == 0);
  CHECK(read("6", 0, 6) == 6);
  CHECK(contains(error_of([&] { read("7", 0, 6); }),
                 "EMBER_TEST_ENV_SETTING must be one of 0 to 6, got \"7\""));
  CHECK(contains(error_of([&] { read("12", 0, 9); }), "got \"12\""));
  CHECK(contains(error_of([&] { read("x", 0, 6); }), "got \"x\""));
  // The on/off form: 0 or 1 only, with its own message.
  std::atomic<int> on{-1};
  setenv(kVar, "1", 1);
  CHECK(env_switch(on, kVar, false));
  std::atomic<int> bad{-1};
  setenv(kVar, "2", 1);
  CHECK(contains(error_of([&] { env_switch(bad, kVar, false); }),
                 "EMBER_TEST_ENV_SETTING must be 0 or 1, got \"2\""));
  // Read once: a later change of the variable does not move a setting already read.
  setenv(kVar, "0", 1);
  CHECK(env_switch(on, kVar, false));
  // A value stored before the first read wins over the environment.
  std::atomic<int> stored{4};
  CHECK(env_setting(stored, kVar, 0, 6) == 4);
  unsetenv(kVar);
}
