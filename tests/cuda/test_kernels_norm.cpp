// The fused norms (cuda/kernels/layer_norm.cu: layer norm, and RMS norm, its kRms
// mode) through layer_norm and rms_norm: output and the gradients of input, weight
// and bias against the CPU float64 reference (the composed ops) on fresh random
// inputs at ragged row lengths (every block shape, the scalar path for rows that
// are not 16-byte multiples, misaligned inputs), float32 and bfloat16, with and
// without the affine parameters; the composed path on CUDA past the fused kernel's
// limit; identical bits from run to run over many rows. Small shapes and float64
// for every op: the op table (tests/core/op_table.cpp).
//
// The warp-per-row kernels (EMBER_LAYER_NORM_WARP, rows of up to 1024; on by default) and
// the block kernels at those lengths are each checked the same way with the switch set,
// and against each other on the GPT's path (float32 input, a bfloat16 result, its
// gradient folded into a residual sum).
//
// Tolerances (DESIGN.md): float32 1e-5, as GEMM's, since the statistics and the
// weight gradients are float reductions; bfloat16 1e-2.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/layer_norm.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;

namespace {

enum class Norm { Layer, Rms };

double tol(DType t) {
  return t == kFloat64 ? 1e-12 : t == kFloat32 ? 1e-5 : 1e-2;
}

Tensor run_norm(Norm norm, const Tensor& x, const Shape& normalized, const Tensor& w,
                const Tensor& b) {
  return norm == Norm::Layer ? layer_norm(x, normalized, w, b) : rms_norm(x, normalized, w, 1e-6);
}

// The largest rel_error over y, d_x and the affine gradients (d_w, and d_b for the
// layer norm) of the norm on CUDA in dtype against CPU float64 on the same rounded
// values. `offset` misaligns the input by that many elements.
double norm_vs_cpu(Norm norm, const Shape& shape, const Shape& normalized, DType dtype, bool affine,
                   uint64_t seed, int64_t offset = 0) {
  const int64_t n = numel_of(shape);
  Tensor base = (randn64({n + offset}, seed) * 2.0 + 0.5).to(dtype).to(kFloat64);
  Tensor xc = base.slice(0, offset, offset + n).reshape(shape).detach().set_requires_grad(true);
  Tensor xg = base.to(kCUDA, dtype)
                  .slice(0, offset, offset + n)
                  .reshape(shape)
                  .detach()
                  .set_requires_grad(true);
  Tensor wc, bc, wg, bg;
  if (affine) {
    Tensor w = randn64(normalized, seed + 1).to(dtype).to(kFloat64);
    wc = w.detach().set_requires_grad(true);
    wg = w.to(kCUDA, dtype).detach().set_requires_grad(true);
    if (norm == Norm::Layer) {
      Tensor b = randn64(normalized, seed + 2).to(dtype).to(kFloat64);
      bc = b.detach().set_requires_grad(true);
      bg = b.to(kCUDA, dtype).detach().set_requires_grad(true);
    }
  }
  Tensor yc = run_norm(norm, xc, normalized, wc, bc), yg = run_norm(norm, xg, normalized, wg, bg);
  Tensor g = randn64(shape, seed + 3).to(dtype).to(kFloat64);
  yc.backward(g);
  yg.backward(g.to(kCUDA, dtype));
  auto err = [](const Tensor& gpu, const Tensor& cpu) {
    return rel_error(gpu.to(kCPU).to(kFloat64), cpu);
  };
  double worst = std::max(err(yg, yc), err(xg.grad(), xc.grad()));
  if (wc.defined()) worst = std::max(worst, err(wg.grad(), wc.grad()));
  if (bc.defined()) worst = std::max(worst, err(bg.grad(), bc.grad()));
  return worst;
}

// Row lengths for each block shape (<= 1024, <= 4096, <= 8192), ragged ones (the
// scalar path), enough rows that blocks loop over several, one past the kernel's limit
// (composed: 8200), and the edges of the warp kernels' 16 and 24 items a lane (512, 520,
// 768; appended last so that the earlier shapes keep their seeds). The RMS norm skips one-column
// rows: there y = x / sqrt(x^2 + eps) and d_x = g * eps * rstd^3, a difference of two nearly equal
// terms that no float32 kernel (nor PyTorch's) gets to 1e-5 (the first H200 runs measured 3.5e-2
// there, and nowhere else); the layer norm's is exactly 0.
void ragged_rows(Norm norm, uint64_t seed) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, norm == Norm::Layer ? 1 : 2},
                                                           {7, 3},
                                                           {33, 1000},
                                                           {300, 1024},
                                                           {5, 1025},
                                                           {64, 4096},
                                                           {3, 4097},
                                                           {4, 8192},
                                                           {2, 8191},
                                                           {1000, 64},
                                                           {2, 8200},
                                                           {11, 512},
                                                           {9, 520},
                                                           {40, 768}};
  for (auto [rows, cols] : shapes)
    for (DType dtype : {kFloat32, kBFloat16})
      for (bool affine : {true, false}) {
        INFO("rows=", rows, " cols=", cols, " dtype=", dtype, " affine=", affine);
        CHECK(norm_vs_cpu(norm, {rows, cols}, {cols}, dtype, affine, seed += 4) <= tol(dtype));
      }
}

