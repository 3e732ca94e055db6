// The fused batch norm (cuda/kernels/batch_norm.cu) through batch_norm: output,
// running statistics and the gradients of input, weight and bias against an
// independent reference (plain loops in double over the same rounded values, below)
// and against the composed path (the CPU in float64; CUDA in float32 on a view, which
// the fused kernels do not take); the saved mean and 1/std through the kernel table.
// Shapes: (N, C, H, W) with ragged and 16-byte-multiple spatial sizes (the scalar and
// vector paths), 2-D (N, C), one channel, two values, 65537 values in a row, the
// benchmark's 128x64x32x32; training and eval, with and without running statistics
// and the affine parameters, several momentum and eps values, a misaligned input, a
// mean far from zero (a sum-of-squares variance would lose it in float32); identical
// bits from run to run. Small shapes and float64 for every op: the op table.
//
// Tolerances (DESIGN.md): float32 1e-5 (float reductions, as GEMM's), bfloat16 1e-2.
// d_x is measured against ||w invstd d_y|| when that is larger than ||d_x||: with two
// values per channel d_x is 0 up to eps, a difference of equal terms.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "gradcheck.h"

using namespace ember;
using ember::testing::rand64;
using ember::testing::randn64;

namespace {

using V = std::vector<double>;

double tol(DType t) {
  return t == kFloat32 ? 1e-5 : 1e-2;
}

// The fused kernels run unless EMBER_BATCH_NORM_FUSED=0 (cuda/kernels/batch_norm.cu);
// with it CUDA composes and these tests check that path instead.
bool fused_enabled() {
  const char* e = std::getenv("EMBER_BATCH_NORM_FUSED");
  return e == nullptr || std::string(e) != "0";
}

// ||out - ref|| / max(||ref||, scale), +inf for a NaN or a size mismatch.
double err(const V& out, const V& ref, double scale = 0.0) {
  if (out.size() != ref.size()) return std::numeric_limits<double>::infinity();
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  const double d = std::max(std::sqrt(den), scale);
  return num == 0.0 ? 0.0 : d == 0.0 ? std::sqrt(num) : std::sqrt(num) / d;
}
V values(const Tensor& t) {
  return t.to(kCPU).to(kFloat64).to_vector<double>();
}

// The reference: batch norm of x (n, c, m) by the definitions, in double.
struct Ref {
  V y, mean, invstd, rm, rv, dx, dw, db;
  // The sizes the errors are measured against where a result is a sum whose terms
  // cancel (a float sum's error bound is eps times the sum of its terms' magnitudes):
  double dx_scale = 0.0;  // ||w invstd d_y||
  double dw_scale = 0.0;  // over channels, || sum |d_y x_hat| ||
  double db_scale = 0.0;  // || sum |d_y| ||
  double rm_scale = 0.0;  // || (1 - momentum) |running_mean| + momentum |mean| ||
  double rv_scale = 0.0;  // the same for the variance
};
// relu: y = max(0, the batch norm), g the gradient of that: masked where the batch
// norm's value was not positive before the sums.
Ref reference(const V& x, const V& w, const V& b, const V& g_in, const V& rm0, const V& rv0,
              int64_t n, int64_t c, int64_t m, bool training, double momentum, double eps,
              bool relu = false) {
  V g = g_in;
  Ref r;
  const size_t total = x.size();
  r.y.resize(total);
  r.dx.resize(total);
  r.mean.resize(c);
  r.invstd.resize(c);
  r.dw.assign(c, 0.0);
  r.db.assign(c, 0.0);
  r.rm = rm0;
  r.rv = rv0;
  const double count = static_cast<double>(n * m);
  auto at = [&](int64_t i, int64_t ch, int64_t j) { return (i * c + ch) * m + j; };
  double scale2 = 0.0;
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = 0.0, var = 0.0;
    if (training) {
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) mean += x[at(i, ch, j)];
      mean /= count;
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) var += (x[at(i, ch, j)] - mean) * (x[at(i, ch, j)] - mean);
      var /= count;
      if (!rm0.empty()) {
        const double unbiased = var * count / (count - 1);
        r.rm[ch] = (1 - momentum) * rm0[ch] + momentum * mean;
        r.rv[ch] = (1 - momentum) * rv0[ch] + momentum * unbiased;
        const double sm = (1 - momentum) * std::abs(rm0[ch]) + momentum * std::abs(mean);
        const double sv = (1 - momentum) * std::abs(rv0[ch]) + momentum * unbiased;
        r.rm_scale += sm * sm;
        r.rv_scale += sv * sv;
      }
    } else {
      mean = rm0[ch];
      var = rv0[ch];
    }
    const double is = 1.0 / std::sqrt(var + eps);
    const double wc = w.empty() ? 1.0 : w[ch], bc = b.empty() ? 0.0 : b[ch];
    r.mean[ch] = mean;
    r.invstd[ch] = is;
    double abs_db = 0.0, abs_dw = 0.0;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        const int64_t k = at(i, ch, j);
        const double xh = (x[k] - mean) * is;
        r.y[k] = xh * wc + bc;
        if (relu && !(r.y[k] > 0)) r.y[k] = 0, g[k] = 0;
        r.db[ch] += g[k];
        r.dw[ch] += g[k] * xh;
        abs_db += std::abs(g[k]);
        abs_dw += std::abs(g[k] * xh);
        scale2 += (wc * is * g[k]) * (wc * is * g[k]);
      }
    r.dw_scale += abs_dw * abs_dw;
    r.db_scale += abs_db * abs_db;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        const int64_t k = at(i, ch, j);
        const double xh = (x[k] - mean) * is;
        r.dx[k] =
            training ? wc * is * (g[k] - r.db[ch] / count - xh * r.dw[ch] / count) : wc * is * g[k];
      }
  }
  r.dx_scale = std::sqrt(scale2);
  r.dw_scale = std::sqrt(r.dw_scale);
  r.db_scale = std::sqrt(r.db_scale);
  r.rm_scale = std::sqrt(r.rm_scale);
  r.rv_scale = std::sqrt(r.rv_scale);
  return r;
}

