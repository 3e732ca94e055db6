// The meta device (core/meta.h): shapes without data through every kernel family,
// the mirrored device's choices (fused ops, workspaces, autocast, library
// workspaces), its allocator, and the errors for code that reads values or mixes
// meta and real tensors.
#include <doctest/doctest.h>

#include <sstream>

#include "core/anomaly.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/kernel_table.h"
#include "core/memory.h"
#include "core/memory/backends.h"
#include "core/meta.h"
#include "core/ops.h"
#include "cuda/blas.h"
#include "cuda/kernels/mse.h"
#include "error_text.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

MetaDeviceOptions mirroring(DeviceType t, size_t capacity = kNoCapacityLimit) {
  return MetaDeviceOptions().mirror_device(t).capacity_bytes(capacity);
}

// Bytes the allocator hands out for a request (512-byte rounding, default options).
int64_t rounded(int64_t bytes) {
  return (bytes + 511) / 512 * 512;
}

}  // namespace

TEST_CASE("meta/device: spelled meta, index 0, one of the kernel table's devices") {
  CHECK(Device("meta") == kMeta);
  CHECK(kMeta.str() == "meta");
  CHECK(kMeta.is_meta());
  CHECK(Device(DeviceType::Meta, 3).index == 0);
  CHECK(contains(error_of([] { check_device(Device("meta")); }), "(no error)"));
  CHECK(contains(error_of([] { (void)Device("meta:1"); }), "unknown device 'meta:1'"));
}

TEST_CASE("meta/kernels: every kernel family has a meta kernel (and a CUDA one)") {
  // A family added to core/base/kernel_families.h without its meta kernel fails here by name.
  for (const char* family : kernels::missing_families(DeviceType::Meta))
    FAIL_CHECK("the meta device has no kernel for family ", family);
  for (const char* family : kernels::missing_families(DeviceType::CUDA))
    FAIL_CHECK("the CUDA device has no kernel for family ", family);
  CHECK(kernels::missing_families(DeviceType::Meta).empty());
}

TEST_CASE("meta/tensor: shapes, strides and dtypes, bytes from the meta allocator") {
  MetaDeviceScope scope(mirroring(DeviceType::CUDA));
  Tensor t = empty({3, 5}, TensorOptions(kFloat64).device(kMeta));
  CHECK(t.device() == kMeta);
  CHECK(t.sizes() == Shape{3, 5});
  CHECK(t.strides() == Shape{5, 1});
  CHECK(t.dtype() == kFloat64);
  Tensor v = t.t();
  CHECK(v.strides() == Shape{1, 5});
  CHECK(memory_allocated(kMeta) == rounded(3 * 5 * 8));
  CHECK(&caching_allocator(kMeta) == &scope.allocator());
  Tensor s = (t.t().contiguous() * 2.0).sum(0);  // ops run, computing nothing
  CHECK(s.sizes() == Shape{3});
  CHECK(s.device() == kMeta);
  // The simulated device has no memory: addresses are not host memory.
  CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) >= (uintptr_t{1} << 60));
}

TEST_CASE("meta/errors: reading values names the op and asks for shape-only code") {
  Tensor t = zeros({2, 2}, kMeta);
  const std::string item = error_of([&] { (void)t.sum().item(); });
  CHECK(contains(item, "item(): a tensor on meta has a shape but no values"));
  CHECK(contains(item, "needs shape-only code"));
  CHECK(contains(error_of([&] { (void)t.to_vector<float>(); }), "to_vector(): a tensor on meta"));
  CHECK(contains(error_of([&] {
                   std::ostringstream os;
                   os << t;
                 }),
                 "printing a tensor (str(), operator<<): a tensor on meta"));
  CHECK(contains(error_of([&] { (void)t.to(kCPU); }), "to(cpu): a tensor on meta"));
  CHECK(contains(error_of([&] { (void)t.cpu(); }), "shape-only"));
  CHECK(contains(error_of([&] { (void)t.to(kCUDA); }), "to(cuda): a tensor on meta"));
  Tensor host = zeros({2, 2});
  CHECK(contains(error_of([&] { copy_(host, t); }), "to(cpu): a tensor on meta"));
  {
    DetectAnomalyGuard anomaly(true);
    Tensor w = ones({2, 2}, TensorOptions().device(kMeta).requires_grad());
    CHECK(contains(error_of([&] { (void)(w * 2.0); }), "anomaly detection (set_detect_anomaly)"));
  }
}