// The gradients of input and weight of 2048 rows of 768, four times: the same bits.
void same_bits(Norm norm, uint64_t seed) {
  Tensor x = randn64({2048, 768}, seed).to(kCUDA, kFloat32);
  Tensor w = randn64({768}, seed + 1).to(kCUDA, kFloat32);
  Tensor g = randn64({2048, 768}, seed + 2).to(kCUDA, kFloat32);
  auto run = [&] {
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true);
    run_norm(norm, xr, {768}, wr, Tensor()).backward(g);
    std::vector<float> a = xr.grad().to_vector<float>(), b = wr.grad().to_vector<float>();
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<float> first = run();
  for (int i = 0; i < 3; ++i) CHECK(std::memcmp(run().data(), first.data(), first.size() * 4) == 0);
}

// The GPT's path on the GPU: y = layer_norm(x) over the last dim, stored in `out`, then
// (x + y).backward(gy), so that the norm's d_x folds into the residual stream's gradient.
// Returns {y, x's gradient, w's, b's} in float64 on the CPU.
std::vector<Tensor> residual_norm_pass(const Tensor& x0, const Tensor& w0, const Tensor& b0,
                                       const Tensor& gy, DType out) {
  Tensor x = x0.detach().set_requires_grad(true), w = w0.detach().set_requires_grad(true),
         b = b0.detach().set_requires_grad(true);
  Tensor y = detail::layer_norm_into_dtype(x, {x0.size(-1)}, w, b, 1e-5, out);
  add(x, y).backward(gy);
  auto f64 = [](const Tensor& t) { return t.to(kCPU).to(kFloat64); };
  return std::vector<Tensor>{f64(y.detach()), f64(x.grad()), f64(w.grad()), f64(b.grad())};
}

}  // namespace

TEST_CASE("kernels/layer_norm: output and gradients match the CPU at ragged row lengths" *
          doctest::test_suite("cuda")) {
  ragged_rows(Norm::Layer, 1);
}

TEST_CASE("kernels/rms_norm: output and gradients match the CPU at ragged row lengths" *
          doctest::test_suite("cuda")) {
  ragged_rows(Norm::Rms, 201);
}

TEST_CASE("kernels/norm: misaligned input, several normalised dims, float64 composed" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kBFloat16}) {
    INFO(dtype);
    CHECK(norm_vs_cpu(Norm::Layer, {6, 512}, {512}, dtype, true, 110, /*offset=*/1) <= tol(dtype));
    CHECK(norm_vs_cpu(Norm::Rms, {6, 512}, {512}, dtype, true, 310, /*offset=*/1) <= tol(dtype));
    CHECK(norm_vs_cpu(Norm::Rms, {3, 4, 2, 64}, {2, 64}, dtype, true, 300) <= tol(dtype));
  }
  CHECK(norm_vs_cpu(Norm::Rms, {5, 300}, {300}, kFloat64, true, 320) <= tol(kFloat64));
}

