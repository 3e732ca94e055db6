// The fused cross-entropy kernel (cuda/kernels/cross_entropy.cu) through
// cross_entropy: loss and gradient against the CPU float64 reference (the
// composed log_softmax + nll_loss) on fresh random inputs at ragged class counts,
// from one small block to rows split over a cluster of 8 blocks (131072
// classes), float32 and bfloat16, every reduction, ignore_index and label
// smoothing; every block shape of the row kernel; misaligned rows; identical
// bits from run to run; a retained graph; the composed path on CUDA; a bad
// target raised at the next synchronisation; and linear_cross_entropy's chunks.
//
// Tolerances (DESIGN.md): float32 1e-5, as GEMM's, since each value comes out of a
// float reduction over the row (up to 131072 terms); bfloat16 1e-2.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/cross_entropy.h"
#include "cuda/runtime.h"
#include "error_text.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

double tol(DType t) {
  return t == kFloat32 ? 1e-5 : 1e-2;
}

// Class targets in [0, classes), rows 4, 9, 14, ... ignore_index (so that every
// batch keeps a row that counts).
Tensor random_targets(int64_t rows, int64_t classes, int64_t ignore, uint64_t seed) {
  Generator g(seed);
  Tensor t = randint(0, classes, {rows}, kInt64, &g);
  std::vector<int64_t> v = t.to_vector<int64_t>();
  for (size_t i = 4; i < v.size(); i += 5) v[i] = ignore;
  std::vector<double> d(v.begin(), v.end());
  return from_vector(d, {rows}, kInt64);
}

struct Errors {
  double loss = 0, grad = 0;
};

// cross_entropy on CUDA in dtype against CPU float64 on the same rounded logits;
// the backward's incoming gradient is random (per row for None).
Errors ce_vs_cpu(int64_t rows, int64_t classes, DType dtype, const CrossEntropyOptions& o,
                 uint64_t seed, int64_t offset = 0) {
  Tensor base = randn64({rows * classes + offset}, seed).mul(3.0).to(dtype).to(kFloat64);
  Tensor x_cpu = base.slice(0, offset, offset + rows * classes)
                     .reshape({rows, classes})
                     .detach()
                     .set_requires_grad(true);
  Tensor x_gpu = base.to(kCUDA, dtype)
                     .slice(0, offset, offset + rows * classes)
                     .reshape({rows, classes})
                     .detach()
                     .set_requires_grad(true);
  Tensor t = random_targets(rows, classes, o.ignore_index(), seed + 1);
  Tensor l_cpu = cross_entropy(x_cpu, t, o);
  Tensor l_gpu = cross_entropy(x_gpu, t.to(kCUDA), o);
  Tensor w = o.reduction() == Reduction::None ? randn64({rows}, seed + 2).to(dtype).to(kFloat64)
                                              : full({}, 0.75, kFloat64);
  l_cpu.backward(w);
  l_gpu.backward(w.to(kCUDA, dtype));
  Errors e;
  e.loss = rel_error(l_gpu.to(kCPU).to(kFloat64), l_cpu);
  e.grad = rel_error(x_gpu.grad().to(kCPU).to(kFloat64), x_cpu.grad());
  return e;
}

template <typename T>
std::vector<unsigned char> bytes_of(const Tensor& t) {
  std::vector<T> v = t.to(kCPU).contiguous().template to_vector<T>();
  std::vector<unsigned char> out(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());
  return out;
}

}  // namespace