struct Case {
  Shape shape;
  DType dtype = kFloat32;
  bool affine = true;
  bool running = true;
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
  double offset = 0.5;      // the values are offset + 2 N(0, 1)
  int64_t misalign = 0;     // elements the input starts past a 16-byte boundary
  bool params_f32 = false;  // weight, bias, running statistics float32 (bf16 x: autocast's mix)
  bool relu = false;        // batch_norm_relu
};

std::string describe(const Case& k) {
  std::string s = shape_str(k.shape) + " " + std::string(dtype_name(k.dtype)) +
                  (k.affine ? " affine" : "") + (k.running ? " running" : "") +
                  (k.training ? " training" : " eval") + " momentum=" + std::to_string(k.momentum) +
                  " eps=" + std::to_string(k.eps) + " offset=" + std::to_string(k.offset) +
                  " misalign=" + std::to_string(k.misalign) +
                  (k.params_f32 ? " float32 parameters" : "") + (k.relu ? " relu" : "");
  return s;
}

// The case's inputs, rounded to its dtype, as float64 CPU tensors.
struct Inputs {
  Tensor x, w, b, g, rm, rv;
};
Inputs make_inputs(const Case& k, uint64_t seed) {
  const int64_t c = k.shape[1];
  auto round_x = [&](const Tensor& t) { return t.to(k.dtype).to(kFloat64); };
  auto round = [&](const Tensor& t) {
    return t.to(k.params_f32 ? kFloat32 : k.dtype).to(kFloat64);
  };
  Inputs in;
  in.x = round_x(randn64(k.shape, seed) * 2.0 + k.offset);
  in.g = round_x(randn64(k.shape, seed + 1));
  if (k.affine) {
    in.w = round(randn64({c}, seed + 2) * 0.5 + 1.0);
    in.b = round(randn64({c}, seed + 3));
  }
  if (k.running || !k.training) {
    in.rm = round(randn64({c}, seed + 4) * 0.2 + k.offset);
    in.rv = round(rand64({c}, seed + 5, 0.5, 4.0));
  }
  return in;
}

V vec_or_empty(const Tensor& t) {
  return t.defined() ? values(t) : V{};
}