TEST_CASE("kernels/rms_norm: no rows gives a zero weight gradient" * doctest::test_suite("cuda")) {
  Tensor x = zeros({0, 16}, TensorOptions(kFloat32).device(kCUDA).requires_grad());
  Tensor w = ones({16}, TensorOptions(kFloat32).device(kCUDA).requires_grad());
  Tensor y = rms_norm(x, {16}, w);
  CHECK(y.sizes() == Shape{0, 16});
  y.sum().backward();
  for (float v : w.grad().to_vector<float>()) CHECK(v == 0.0f);
}

TEST_CASE("kernels/norm: the same input gives the same bits" * doctest::test_suite("cuda")) {
  same_bits(Norm::Layer, 130);
  same_bits(Norm::Rms, 330);
}

// The fused backward folding d_x into the gradient the engine sums for x (a
// residual stream: x feeds both the norm and an add, core/ops/layer_norm.cpp): x's
// gradient against the CPU's composed path, with the sum held by the engine alone
// (written in place: x * 2's gradient arrives first) and shared (the add passes its
// own gradient on: a new tensor), in float32 and bfloat16, at a row length the vector
// loads take (256) and one they do not (250).
TEST_CASE("kernels/layer_norm: d_x folded into the residual stream's gradient matches the CPU" *
          doctest::test_suite("cuda")) {
  for (DType dtype : {kFloat32, kBFloat16})
    for (int64_t cols : {int64_t{256}, int64_t{250}})
      for (bool shared : {false, true}) {
        INFO("dtype=", dtype, " cols=", cols, " shared=", shared);
        const int64_t rows = 37;
        const Tensor x64 = randn64({rows, cols}, 60 + cols).to(dtype).to(kFloat64);
        const Tensor w64 = randn64({cols}, 61).to(dtype).to(kFloat64);
        const Tensor gy = randn64({rows, cols}, 62).to(dtype).to(kFloat64);
        auto x_grad = [&](Device dev, DType dt) {
          Tensor x = x64.to(dev, dt).detach().set_requires_grad(true);
          const Tensor w = w64.to(dev, dt);
          // Made after the norm, x * 2's backward runs before it (later nodes first),
          // so its gradient (the engine's alone) is the sum the norm folds into in
          // place; shared, the add's pass-through gradient is, and the fold writes a
          // new tensor.
          Tensor n = layer_norm(x, {cols}, w);
          Tensor other = shared ? x : mul(x, 2.0);
          Tensor h = add(other, n);
          h.backward(gy.to(dev, dt));
          return x.grad().to(kCPU).to(kFloat64);
        };
        const Tensor want = x_grad(Device(kCPU), kFloat64);
        CHECK(rel_error(x_grad(Device(kCUDA), dtype), want) <= tol(dtype));
      }
}

TEST_CASE(
    "kernels/norm: a warp per row and a block per row match the CPU, and each other on "
    "a GPT's path" *
    doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(cuda::layer_norm_warp, cuda::set_layer_norm_warp);
  // The other cases run whichever the default is; here both, whatever it is.
  for (bool warp : {true, false}) {
    INFO("warp per row: ", warp);
    cuda::set_layer_norm_warp(warp);
    CHECK(cuda::layer_norm_warp() == warp);
    ragged_rows(Norm::Layer, 701);
    ragged_rows(Norm::Rms, 801);
    same_bits(Norm::Layer, 730);
    same_bits(Norm::Rms, 830);
  }
  // float32 x, the result in bfloat16 (autocast's layer norm), x + y as a residual stream
  // whose gradient the backward folds d_x into: the warp kernels against the block
  // kernels on the same inputs, over more rows than one grid holds.
  for (int64_t cols : {int64_t{768}, int64_t{250}}) {
    INFO("cols=", cols);
    const int64_t rows = 3000;
    const Tensor x0 = randn64({rows, cols}, 900 + cols).to(kCUDA, kFloat32);
    const Tensor w0 = randn64({cols}, 901).to(kCUDA, kFloat32);
    const Tensor b0 = randn64({cols}, 902).to(kCUDA, kFloat32);
    const Tensor gy = randn64({rows, cols}, 903).to(kCUDA, kFloat32);
    auto run = [&](bool warp) {
      cuda::set_layer_norm_warp(warp);
      return residual_norm_pass(x0, w0, b0, gy, kBFloat16);
    };
    const std::vector<Tensor> by_warp = run(true), by_block = run(false);
    CHECK(rel_error(by_warp[0], by_block[0]) <= 1e-2);  // y, bfloat16
    CHECK(rel_error(by_warp[1], by_block[1]) <= 1e-5);  // d_x + the residual's gradient
    CHECK(rel_error(by_warp[2], by_block[2]) <= 1e-5);  // d_w
    CHECK(rel_error(by_warp[3], by_block[3]) <= 1e-5);  // d_b
  }
}