TEST_CASE("meta/errors: meta and real tensors do not mix; to(kMeta) copies nothing") {
  Tensor m = ones({2, 3}, kMeta);
  Tensor c = ones({2, 3});
  CHECK(contains(error_of([&] { (void)(m + c); }),
                 "add: operands are on different devices (meta and cpu)"));
  CHECK(contains(error_of([&] { (void)matmul(c, m.t()); }), "cpu and meta"));
  Tensor w = ones({4, 3});
  CHECK(contains(error_of([&] { (void)linear(m, w); }), "meta and cpu"));
  CHECK(contains(error_of([&] { (void)add_layer_norm(c, m, {3}); }),
                 "add_layer_norm: operands are on different devices (cpu and meta)"));
  Tensor moved = c.to(kMeta);
  CHECK(moved.device() == kMeta);
  CHECK(moved.sizes() == c.sizes());
  CHECK(tensor({1.0, 2.0}, kMeta).device() == kMeta);
}

TEST_CASE("meta/autograd: backward and optimizers make gradients and state on meta") {
  MetaDeviceScope scope(mirroring(DeviceType::CUDA));
  auto model = std::make_shared<nn::Linear>(nn::LinearOptions(8, 4).device(kMeta));
  CHECK(model->weight.device() == kMeta);
  optim::Adam adam(model->parameters(), optim::AdamOptions(1e-3));
  Tensor x = randn({16, 8}, kMeta), y = randn({16, 4}, kMeta);
  Tensor loss = mse_loss(model->forward(x), y);
  loss.backward();
  CHECK(model->weight.grad().device() == kMeta);
  CHECK(model->weight.grad().sizes() == Shape{4, 8});
  CHECK(model->bias.grad().sizes() == Shape{4});
  adam.step();
  const optim::ParamState* state = adam.state(model->weight);
  REQUIRE(state != nullptr);
  CHECK(state->device_step.device() == kMeta);
  CHECK(state->device_step.dtype() == kInt64);
  CHECK(state->buffers.size() == 2);
  for (const auto& [name, buffer] : state->buffers) CHECK(buffer.device() == kMeta);
}

TEST_CASE("meta/mirror: the fused MSE of CUDA or the composed one of the CPU, by bytes") {
  const int64_t n = 1000;  // 4000 bytes of float32: 4096 in the allocator
  for (DeviceType mirror : {DeviceType::CUDA, DeviceType::CPU}) {
    CAPTURE(Device(mirror));
    MetaDeviceScope scope(mirroring(mirror));
    Tensor pred = zeros({n}, TensorOptions().device(kMeta).requires_grad());
    Tensor target = zeros({n}, kMeta);
    scope.allocator().reset_peak_memory_stats();
    const int64_t before = memory_allocated(kMeta);
    Tensor loss = mse_loss(pred, target);
    const int64_t peak = max_memory_allocated(kMeta) - before;
    if (mirror == DeviceType::CUDA) {
      // d_pred stashed, the loss, and the kernel's workspace of partial sums.
      CHECK(peak == rounded(4 * n) + rounded(4) +
                        rounded(static_cast<int64_t>((cuda::mse_workspace_bytes(n) + 7) / 8 * 8)));
      CHECK(std::string(loss.grad_fn()->name()) == "MseLossBackward");
    } else {
      // pred - target (kept for backward), its square, and the mean.
      CHECK(peak == rounded(4 * n) * 2 + rounded(4));
    }
  }
}