TEST_CASE("kernels/cross_entropy: loss and gradient match the CPU from 1 to 131072 classes" *
          doctest::test_suite("cuda")) {
  // (rows, classes): one small block, one 256-thread block, one 1024-thread block,
  // and clusters of 2, 3 (ragged: the scalar path) and 8 blocks.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1},    {7, 3},     {33, 1000}, {9, 1024},  {8, 1025},  {5, 4096},
      {3, 4097}, {4, 16384}, {3, 16385}, {2, 32768}, {2, 40001}, {2, 131072}};
  uint64_t seed = 1;
  for (auto [rows, classes] : shapes)
    for (DType dtype : {kFloat32, kBFloat16})
      for (Reduction r : {Reduction::Mean, Reduction::Sum, Reduction::None})
        for (double ls : {0.0, 0.1}) {
          INFO("rows=", rows, " classes=", classes, " dtype=", dtype,
               " reduction=", static_cast<int>(r), " ls=", ls);
          const Errors e =
              ce_vs_cpu(rows, classes, dtype, CrossEntropyOptions(r, -100, ls), seed++);
          CHECK(e.loss <= tol(dtype));
          CHECK(e.grad <= tol(dtype));
        }
}

TEST_CASE("kernels/cross_entropy: misaligned rows, a custom ignore_index, an incoming gradient" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    INFO(dtype);
    const Errors a = ce_vs_cpu(6, 4096, dtype, CrossEntropyOptions(), 40, /*offset=*/1);
    CHECK(a.loss <= tol(dtype));
    CHECK(a.grad <= tol(dtype));
    const Errors b = ce_vs_cpu(6, 999, dtype, CrossEntropyOptions(Reduction::Mean, 3, 0.2), 41);
    CHECK(b.loss <= tol(dtype));
    CHECK(b.grad <= tol(dtype));
  }
}

TEST_CASE("kernels/cross_entropy: every block shape of the row kernel agrees with the CPU" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    INFO(dtype);
    const int64_t rows = 6, classes = 32768;
    Tensor x = randn64({rows, classes}, 50).to(kCUDA, dtype);
    Tensor t = random_targets(rows, classes, -100, 51).to(kCUDA);
    Tensor ws = empty({static_cast<int64_t>(cuda::cross_entropy_workspace_bytes(rows) / 8 + 1)},
                      TensorOptions(kFloat64).device(kCUDA));
    Tensor x_ref = x.to(kCPU).to(kFloat64).detach().set_requires_grad(true);
    Tensor ref = cross_entropy(x_ref, t.to(kCPU), CrossEntropyOptions(Reduction::Mean, -100, 0.05));
    ref.backward();
    for (auto shape : {cuda::CrossEntropyShape::Auto, cuda::CrossEntropyShape::T512x16,
                       cuda::CrossEntropyShape::T1024x16, cuda::CrossEntropyShape::T512x32,
                       cuda::CrossEntropyShape::Stream}) {
      INFO("shape=", static_cast<int>(shape));
      Tensor d = empty({rows, classes}, TensorOptions(dtype).device(kCUDA));
      Tensor loss = empty({}, TensorOptions(dtype).device(kCUDA));
      cuda::launch_cross_entropy(dtype, "cross_entropy", x.raw_data(), t.data_ptr<int64_t>(),
                                 d.raw_data(), loss.raw_data(), rows, classes, -100, 0.05,
                                 Reduction::Mean, ws.raw_data(), cuda::current_stream(0), shape);
      CHECK(rel_error(loss.to(kCPU).to(kFloat64), ref) <= tol(dtype));
      CHECK(rel_error(d.to(kCPU).to(kFloat64), x_ref.grad()) <= tol(dtype));
    }
  }
  // A forced shape whose cluster cannot hold the row is refused.
  Tensor x = zeros({1, 70000}, TensorOptions(kFloat32).device(kCUDA));
  Tensor t = zeros({1}, TensorOptions(kInt64).device(kCUDA));
  Tensor ws = empty({4}, TensorOptions(kFloat64).device(kCUDA));
  Tensor loss = empty({}, TensorOptions(kFloat32).device(kCUDA));
  CHECK(contains(error_of([&] {
                   cuda::launch_cross_entropy(
                       kFloat32, "cross_entropy", x.raw_data(), t.data_ptr<int64_t>(), nullptr,
                       loss.raw_data(), 1, 70000, -100, 0.0, Reduction::Mean, ws.raw_data(),
                       cuda::current_stream(0), cuda::CrossEntropyShape::T512x16);
                 }),
                 "70000 classes do not fit a cluster of 8 blocks of 8192"));
}