// add_layer_norm's one pass (the forward kernels given a residual, writing the sum)
// against add then layer_norm on the GPU: the same bits for the sum, the result and every
// gradient (the kernels normalise the same rounded sum from registers that the other
// path reads back), for x and residual float32, float32 beside a bfloat16 residual (a
// transformer's stream and branch) and both bfloat16, a bfloat16 result from float32,
// by the warp-per-row kernels and the block kernels, at row lengths the vector loads
// take (768, 2048) and ones they do not (250, 2050). The first norm's values against
// CPU float64 as well.
TEST_CASE("kernels/layer_norm: the residual add in the same pass equals add then layer_norm" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(detail::add_layer_norm_fused, detail::set_add_layer_norm_fused);
  ember::testing::SwitchGuard warp_guard(cuda::layer_norm_warp, cuda::set_layer_norm_warp);
  struct Types {
    DType x, r;
    bool bf16_out;
  };
  const Types types[] = {{kFloat32, kFloat32, false},
                         {kFloat32, kBFloat16, true},
                         {kFloat32, kBFloat16, false},
                         {kBFloat16, kBFloat16, false}};
  for (bool warp : {true, false})
    for (int64_t cols : {int64_t{768}, int64_t{250}, int64_t{2048}, int64_t{2050}})
      for (const Types& t : types) {
        INFO("warp=", warp, " cols=", cols, " x ", t.x, " residual ", t.r,
             " bf16 result=", t.bf16_out);
        cuda::set_layer_norm_warp(warp);
        const int64_t rows = 700;
        const uint64_t seed = 1000 + static_cast<uint64_t>(cols);
        const Tensor x0 = randn64({rows, cols}, seed).to(t.x).to(kFloat64);
        const Tensor r0 = randn64({rows, cols}, seed + 1).to(t.r).to(kFloat64);
        const Tensor r1 = randn64({rows, cols}, seed + 2).to(t.r).to(kFloat64);
        const Tensor w0 = randn64({cols}, seed + 3).to(t.x).to(kFloat64);
        const Tensor b0 = randn64({cols}, seed + 4).to(t.x).to(kFloat64);
        const Tensor gy = randn64({rows, cols}, seed + 5).to(t.x).to(kFloat64);
        auto run = [&](bool fused) {
          detail::set_add_layer_norm_fused(fused);
          auto leaf = [](const Tensor& v, DType dt) {
            return v.to(kCUDA, dt).detach().set_requires_grad(true);
          };
          Tensor x = leaf(x0, t.x), ra = leaf(r0, t.r), rb = leaf(r1, t.r), w = leaf(w0, t.x),
                 b = leaf(b0, t.x);
          auto norm = [&](const Tensor& s, const Tensor& r) {
            return t.bf16_out
                       ? detail::add_layer_norm_into_dtype(s, r, {cols}, w, b, 1e-5, kBFloat16)
                       : add_layer_norm(s, r, {cols}, w, b);
          };
          const auto [s1, y1] = norm(x, ra);
          // The next norm's residual: rb + y1 in the residual's dtype.
          const auto [s2, y2] = norm(s1, add(rb, y1).to(t.r));
          add(s2, mul(y2, 3.0)).backward(gy.to(kCUDA, t.x));
          std::vector<Tensor> out{s1.detach(), y1.detach(), s2.detach(), y2.detach(), x.grad(),
                                  ra.grad(),   rb.grad(),   w.grad(),    b.grad()};
          for (Tensor& o : out) o = o.to(kCPU);
          return out;
        };
        const std::vector<Tensor> one = run(true), two = run(false);
        for (size_t i = 0; i < one.size(); ++i) {
          CAPTURE(i);
          REQUIRE(one[i].dtype() == two[i].dtype());
          CHECK(one[i].to(kFloat32).to_vector<float>() == two[i].to(kFloat32).to_vector<float>());
        }
        const Tensor s64 = add(x0, r0);
        CHECK(rel_error(one[0].to(kFloat64), s64) <= tol(t.x));
        CHECK(rel_error(one[1].to(kFloat64), layer_norm(s64, {cols}, w0, b0)) <=
              (t.bf16_out ? 1e-2 : tol(t.x)));
      }
}