TEST_CASE("meta/mirror: linear_cross_entropy holds one chunk of logits, not all of them") {
  // A language model's head as CUDA would run it under bf16 autocast: 4096 rows, 8000
  // classes (65.5 MB of bfloat16 logits, twice that with their gradient).
  const int64_t rows = 4096, classes = 8000, in = 64, chunk = 512;
  const int64_t logits_bytes = rows * classes * 2;
  auto peak_of = [&](bool chunked) {
    MetaDeviceScope scope(mirroring(DeviceType::CUDA));
    Tensor x = zeros({rows, in}, TensorOptions().device(kMeta).requires_grad());
    Tensor w = zeros({classes, in}, TensorOptions().device(kMeta).requires_grad());
    Tensor t = zeros({rows}, TensorOptions(kInt64).device(kMeta));
    scope.allocator().reset_peak_memory_stats();
    const int64_t before = memory_allocated(kMeta);
    AutocastGuard bf16;
    Tensor loss =
        chunked ? linear_cross_entropy(x, w, t, {}, chunk) : cross_entropy(linear(x, w), t);
    loss.backward();
    CHECK(x.grad().dtype() == kFloat32);
    CHECK(w.grad().dtype() == kFloat32);
    return max_memory_allocated(kMeta) - before;
  };
  const int64_t chunked = peak_of(true), composed = peak_of(false);
  CAPTURE(chunked);
  CAPTURE(composed);
  // Composed: the logits and their gradient live together at the loss.
  CHECK(composed >= 2 * logits_bytes);
  // Chunked: one chunk's logits and gradient (2 x 8.2 MB), the float32 weight
  // gradient (2 MB) with a chunk's share, the input's (1 MB) and bf16 copies.
  CHECK(chunked < 2 * logits_bytes * chunk / rows + 8 * classes * in + 12 * rows * in);
}

TEST_CASE(
    "meta/mirror: linear_cross_entropy sums a float64 weight's shares itself, not in the "
    "GEMM") {
  // Under autocast a float32 input with a float64 weight computes in bfloat16, the
  // weight's gradient float64. The weight-gradient GEMM writes float32 or the compute
  // dtype only, so it takes the chunks' shares of a float32 weight's gradient and none
  // of a float64 one's (those are products cast and added).
  struct Shares final : MetaKernelObserver {
    int gemm_shares = 0;
    void linear_weight_grad_fused(const kernels::LinearWeightGradArgs&) override { ++gemm_shares; }
  };
  auto shares_of = [](DType weight_dtype) {
    Shares heard;
    MetaDeviceScope scope(mirroring(DeviceType::CUDA).observe(&heard));
    Tensor x = zeros({64, 32}, TensorOptions().device(kMeta).requires_grad());
    Tensor w = zeros({40, 32}, TensorOptions(weight_dtype).device(kMeta).requires_grad());
    Tensor t = zeros({64}, TensorOptions(kInt64).device(kMeta));
    AutocastGuard bf16;
    linear_cross_entropy(x, w, t, {}, 16).backward();
    CHECK(w.grad().dtype() == weight_dtype);
    return heard.gemm_shares;
  };
  CHECK(shares_of(kFloat32) == 4);  // one per chunk of 16 rows
  CHECK(shares_of(kFloat64) == 0);
}

TEST_CASE("meta/observer: hears each kernel with the mirrored device's arguments") {
  struct Heard final : MetaKernelObserver {
    std::vector<std::string> names;
    kernels::BinaryArgs binary_args{};
    kernels::LinearArgs linear_args{};
    void binary(const kernels::BinaryArgs& a) override {
      names.push_back("binary");
      binary_args = a;
    }
    void linear_fused(const kernels::LinearArgs& a) override {
      names.push_back("linear_fused");
      linear_args = a;
    }
    void sum(const kernels::SumArgs&) override { names.push_back("sum"); }
    void sum_workspace_bytes(const kernels::ReduceShape&) override {
      names.push_back("sum_workspace_bytes");  // a query: never reported
    }
  } heard;
  {
    MetaDeviceScope scope(mirroring(DeviceType::CUDA).observe(&heard));
    Tensor x = ones({64, 128}, kMeta), w = ones({32, 128}, kMeta);
    Tensor y = linear(x, w);               // (64, 32), the fused Linear on CUDA
    Tensor z = add(y, ones({32}, kMeta));  // broadcast over rows
    (void)sum(z);
    CHECK(heard.names == std::vector<std::string>{"linear_fused", "binary", "sum"});
    CHECK(heard.linear_args.m == 64);
    CHECK(heard.linear_args.n == 32);
    CHECK(heard.linear_args.k == 128);
    CHECK(heard.linear_args.dtype == kFloat32);
    CHECK(heard.binary_args.op == BinaryOp::Add);
    CHECK(heard.binary_args.n == 64 * 32);
    CHECK(heard.binary_args.xl.contiguous);
    CHECK_FALSE(heard.binary_args.yl.contiguous);  // the (32) operand broadcast
  }
  // Its scope gone, the observer hears nothing more.
  const size_t before = heard.names.size();
  (void)add(ones({4}, kMeta), ones({4}, kMeta));
  CHECK(heard.names.size() == before);
}