// The streamed kernel (CrossEntropyShape::Stream: a block per row, the row read twice)
// forced at every row length, against the CPU in float64: one vector, ragged rows (the
// scalar path), more vectors than a block's unrolled step (512 threads x 4), GPT-2's
// 50,304 classes and the longest supported row; rows whose first half is masked (-inf
// logits: no exp, a zero gradient there), a row masked but for its target, ignored rows
// and label smoothing. Then Auto with the switch off and on, past 8192 classes (T512x32
// against Stream), both against the CPU.
TEST_CASE("kernels/cross_entropy: streamed rows agree with the CPU at any length" *
          doctest::test_suite("cuda")) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {3, 8}, {7, 3}, {33, 1000}, {3, 4097}, {5, 16384}, {3, 16385}, {4, 50304}, {2, 131072}};
  uint64_t seed = 300;
  for (DType dtype : {kFloat32, kBFloat16})
    for (auto [rows, classes] : shapes)
      for (bool masked : {false, true}) {
        const double ls = masked ? 0.0 : 0.1;  // a masked row's mean of x is -inf
        INFO("dtype=", dtype, " rows=", rows, " classes=", classes, " masked=", masked);
        Tensor x64 = randn64({rows, classes}, seed++).mul(3.0).to(dtype).to(kFloat64);
        Tensor t = random_targets(rows, classes, -100, seed++);
        if (masked) {
          // The first half of every row -inf, the targets in the second; row 0 masked
          // everywhere but its target.
          std::vector<int64_t> tv = t.to_vector<int64_t>();
          for (int64_t& target : tv)
            if (target >= 0) target = classes / 2 + target % (classes - classes / 2);
          t = from_vector(std::vector<double>(tv.begin(), tv.end()), {rows}, kInt64);
          std::vector<double> v = x64.to_vector<double>();
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < classes; ++c)
              if (c < classes / 2 || (r == 0 && c != tv[0]))
                v[static_cast<size_t>(r * classes + c)] = -INFINITY;
          x64 = from_vector(v, {rows, classes}, kFloat64);
        }
        Tensor x_ref = x64.detach().set_requires_grad(true);
        Tensor ref = cross_entropy(x_ref, t, CrossEntropyOptions(Reduction::Mean, -100, ls));
        ref.backward();
        Tensor x = x64.to(kCUDA, dtype);
        Tensor ws = empty({static_cast<int64_t>(cuda::cross_entropy_workspace_bytes(rows) / 8 + 1)},
                          TensorOptions(kFloat64).device(kCUDA));
        Tensor d = empty({rows, classes}, TensorOptions(dtype).device(kCUDA));
        Tensor loss = empty({}, TensorOptions(dtype).device(kCUDA));
        const Tensor tg = t.to(kCUDA);
        cuda::launch_cross_entropy(dtype, "cross_entropy", x.raw_data(), tg.data_ptr<int64_t>(),
                                   d.raw_data(), loss.raw_data(), rows, classes, -100, ls,
                                   Reduction::Mean, ws.raw_data(), cuda::current_stream(0),
                                   cuda::CrossEntropyShape::Stream);
        CHECK(rel_error(loss.to(kCPU).to(kFloat64), ref) <= tol(dtype));
        const Tensor got = d.to(kCPU).to(kFloat64);
        CHECK(rel_error(got, x_ref.grad()) <= tol(dtype));
        if (masked) {  // exactly zero where masked
          const std::vector<double> g = got.to_vector<double>();
          bool zero = true;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < classes / 2; ++c)
              zero = zero && g[static_cast<size_t>(r * classes + c)] == 0.0;
          CHECK(zero);
        }
      }
  ember::testing::SwitchGuard guard(cuda::cross_entropy_stream, cuda::set_cross_entropy_stream);
  for (bool on : {false, true}) {
    INFO("EMBER_CROSS_ENTROPY_STREAM ", on);
    cuda::set_cross_entropy_stream(on);
    for (DType dtype : {kFloat32, kBFloat16}) {
      const Errors e =
          ce_vs_cpu(6, 50304, dtype, CrossEntropyOptions(Reduction::Mean, -100, 0.1), 400);
      CHECK(e.loss <= tol(dtype));
      CHECK(e.grad <= tol(dtype));
    }
  }
}