// dropout_add_layer_norm on the GPU: the mask drawn inside the forward kernels (warp
// and block shapes, vector and scalar rows) and inside the residual's gradient (the
// dropout kernel's float32-to-bfloat16 form) against dropout then add_layer_norm: the
// same bits for the sums, the results and every gradient, and the generator at the same
// counter. The first sum against the CPU's (its mask checked against the documented one
// by tests/core/test_ops_layer_norm.cpp), bit for bit: the sum is element-wise.
TEST_CASE("kernels/layer_norm: dropout on the residual inside the pass equals dropout first" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(detail::dropout_add_layer_norm_fused,
                                    detail::set_dropout_add_layer_norm_fused);
  ember::testing::SwitchGuard warp_guard(cuda::layer_norm_warp, cuda::set_layer_norm_warp);
  struct Types {
    DType x, r;
    bool bf16_out;
  };
  const Types types[] = {
      {kFloat32, kFloat32, false}, {kFloat32, kBFloat16, true}, {kBFloat16, kBFloat16, false}};
  const double p = 0.2;
  for (bool warp : {true, false})
    for (int64_t cols : {int64_t{384}, int64_t{250}, int64_t{2048}})
      for (const Types& t : types) {
        INFO("warp=", warp, " cols=", cols, " x ", t.x, " residual ", t.r,
             " bf16 result=", t.bf16_out);
        cuda::set_layer_norm_warp(warp);
        const int64_t rows = 300;
        const uint64_t seed = 2000 + static_cast<uint64_t>(cols);
        const Tensor x0 = randn64({rows, cols}, seed).to(t.x).to(kFloat64);
        const Tensor r0 = randn64({rows, cols}, seed + 1).to(t.r).to(kFloat64);
        const Tensor r1 = randn64({rows, cols}, seed + 2).to(t.r).to(kFloat64);
        const Tensor w0 = randn64({cols}, seed + 3).to(t.x).to(kFloat64);
        const Tensor b0 = randn64({cols}, seed + 4).to(t.x).to(kFloat64);
        const Tensor gy = randn64({rows, cols}, seed + 5).to(t.x).to(kFloat64);
        auto run = [&](bool fused, Device dev) {
          detail::set_dropout_add_layer_norm_fused(fused);
          Generator g(5);
          g.set_offset(1u << 20);
          auto leaf = [&](const Tensor& v, DType dt) {
            return v.to(dev, dt).detach().set_requires_grad(true);
          };
          Tensor x = leaf(x0, t.x), ra = leaf(r0, t.r), rb = leaf(r1, t.r), w = leaf(w0, t.x),
                 b = leaf(b0, t.x);
          auto norm = [&](const Tensor& s, const Tensor& r) {
            return t.bf16_out ? detail::dropout_add_layer_norm_into_dtype(s, r, p, true, {cols}, w,
                                                                          b, 1e-5, kBFloat16, &g)
                              : dropout_add_layer_norm(s, r, p, true, {cols}, w, b, 1e-5, &g);
          };
          const auto [s1, y1] = norm(x, ra);
          const auto [s2, y2] = norm(s1, add(rb, y1).to(t.r));
          CHECK(g.offset() == (1u << 20) + 2 * rows * cols);
          add(s2, mul(y2, 3.0)).backward(gy.to(dev, t.x));
          std::vector<Tensor> out{s1.detach(), y1.detach(), s2.detach(), y2.detach(), x.grad(),
                                  ra.grad(),   rb.grad(),   w.grad(),    b.grad()};
          for (Tensor& o : out) o = o.to(kCPU);
          return out;
        };
        const std::vector<Tensor> one = run(true, kCUDA), two = run(false, kCUDA);
        for (size_t i = 0; i < one.size(); ++i) {
          CAPTURE(i);
          REQUIRE(one[i].dtype() == two[i].dtype());
          CHECK(one[i].to(kFloat32).to_vector<float>() == two[i].to(kFloat32).to_vector<float>());
        }
        if (t.x == kFloat32) {  // the CPU's fused kernels take float32
          const std::vector<Tensor> cpu = run(true, kCPU);
          CHECK(one[0].to_vector<float>() == cpu[0].to_vector<float>());
        }
      }
}