TEST_CASE("meta/layer_norm: the fused backward folds d_x into the residual stream's gradient") {
  // h = x + 3 layer_norm(x), a transformer block's residual: x's gradient is h's
  // (passed on by the add) plus layer norm's d_x. The fused backward writes their sum
  // itself: no add kernel runs in backward, and the kernel is given the sum to add.
  struct Seen final : MetaKernelObserver {
    int adds = 0, folded = 0, unfolded = 0;
    void binary(const kernels::BinaryArgs& a) override { adds += a.op == BinaryOp::Add; }
    void layer_norm_backward_fused(const kernels::LayerNormBackwardArgs& a) override {
      (a.d_x_add != nullptr ? folded : unfolded)++;
    }
  } seen;
  MetaDeviceScope scope(mirroring(DeviceType::CUDA).observe(&seen));
  Tensor x = zeros({8, 64}, TensorOptions().device(kMeta).requires_grad());
  Tensor h = add(x, mul(layer_norm(x, {64}), 3.0));
  seen.adds = 0;
  h.backward(ones({8, 64}, kMeta));
  CHECK(seen.adds == 0);
  CHECK(seen.folded == 1);
  CHECK(seen.unfolded == 0);
  CHECK(x.grad().sizes() == x.sizes());
  // Alone (nothing to fold into) it writes d_x as before.
  Tensor x1 = zeros({8, 64}, TensorOptions().device(kMeta).requires_grad());
  layer_norm(x1, {64}).backward(ones({8, 64}, kMeta));
  CHECK(seen.unfolded == 1);
}

// add_layer_norm on either mirrored device: one fused norm given the residual and no add
// kernel forward; with its switch off, an add and a norm without one. The same bytes
// allocated at the peak either way (the sum, the result, the statistics), forward and
// backward, and the fold of d_x into the sum's gradient the same.
TEST_CASE("meta/add_layer_norm: one fused pass forward, the same allocations as add then norm") {
  struct Seen final : MetaKernelObserver {
    int adds = 0, with_residual = 0, without = 0, folded = 0;
    void binary(const kernels::BinaryArgs& a) override { adds += a.op == BinaryOp::Add; }
    void layer_norm_fused(const kernels::LayerNormArgs& a) override {
      (a.residual != nullptr ? with_residual : without)++;
      if (a.residual != nullptr) CHECK(a.residual_bf16);
    }
    void layer_norm_backward_fused(const kernels::LayerNormBackwardArgs& a) override {
      folded += a.d_x_add != nullptr;
    }
  };
  ember::testing::SwitchGuard guard(detail::add_layer_norm_fused, detail::set_add_layer_norm_fused);
  for (DeviceType mirror : {DeviceType::CUDA, DeviceType::CPU}) {
    int64_t peaks[2] = {0, 0};
    for (bool fused : {true, false}) {
      INFO("mirror ", Device(mirror), ", fused ", fused);
      detail::set_add_layer_norm_fused(fused);
      Seen seen;
      MetaDeviceScope scope(mirroring(mirror).observe(&seen));
      Tensor x = zeros({16, 64}, TensorOptions().device(kMeta).requires_grad());
      Tensor branch = zeros({16, 64}, TensorOptions(kBFloat16).device(kMeta).requires_grad());
      scope.allocator().reset_peak_memory_stats();
      const int64_t before = memory_allocated(kMeta);
      const auto [sum, y] = add_layer_norm(x, branch, {64});
      CHECK(sum.dtype() == kFloat32);
      CHECK(seen.adds == (fused ? 0 : 1));
      CHECK(seen.with_residual == (fused ? 1 : 0));
      CHECK(seen.without == (fused ? 0 : 1));
      add(sum, mul(y, 2.0)).backward(ones({16, 64}, kMeta));
      CHECK(seen.folded == 1);
      CHECK(branch.grad().dtype() == kBFloat16);
      peaks[fused ? 0 : 1] = max_memory_allocated(kMeta) - before;
    }
    CHECK(peaks[0] == peaks[1]);
  }
  detail::set_add_layer_norm_fused(true);  // the fused pass, for what follows
  // nn::LayerNorm::forward_residual under autocast with autocast_output (a CUDA mirror):
  // the sum in float32, the result in bfloat16 written by the fused pass itself.
  Seen seen;
  MetaDeviceScope scope(mirroring(DeviceType::CUDA).observe(&seen));
  nn::LayerNorm ln(nn::LayerNormOptions({64}).autocast_output(true));
  ln.to(kMeta);
  AutocastGuard bf16;
  const auto [sum, y] = ln.forward_residual(
      zeros({16, 64}, kMeta), zeros({16, 64}, TensorOptions(kBFloat16).device(kMeta)));
  CHECK(sum.dtype() == kFloat32);
  CHECK(y.dtype() == kBFloat16);
  CHECK(seen.with_residual == 1);
  CHECK(seen.adds == 0);
}