// What one batch_norm call on `device` in `dtype` gave: y, the running statistics
// after it, and the gradients. `view` hands the op a non-contiguous view of x.
struct Run {
  Tensor y, rm, rv, dx, dw, db;
  std::string node;
};
Run run(const Case& k, const Inputs& in, Device device, DType dtype, bool view = false,
        DType param_dtype = DType::Float64) {
  if (param_dtype == DType::Float64) param_dtype = dtype;  // the parameters in x's dtype
  // A copy always: to() returns the tensor itself when it is already on `device` in
  // `dtype` (the CPU float64 run), and batch_norm updates the running statistics in
  // place, which would hand the next run updated statistics.
  auto on = [&](const Tensor& t, bool grad, DType dt) {
    if (!t.defined()) return Tensor();
    Tensor d = t.to(device, dt).detach().clone();
    return grad ? d.set_requires_grad(true) : d;
  };
  Run r;
  Tensor x = on(in.x, true, dtype), w = on(in.w, true, param_dtype),
         b = on(in.b, true, param_dtype);
  r.rm = on(in.rm, false, param_dtype);
  r.rv = on(in.rv, false, param_dtype);
  Tensor xin = x;
  if (k.misalign > 0) {  // the same values starting misalign elements into a buffer
    const int64_t total = numel_of(k.shape);
    const Tensor buf =
        cat({zeros({k.misalign}, TensorOptions(dtype).device(device)), x.reshape({total})}, 0);
    xin = buf.slice(0, k.misalign, k.misalign + total).reshape(k.shape);
  }
  if (view) xin = xin.transpose(0, 1).contiguous().transpose(0, 1);
  r.y = k.relu ? batch_norm_relu(xin, r.rm, r.rv, w, b, k.training, k.momentum, k.eps)
               : batch_norm(xin, r.rm, r.rv, w, b, k.training, k.momentum, k.eps);
  r.node = r.y.grad_fn() ? r.y.grad_fn()->name() : "";
  r.y.backward(on(in.g, false, dtype));
  r.dx = x.grad();
  r.dw = w.defined() ? w.grad() : Tensor();
  r.db = b.defined() ? b.grad() : Tensor();
  return r;
}

// got's y, running statistics and gradients against the reference, each to `tol`.
void check_vs(const char* what, const Run& got, const Ref& ref, double tolerance) {
  INFO(what);
  CHECK(err(values(got.y), ref.y) <= tolerance);
  if (got.rm.defined()) {
    CHECK(err(values(got.rm), ref.rm, ref.rm_scale) <= tolerance);
    CHECK(err(values(got.rv), ref.rv, ref.rv_scale) <= tolerance);
  }
  CHECK(err(values(got.dx), ref.dx, ref.dx_scale) <= tolerance);
  if (got.dw.defined()) CHECK(err(values(got.dw), ref.dw, ref.dw_scale) <= tolerance);
  if (got.db.defined()) CHECK(err(values(got.db), ref.db, ref.db_scale) <= tolerance);
}

// Fused CUDA and composed CPU float64 against the reference; CUDA float32 composed
// (on a view) against the fused result, where the shape makes the view
// non-contiguous.
void check_case(const Case& k, uint64_t seed) {
  INFO(describe(k));
  const Inputs in = make_inputs(k, seed);
  const int64_t n = k.shape[0], c = k.shape[1], m = numel_of(k.shape) / (n * c);
  const Ref ref = reference(in.x.to_vector<double>(), vec_or_empty(in.w), vec_or_empty(in.b),
                            in.g.to_vector<double>(), vec_or_empty(in.rm), vec_or_empty(in.rv), n,
                            c, m, k.training, k.momentum, k.eps, k.relu);
  const Run cpu = run(k, in, kCPU, kFloat64);
  check_vs("cpu float64 composed", cpu, ref, 1e-10);  // the reference means the op
  const DType pdt = k.params_f32 ? kFloat32 : k.dtype;
  const Run gpu = run(k, in, kCUDA, k.dtype, false, pdt);
  if (fused_enabled())
    CHECK(gpu.node == std::string(k.relu ? "BatchNormReluBackward" : "BatchNormBackward"));
  CHECK(gpu.y.dtype() == k.dtype);
  CHECK(gpu.dx.dtype() == k.dtype);
  if (gpu.dw.defined()) CHECK(gpu.dw.dtype() == pdt);
  if (gpu.rm.defined()) CHECK(gpu.rm.dtype() == pdt);
  check_vs("cuda", gpu, ref, tol(k.dtype));
  if (k.params_f32) {  // the CPU composes the mix in float32, returning bf16
    const Run mixed = run(k, in, kCPU, k.dtype, false, pdt);
    CHECK(mixed.y.dtype() == k.dtype);
    if (mixed.dw.defined()) CHECK(mixed.dw.dtype() == pdt);
    check_vs("cpu composed mix", mixed, ref, tol(k.dtype));
  }
  // (Not at the far mean: the composition's float32 sums of values near 100 are
  // its own error, not the kernels'.)
  if (k.dtype == kFloat32 && n > 1 && c > 1 && k.misalign == 0 && k.offset < 10) {
    const Run composed = run(k, in, kCUDA, kFloat32, /*view=*/true);
    CHECK(composed.node != "BatchNormBackward");
    CHECK(composed.node != "BatchNormReluBackward");
    check_vs("cuda float32 composed", composed, ref, tol(kFloat32));
    CHECK(err(values(gpu.y), values(composed.y)) <= tol(kFloat32));
    CHECK(err(values(gpu.dx), values(composed.dx), ref.dx_scale) <= tol(kFloat32));
  }
}

}  // namespace