TEST_CASE("kernels/cross_entropy: the same input gives the same bits; no-grad and retained graphs" *
          doctest::test_suite("cuda")) {
  Tensor x = randn64({64, 20000}, 60).to(kCUDA, kFloat32);
  Tensor t = random_targets(64, 20000, -100, 61).to(kCUDA);
  auto run = [&] {
    Tensor xr = x.detach().set_requires_grad(true);
    Tensor loss = cross_entropy(xr, t);
    loss.backward();
    return std::make_pair(bytes_of<float>(loss), bytes_of<float>(xr.grad()));
  };
  const auto first = run();
  for (int i = 0; i < 3; ++i) CHECK(run() == first);
  {
    NoGradGuard no_grad;
    CHECK(bytes_of<float>(cross_entropy(x, t)) == first.first);
  }
  // A second backward through a retained graph recomputes the stashed gradient
  // (then scales it by the incoming 2 on the device).
  Tensor xr = x.detach().set_requires_grad(true);
  Tensor loss = cross_entropy(xr, t);
  loss.backward(Tensor(), /*retain_graph=*/true);
  const Tensor once = xr.grad().to(kCPU).to(kFloat64);
  CHECK(bytes_of<float>(xr.grad()) == first.second);
  xr.set_grad(Tensor());
  loss.backward(full({}, 2.0, TensorOptions(kFloat32).device(kCUDA)));
  CHECK(rel_error(xr.grad().to(kCPU).to(kFloat64), mul(once, 2.0)) <= 1e-7);
}

TEST_CASE("kernels/cross_entropy: the composed path on CUDA ((N, C, d) logits, float64)" *
          doctest::test_suite("cuda")) {
  Tensor x = randn64({3, 5, 4}, 70);
  Tensor t = tensor({0, 4, 2, -100, 1, 1, 3, 0, 2, 2, 4, 4}, kInt64).reshape({3, 4});
  for (DType dtype : {kFloat32, kFloat64}) {
    INFO(dtype);
    Tensor xc = x.to(dtype).to(kFloat64).detach().set_requires_grad(true);
    Tensor xg = x.to(kCUDA, dtype).detach().set_requires_grad(true);
    const CrossEntropyOptions o(Reduction::Mean, -100, 0.1);
    Tensor lc = cross_entropy(xc, t, o), lg = cross_entropy(xg, t.to(kCUDA), o);
    lc.backward();
    lg.backward();
    const double tl = dtype == kFloat64 ? 1e-12 : 1e-5;
    CHECK(rel_error(lg.to(kCPU).to(kFloat64), lc) <= tl);
    CHECK(rel_error(xg.grad().to(kCPU).to(kFloat64), xc.grad()) <= tl);
  }
}