TEST_CASE("meta/split: the pieces' gradients are copied into an unfilled sum, as a cat") {
  // q, k and v of a (B, T, 3C) projection, all used: backward writes each piece's
  // gradient once (3 copies) and fills nothing; with one piece unused, its region
  // alone is zero-filled.
  struct Seen final : MetaKernelObserver {
    int fills = 0, copies = 0;
    int64_t filled = 0;
    void fill(const kernels::FillArgs& a) override {
      ++fills;
      filled += a.n;
    }
    void cast(const kernels::CastArgs&) override { ++copies; }
  };
  for (bool all_used : {true, false}) {
    Seen seen;
    MetaDeviceScope scope(mirroring(DeviceType::CUDA).observe(&seen));
    Tensor qkv = zeros({2, 5, 12}, TensorOptions(kBFloat16).device(kMeta).requires_grad());
    const std::vector<Tensor> p = split(qkv, 4, 2);
    Tensor y = all_used ? p[0] * p[1] * p[2] : p[0] * p[2];
    const Tensor g = zeros({2, 5, 4}, TensorOptions(kBFloat16).device(kMeta));
    seen = Seen();
    y.backward(g);
    INFO("all_used=", all_used);
    CHECK(qkv.grad().sizes() == Shape{2, 5, 12});
    CHECK(seen.fills == (all_used ? 0 : 1));
    CHECK(seen.filled == (all_used ? 0 : 2 * 5 * 4));
    CHECK(seen.copies == (all_used ? 3 : 2));  // one per used piece
  }
}

TEST_CASE("meta/layer_norm: autocast_output returns the autocast dtype with no cast kernel") {
  struct Casts final : MetaKernelObserver {
    int casts = 0, bf16_out = 0, bf16_grad = 0;
    void cast(const kernels::CastArgs&) override { ++casts; }
    void layer_norm_fused(const kernels::LayerNormArgs& a) override { bf16_out += a.y_bf16; }
    void layer_norm_backward_fused(const kernels::LayerNormBackwardArgs& a) override {
      bf16_grad += a.d_y_bf16;
    }
  } seen;
  MetaDeviceScope scope(mirroring(DeviceType::CUDA).observe(&seen));
  nn::LayerNorm ln(nn::LayerNormOptions({64}).autocast_output(true));
  ln.to(kMeta);
  Tensor x = zeros({8, 64}, TensorOptions().device(kMeta).requires_grad());
  CHECK(ln.forward(x).dtype() == kFloat32);  // autocast off: as PyTorch
  {
    AutocastGuard bf16;
    const Tensor y = ln.forward(x);
    CHECK(y.dtype() == kBFloat16);
    const Tensor g = zeros({8, 64}, TensorOptions(kBFloat16).device(kMeta));
    seen.casts = 0;
    y.backward(g);
  }
  CHECK(seen.bf16_out == 1);
  CHECK(seen.bf16_grad == 1);
  CHECK(seen.casts == 0);
  CHECK(x.grad().dtype() == kFloat32);
  // Without the option autocast keeps layer_norm in float32, as PyTorch.
  nn::LayerNorm plain(nn::LayerNormOptions({64}));
  plain.to(kMeta);
  AutocastGuard bf16;
  CHECK(plain.forward(x).dtype() == kFloat32);
}