// EMBER_LAYER_NORM_LEAN: the warp kernels with the items a lane needs and the one-launch
// column sums, against 32 items and the per-column chain, on the GPT's path (float32
// input, a bfloat16 result, its gradient folded into a residual sum) and plain float32
// and bfloat16 rows: y and d_x the same bits (the items past a row add zeros), d_w and
// d_b to rounding (the column sums add in another order). The lean side (the default)
// is checked against the CPU by the cases above.
TEST_CASE("kernels/norm: the lean warp kernels equal the full ones" * doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard warp_guard(cuda::layer_norm_warp, cuda::set_layer_norm_warp);
  ember::testing::SwitchGuard lean_guard(cuda::layer_norm_lean, cuda::set_layer_norm_lean);
  cuda::set_layer_norm_warp(true);
  for (bool lean : {true, false}) {
    cuda::set_layer_norm_lean(lean);
    CHECK(cuda::layer_norm_lean() == lean);
  }
  // cols: 24 items a lane (768, 520), 16 (384, 512), 32 (1000), element by element (250).
  for (int64_t cols :
       {int64_t{768}, int64_t{520}, int64_t{384}, int64_t{512}, int64_t{1000}, int64_t{250}})
    for (int mode = 0; mode < 3; ++mode) {
      // mode 0: float32 x, bfloat16 y; 1: float32 throughout; 2: bfloat16 throughout.
      const DType dtype = mode == 2 ? kBFloat16 : kFloat32;
      INFO("cols=", cols, " mode=", mode);
      const int64_t rows = 3000;
      const Tensor x0 = randn64({rows, cols}, 1900 + cols).to(kCUDA, dtype);
      const Tensor w0 = randn64({cols}, 1901).to(kCUDA, dtype);
      const Tensor b0 = randn64({cols}, 1902).to(kCUDA, dtype);
      const Tensor gy = randn64({rows, cols}, 1903).to(kCUDA, dtype);
      auto run = [&](bool lean) {
        cuda::set_layer_norm_lean(lean);
        // layer_norm's own result dtype is x's here (output = x's dtype is that same path).
        return residual_norm_pass(x0, w0, b0, gy, mode == 0 ? kBFloat16 : dtype);
      };
      const std::vector<Tensor> lean = run(true), full = run(false);
      CHECK(ember::testing::same_bits(lean[0], full[0]));  // y
      CHECK(ember::testing::same_bits(lean[1], full[1]));  // d_x + the residual's gradient
      const double t = mode == 2 ? 1e-2 : 1e-5;
      CHECK(rel_error(lean[2], full[2]) <= t);  // d_w
      CHECK(rel_error(lean[3], full[3]) <= t);  // d_b
    }
}