TEST_CASE(
    "kernels/batch_norm: training output, running statistics and gradients match the "
    "reference" *
    doctest::test_suite("cuda")) {
  uint64_t seed = 1;
  const std::vector<Shape> shapes = {{2, 3, 5, 7},     {5, 3, 4, 4}, {3, 4, 8, 8}, {4, 5},
                                     {16, 1},          {8, 1, 9, 9}, {1, 1, 1, 2}, {2, 1},
                                     {1, 2, 1, 65537}, {2, 7, 3}};
  for (const Shape& s : shapes)
    for (DType dtype : {kFloat32, kBFloat16})
      for (bool affine : {true, false}) {
        Case k{s, dtype, affine};
        check_case(k, seed += 8);
        k.running = false;
        check_case(k, seed += 8);
      }
}

TEST_CASE("kernels/batch_norm: eval uses the running statistics" * doctest::test_suite("cuda")) {
  uint64_t seed = 500;
  for (const Shape& s : std::vector<Shape>{
           {2, 3, 5, 7}, {4, 5}, {1, 1, 1, 2}, {3, 4, 8, 8}, {1, 2, 1, 65537}, {6, 1, 3, 3}})
    for (DType dtype : {kFloat32, kBFloat16})
      for (bool affine : {true, false}) check_case(Case{s, dtype, affine, true, false}, seed += 8);
}

TEST_CASE("kernels/batch_norm: momentum, eps, a misaligned input and a mean far from zero" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 900;
  for (DType dtype : {kFloat32, kBFloat16})
    for (double momentum : {0.0, 0.3, 1.0})
      for (double eps : {0.0, 1e-3, 0.5}) {
        Case k{{4, 6, 5, 5}, dtype};
        k.momentum = momentum;
        k.eps = eps;
        check_case(k, seed += 8);
        k.training = false;
        check_case(k, seed += 8);
      }
  for (DType dtype : {kFloat32, kBFloat16})
    for (int64_t misalign : {1, 3}) {
      Case k{{3, 4, 8, 8}, dtype};
      k.misalign = misalign;
      check_case(k, seed += 8);
    }
  // Values 100 + 2 N(0, 1): E[x^2] - E[x]^2 in float32 would be off by ~1e-4 there
  // (x^2 ~ 1e4, its float32 spacing ~1e-3, the variance 4).
  Case far{{16, 4, 32, 32}, kFloat32};
  far.offset = 100.0;
  check_case(far, seed += 8);
}

TEST_CASE("kernels/batch_norm: a bfloat16 input with float32 parameters (autocast's mix)" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 1700;
  for (const Shape& s : std::vector<Shape>{{2, 3, 5, 7}, {4, 5}, {3, 4, 8, 8}, {8, 64, 16, 16}})
    for (bool training : {true, false})
      for (bool affine : {true, false}) {
        Case k{s, kBFloat16, affine, true, training};
        k.params_f32 = true;
        check_case(k, seed += 8);
      }
}

TEST_CASE("kernels/batch_norm: batch_norm_relu, the ReLU in the same kernels" *
          doctest::test_suite("cuda")) {
  uint64_t seed = 2100;
  for (const Shape& s : std::vector<Shape>{{2, 3, 5, 7}, {4, 5}, {3, 4, 8, 8}, {8, 64, 16, 16}})
    for (DType dtype : {kFloat32, kBFloat16})
      for (bool training : {true, false})
        for (bool affine : {true, false}) {
          Case k{s, dtype, affine, true, training};
          k.relu = true;
          check_case(k, seed += 8);
          if (dtype == kBFloat16) {
            k.params_f32 = true;
            check_case(k, seed += 8);
          }
        }
}