TEST_CASE("meta/mirror: autocast applies when the meta device mirrors CUDA") {
  for (DeviceType mirror : {DeviceType::CUDA, DeviceType::CPU}) {
    MetaDeviceScope scope(mirroring(mirror));
    Tensor x = ones({4, 8}, kMeta), w = ones({3, 8}, kMeta);
    AutocastGuard bf16;
    CHECK(linear(x, w).dtype() == (mirror == DeviceType::CUDA ? kBFloat16 : kFloat32));
  }
}

TEST_CASE("meta/mirror: cuBLAS and cuBLASLt workspaces come out of the capacity") {
  const int64_t blas = static_cast<int64_t>(cuda::blas_workspace_bytes());
  const int64_t lt = static_cast<int64_t>(cuda::lt_workspace_bytes());
  {
    MetaDeviceScope scope(mirroring(DeviceType::CUDA));
    Tensor a = ones({64, 64}, kMeta);
    (void)matmul(a, a);
    CHECK(scope.uses(MetaLibrary::cublas));
    CHECK_FALSE(scope.uses(MetaLibrary::cublaslt));
    CHECK(scope.library_bytes() == static_cast<size_t>(blas));
    (void)matmul(a, a);  // once per device
    CHECK(scope.library_bytes() == static_cast<size_t>(blas));
    // A Linear large enough for cuBLASLt (cuda/gemm_dispatch.h: 2^21 FLOPs and up).
    Tensor x = ones({256, 256}, kMeta), w = ones({256, 256}, kMeta);
    (void)linear(x, w);
    CHECK(scope.uses(MetaLibrary::cublaslt));
    CHECK(scope.library_bytes() == static_cast<size_t>(blas + lt));
    CHECK(memory_allocated(kMeta) == rounded(64 * 64 * 4) + 2 * rounded(256 * 256 * 4));
  }
  {
    MetaDeviceScope scope(mirroring(DeviceType::CPU));
    Tensor a = ones({64, 64}, kMeta);
    (void)matmul(a, a);
    CHECK(scope.library_bytes() == 0);
  }
  {
    // 40 MiB: the first 2 MiB segment and cuBLAS's 32 MiB fit, cuBLASLt's does not.
    MetaDeviceScope scope(mirroring(DeviceType::CUDA, size_t{40} << 20));
    Tensor a = ones({64, 64}, kMeta);
    (void)matmul(a, a);
    Tensor x = ones({256, 256}, kMeta), w = ones({256, 256}, kMeta);
    Tensor y;
    const std::string e = error_of([&] { y = linear(x, w); });
    CHECK(
        contains(e, "the cuBLASLt workspace (32.00 MiB, allocated outside the caching allocator"));
    CHECK_THROWS_AS((void)linear(x, w), OutOfMemoryError);
  }
}

TEST_CASE("meta/capacity: the simulated device runs out of memory as a GPU would") {
  MetaDeviceScope scope(mirroring(DeviceType::CUDA, size_t{64} << 20));
  Tensor a = empty({int64_t{10} << 20}, kMeta);  // 40 MiB of float32
  const std::string e = error_of([&] { (void)empty({int64_t{12} << 20}, kMeta); });
  CHECK(contains(e, "CUDA out of memory. Tried to allocate 48.00 MiB"));
  CHECK(contains(e, "total capacity of 64.00 MiB"));
  CHECK(memory_allocated(kMeta) == int64_t{40} << 20);
  CHECK_THROWS_AS((void)empty({int64_t{12} << 20}, kMeta), OutOfMemoryError);
}