TEST_CASE("kernels/cross_entropy: a target out of range is raised at the next synchronisation" *
          doctest::test_suite("cuda")) {
  Tensor x = randn64({4, 5}, 80).to(kCUDA, kFloat32);
  Tensor bad = tensor({1, 7, 2, 0}, kInt64).to(kCUDA);
  Tensor loss = cross_entropy(x, bad);  // no host sync here: it returns
  const std::string msg = error_of([&] { loss.item(); });
  CHECK(contains(msg, "cross_entropy: target 7 is out of range [0, 5)"));
  CHECK(contains(msg, "reported at this synchronisation"));
  // Reported once: the next synchronisation is clean, and good input works.
  CHECK(error_of([&] { cuda::synchronize(0); }) == "(no error)");
  CHECK(std::isfinite(cross_entropy(x, tensor({1, 4, 2, 0}, kInt64).to(kCUDA)).item()));
  // Through cuda::synchronize() too; the bad row counts as ignored meanwhile.
  Tensor per = cross_entropy(x, bad, CrossEntropyOptions(Reduction::None));
  CHECK(contains(error_of([&] { cuda::synchronize(0); }), "cross_entropy: target 7"));
  CHECK(per.to(kCPU).to_vector<double>()[1] == 0.0);
  // Host-side checks stay immediate on CUDA.
  CHECK(contains(error_of([&] { cross_entropy(x, bad.to(kFloat32)); }),
                 "cross_entropy: target must be an int64 tensor"));
  CHECK(contains(error_of([&] { cross_entropy(x, bad.slice(0, 0, 3)); }),
                 "different batch sizes (4 and 3)"));
}

// linear_cross_entropy's chunked path on CUDA (the fused kernel per chunk of rows,
// core/ops/cross_entropy.cpp) against linear then cross_entropy in float64 on the CPU,
// on the same rounded operands: in float32, and under bfloat16 autocast (float32
// operands, bfloat16 products, float32 loss and gradients), for one chunk, ragged
// chunks and a class count off the kernel's vector width.
TEST_CASE("kernels/cross_entropy: linear_cross_entropy's chunks against the CPU float64 path" *
          doctest::test_suite("cuda")) {
  const int64_t rows = 1000, in = 64, classes = 5003;
  uint64_t seed = 70;
  for (bool autocast : {false, true})
    for (int64_t chunk : {int64_t{0}, int64_t{300}, int64_t{1000}})
      for (const CrossEntropyOptions& o :
           {CrossEntropyOptions(), CrossEntropyOptions(Reduction::Sum, 3, 0.1)}) {
        INFO("autocast=", autocast, " chunk_rows=", chunk,
             " reduction=", static_cast<int>(o.reduction()));
        const DType rounding = autocast ? kBFloat16 : kFloat32;
        // Rounded to what the products read, so both sides start from the same values.
        const Tensor x64 = randn64({rows, in}, seed++).to(rounding).to(kFloat64);
        const Tensor w64 = randn64({classes, in}, seed++).mul(0.2).to(rounding).to(kFloat64);
        const Tensor t = random_targets(rows, classes, o.ignore_index(), seed++);
        Tensor xr = x64.detach().set_requires_grad(true), wr = w64.detach().set_requires_grad(true);
        Tensor ref = cross_entropy(linear(xr, wr), t, o);
        ref.backward(full({}, 0.75, kFloat64));
        Tensor x = x64.to(kCUDA, kFloat32).detach().set_requires_grad(true);
        Tensor w = w64.to(kCUDA, kFloat32).detach().set_requires_grad(true);
        Tensor loss;
        {
          std::optional<AutocastGuard> guard;
          if (autocast) guard.emplace(kBFloat16);
          loss = linear_cross_entropy(x, w, t.to(kCUDA), o, chunk);
        }
        CHECK(loss.dtype() == kFloat32);
        loss.backward(full({}, 0.75, TensorOptions(kFloat32).device(kCUDA)));
        REQUIRE(x.grad().dtype() == kFloat32);
        REQUIRE(w.grad().dtype() == kFloat32);
        // bf16: the loss reads bf16 logits (1e-2, as above); each gradient passes two
        // bf16 roundings (the logits' gradient, then its product's output): 2e-2.
        const double t_loss = autocast ? 1e-2 : 1e-5, t_grad = autocast ? 2e-2 : 1e-5;
        CHECK(rel_error(loss.to(kCPU).to(kFloat64), ref) <= t_loss);
        CHECK(rel_error(x.grad().to(kCPU).to(kFloat64), xr.grad()) <= t_grad);
        CHECK(rel_error(w.grad().to(kCPU).to(kFloat64), wr.grad()) <= t_grad);
      }
}