TEST_CASE("kernels/batch_norm: the benchmark's 128x64x32x32 in float32 and bfloat16" *
          doctest::test_suite("cuda")) {
  check_case(Case{{128, 64, 32, 32}, kFloat32}, 1300);
  check_case(Case{{128, 64, 32, 32}, kBFloat16}, 1308);
}

// The statistics the forward keeps for backward (the kernel table's mean and
// invstd outputs) against the reference's, in training and in eval.
TEST_CASE("kernels/batch_norm: the saved mean and 1/std" * doctest::test_suite("cuda")) {
  uint64_t seed = 1500;
  for (const Shape& s :
       std::vector<Shape>{{2, 3, 5, 7}, {128, 64, 32, 32}, {4, 5}, {1, 2, 1, 65537}})
    for (DType dtype : {kFloat32, kBFloat16})
      for (bool training : {true, false}) {
        Case k{s, dtype, true, true, training};
        INFO(describe(k));
        const Inputs in = make_inputs(k, seed += 8);
        const int64_t n = s[0], c = s[1], m = numel_of(s) / (n * c);
        const Ref ref = reference(in.x.to_vector<double>(), values(in.w), values(in.b),
                                  in.g.to_vector<double>(), values(in.rm), values(in.rv), n, c, m,
                                  training, k.momentum, k.eps);
        const Device dev = Device::cuda(0);
        const kernels::KernelTable& kt = kernels::kernels_for(dev);
        REQUIRE(kt.batch_norm_fused_supported({dev, dtype, n, c, m}) == fused_enabled());
        if (!fused_enabled()) continue;
        const Tensor x = in.x.to(dev, dtype), w = in.w.to(dev, dtype), b = in.b.to(dev, dtype);
        const Tensor rm = in.rm.to(dev, dtype), rv = in.rv.to(dev, dtype);
        Tensor y = empty(s, TensorOptions(dtype).device(dev));
        const TensorOptions f32 = TensorOptions(kFloat32).device(dev);
        Tensor mean = empty({c}, f32), invstd = empty({c}, f32);
        const size_t bytes = kt.batch_norm_workspace_bytes({dev, dtype, n, c, m});
        CHECK(bytes > 0);
        Tensor work =
            empty({static_cast<int64_t>(bytes / 8 + 1)}, TensorOptions(kFloat64).device(dev));
        kt.batch_norm_fused({dev, dtype, x.raw_data(), w.raw_data(), b.raw_data(), rm.raw_data(),
                             rv.raw_data(), y.raw_data(), mean.raw_data(), invstd.raw_data(), n, c,
                             m, training, k.momentum, k.eps, work.raw_data()});
        CHECK(err(values(mean), ref.mean) <= 1e-5);
        CHECK(err(values(invstd), ref.invstd) <= 1e-5);
        CHECK(err(values(y), ref.y) <= tol(dtype));
        CHECK(err(values(rm), ref.rm) <= tol(dtype));
        CHECK(err(values(rv), ref.rv) <= tol(dtype));
      }
}

TEST_CASE("kernels/batch_norm: the same input gives the same bits" * doctest::test_suite("cuda")) {
  const Shape s{64, 32, 16, 16};
  const TensorOptions gpu = TensorOptions(kFloat32).device(kCUDA);
  Tensor x = randn64(s, 1700).to(kCUDA, kFloat32), g = randn64(s, 1701).to(kCUDA, kFloat32);
  Tensor w = randn64({32}, 1702).to(kCUDA, kFloat32), b = randn64({32}, 1703).to(kCUDA, kFloat32);
  auto once = [&] {
    Tensor xr = x.detach().set_requires_grad(true), wr = w.detach().set_requires_grad(true),
           br = b.detach().set_requires_grad(true);
    Tensor rm = zeros({32}, gpu), rv = ones({32}, gpu);
    Tensor y = batch_norm(xr, rm, rv, wr, br, true);
    y.backward(g);
    std::vector<float> all;
    for (const Tensor& t : {y, xr.grad(), wr.grad(), br.grad(), rm, rv}) {
      const std::vector<float> v = t.detach().to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const std::vector<float> first = once();
  for (int i = 0; i < 3; ++i)
    CHECK(std::memcmp(once().data(), first.data(), first.size() * 4) == 0);
}