TEST_CASE("meta/data: DataLoader batches on meta have shapes and come from the meta allocator") {
  Tensor x = randn({100, 6}), y = randn({100, 2});
  MetaDeviceScope scope(mirroring(DeviceType::CUDA));
  nn::DataLoader loader(nn::TensorDataset(x, y), nn::DataLoaderOptions(32).device(kMeta));
  std::vector<int64_t> rows;
  for (const nn::Example& b : loader) {
    CHECK(b.data.device() == kMeta);
    CHECK(b.target.device() == kMeta);
    CHECK(b.data.size(1) == 6);
    CHECK(b.target.size(1) == 2);
    rows.push_back(b.data.size(0));
    CHECK(memory_allocated(kMeta) ==
          rounded(b.data.size(0) * 6 * 4) + rounded(b.data.size(0) * 2 * 4));
  }
  CHECK(rows == std::vector<int64_t>{32, 32, 32, 4});
  CHECK(memory_allocated(kMeta) == 0);
}

TEST_CASE("meta/scope: scopes nest, each with its own allocator and mirror") {
  const DeviceType outer_default = meta_mirror();
  CHECK(outer_default == DeviceType::CUDA);
  {
    MetaDeviceScope a(mirroring(DeviceType::CPU));
    CHECK(meta_mirror() == DeviceType::CPU);
    Tensor t = empty({128}, kMeta);
    {
      MetaDeviceScope b(mirroring(DeviceType::CUDA));
      CHECK(meta_mirror() == DeviceType::CUDA);
      CHECK(memory_allocated(kMeta) == 0);
    }
    CHECK(&meta_allocator() == &a.allocator());
    CHECK(memory_allocated(kMeta) == 512);
  }
  CHECK(meta_mirror() == outer_default);
}

TEST_CASE("memory/simulated: SimulatedMemory::none hands out addresses and no memory") {
  memory::SimulatedBackend b(size_t{8} << 20, 0, memory::SimulatedMemory::none);
  void* p = b.raw_alloc(size_t{2} << 20);
  void* q = b.raw_alloc(size_t{4} << 20);
  REQUIRE(p != nullptr);
  REQUIRE(q != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(q) == reinterpret_cast<uintptr_t>(p) + (size_t{2} << 20));
  CHECK(b.raw_alloc(size_t{4} << 20) == nullptr);  // 6 MiB used of 8
  CHECK(b.used() == size_t{6} << 20);
  b.raw_free(p);
  CHECK(b.used() == size_t{4} << 20);
  unsigned char byte = 0;
  CHECK(
      contains(error_of([&] { b.fill(q, 0xAB, 1, nullptr); }), "simulated device without memory"));
  CHECK(
      contains(error_of([&] { b.read(&byte, q, 1, nullptr); }), "simulated device without memory"));
  b.raw_free(q);
}

TEST_CASE("meta/capture: MetaCaptureScope refuses what a CUDA graph capture refuses") {
  MetaDeviceScope scope;
  const TensorOptions o = TensorOptions(kFloat32).device(kMeta);
  Tensor w = empty({4, 3}, o).set_requires_grad(true);
  const Tensor x = empty({2, 3}, o);
  {
    MetaCaptureScope capture;
    CHECK(is_capturing(kMeta));
    // Kernels and autograd run as usual.
    Tensor y = sum(linear(x, w, Tensor()));
    y.backward();
    CHECK(w.grad().sizes() == w.sizes());
    // A copy from the host, a read of a value, and a synchronisation are refused with
    // CUDA's words.
    const std::string copy = error_of([&] { (void)tensor({1.0, 2.0}).to(kMeta); });
    CHECK(contains(copy, "to(): cannot copy from host memory"));
    CHECK(contains(copy, "while a CUDA graph is being captured"));
    CHECK(contains(error_of([&] { (void)y.item(); }), "item(): cannot"));
    CHECK(contains(error_of([&] { synchronize(kMeta); }), "cannot"));
    // Random draws take graph counters (dropout inside a captured step).
    CHECK_NOTHROW((void)dropout(x, 0.5, true));
    {
      MetaCaptureScope nested;
      CHECK(is_capturing(kMeta));
    }
    CHECK(is_capturing(kMeta));
  }
  CHECK_FALSE(is_capturing(kMeta));
  CHECK_NOTHROW((void)tensor({1.0, 2.0}).to(kMeta));
}
