// The fused attention on the meta device (core/ops/attention_fused.cpp): mirroring
// CUDA it takes the fused path, allocates what CUDA would (O and the float32
// log-sum-exp in forward; d_q, d_k, d_v and the workspace CUDA's query answers in
// backward) and attaches the fused backward; mirroring the CPU the predicate says
// no. No GPU needed.
#include <doctest/doctest.h>

#include "core/autograd.h"
#include "core/memory.h"
#include "core/meta.h"
#include "core/ops.h"
#include "core/ops/split_gradient.h"
#include "cuda/kernels/attention.h"
#include "error_text.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

int64_t rounded(int64_t bytes) {  // the allocator's 512-byte rounding
  return (bytes + 511) / 512 * 512;
}

}  // namespace

TEST_CASE("meta/attention: the fused path's bytes mirror CUDA's, the CPU composes") {
  const int64_t b = 1, h = 2, t = 100, d = 64;
  {
    MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CUDA));
    const TensorOptions opts = TensorOptions(kBFloat16).device(kMeta).requires_grad();
    Tensor q = zeros({b, h, t, d}, opts), k = zeros({b, h, t, d}, opts),
           v = zeros({b, h, t, d}, opts);
    REQUIRE(detail::fused_attention_supported(q, k, v));
    const int64_t before = memory_allocated(kMeta);
    Tensor o = detail::fused_attention(q, k, v, true, 0.125);
    CHECK(o.sizes() == Shape{b, h, t, d});
    CHECK(o.dtype() == kBFloat16);
    CHECK(std::string(o.grad_fn()->name()) == "FusedAttentionBackward");
    // O (bf16) and the log-sum-exp (float32) stay alive with the graph.
    CHECK(memory_allocated(kMeta) - before == rounded(b * h * t * d * 2) + rounded(b * h * t * 4));

    cuda::AttentionProblem p;
    p.batch = b, p.heads = h, p.q_len = t, p.kv_len = t, p.head_dim = d;
    const int64_t ws = static_cast<int64_t>(
        (cuda::attention_backward_workspace_bytes(p, cuda::kAttentionDeterministicDefault) + 7) /
        8 * 8);
    Tensor g = zeros({b, h, t, d}, TensorOptions(kBFloat16).device(kMeta));
    scope.allocator().reset_peak_memory_stats();
    const int64_t start = memory_allocated(kMeta);
    o.backward(g);
    // At the backward's peak: d_q, d_k, d_v and the workspace, on top of what lived.
    CHECK(max_memory_allocated(kMeta) - start >= 3 * rounded(b * h * t * d * 2) + rounded(ws));
    CHECK(q.grad().sizes() == Shape{b, h, t, d});
    CHECK(v.grad().sizes() == Shape{b, h, t, d});
  }
  {
    MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CPU));
    Tensor q = zeros({b, h, t, d}, TensorOptions(kBFloat16).device(kMeta));
    CHECK_FALSE(detail::fused_attention_supported(q, q, q));
  }
}

TEST_CASE("meta/attention: dropout in the fused path draws the composed path's counters") {
  // The same allocations as without dropout (the mask is drawn inside the kernels, no
  // tensor holds it), and the generator advanced by the (B, H, Tq, Tk) weights, as the
  // composed path's dropout advances it.
  const int64_t b = 2, h = 3, tq = 50, tk = 70, d = 128;
  MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CUDA));
  const TensorOptions opts = TensorOptions(kBFloat16).device(kMeta).requires_grad();
  Tensor q = zeros({b, h, tq, d}, opts), k = zeros({b, h, tk, d}, opts),
         v = zeros({b, h, tk, d}, opts);
  REQUIRE(detail::fused_attention_supported(q, k, v));
  Generator gen(5);
  gen.set_offset(100);
  const int64_t before = memory_allocated(kMeta);
  Tensor o = detail::fused_attention(q, k, v, false, 0.1, 0.25, &gen);
  CHECK(gen.offset() == 100 + static_cast<uint64_t>(b * h * tq * tk));
  CHECK(memory_allocated(kMeta) - before == rounded(b * h * tq * d * 2) + rounded(b * h * tq * 4));
  o.backward(zeros({b, h, tq, d}, TensorOptions(kBFloat16).device(kMeta)));
  CHECK(k.grad().sizes() == Shape{b, h, tk, d});
  // p = 0 draws nothing; p out of [0, 1) is refused before anything is drawn.
  (void)detail::fused_attention(q, k, v, false, 0.1, 0.0, &gen);
  CHECK(gen.offset() == 100 + static_cast<uint64_t>(b * h * tq * tk));
  CHECK(contains(error_of([&] { (void)detail::fused_attention(q, k, v, false, 0.1, 1.0, &gen); }),
                 "dropout_p must be in [0, 1), got 1"));
  CHECK(gen.offset() == 100 + static_cast<uint64_t>(b * h * tq * tk));
}

TEST_CASE("meta/attention: which masks the fused kernels read") {
  // Bool and bfloat16 additive masks that broadcast to (B, H, Tq, Tk); not float32
  // (another dtype than the query's), not an additive mask that needs its gradient, not
  // a shape that does not broadcast; and never with is_causal.
  const int64_t b = 2, h = 3, tq = 5, tk = 7, d = 64;
  MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CUDA));
  const TensorOptions opts = TensorOptions(kBFloat16).device(kMeta);
  const Tensor q = zeros({b, h, tq, d}, opts), k = zeros({b, h, tk, d}, opts);
  auto meta = [](Shape s, DType t) { return zeros(s, TensorOptions(t).device(kMeta)); };
  CHECK(detail::fused_attention_takes_mask(q, k, meta({tq, tk}, kBool)));
  CHECK(detail::fused_attention_takes_mask(q, k, meta({b, 1, 1, tk}, kBool)));
  CHECK(detail::fused_attention_takes_mask(q, k, meta({b, h, tq, tk}, kBFloat16)));
  CHECK(detail::fused_attention_takes_mask(q, k, meta({1, tk}, kBFloat16)));
  CHECK_FALSE(detail::fused_attention_takes_mask(q, k, meta({tq, tk}, kFloat32)));
  CHECK_FALSE(detail::fused_attention_takes_mask(q, k, meta({tq, tk + 1}, kBool)));
  CHECK_FALSE(detail::fused_attention_takes_mask(q, k, meta({3, 1, tq, tk}, kBool)));
  CHECK_FALSE(detail::fused_attention_takes_mask(q, k, meta({1, 1, 1, tq, tk}, kBool)));
  Tensor needs_grad = meta({tq, tk}, kBFloat16);
  needs_grad.set_requires_grad(true);
  CHECK_FALSE(detail::fused_attention_takes_mask(q, k, needs_grad));
  {
    NoGradGuard no_grad;  // no gradient asked: the kernels read it
    CHECK(detail::fused_attention_takes_mask(q, k, needs_grad));
  }
  CHECK(contains(
      error_of([&] {
        (void)detail::fused_attention(q, k, k, true, 0.1, 0.0, nullptr, meta({tq, tk}, kBool));
      }),
      "a mask and is_causal together"));
  // A mask the kernels take: nothing kept but O (no gradient asked), as without one.
  const Tensor padding = meta({b, 1, 1, tk}, kBool);
  const int64_t before = memory_allocated(kMeta);
  Tensor o = detail::fused_attention(q, k, k, false, 0.1, 0.0, nullptr, padding);
  CHECK(o.sizes() == Shape{b, h, tq, d});
  CHECK(memory_allocated(kMeta) - before == rounded(b * h * tq * d * 2));
}

// q, k and v as a GPT makes them (heads of a (B, T, 3C) projection, strides over H finer
// than over T): the output and the gradients of q, k and v are laid out (B, T, H, D), so
// transpose(1, 2) and reshape to (B, T, C) are views forward and backward. Counted with
// the meta device's observer: the forward and backward copy nothing (no cast kernel),
// against the 4 strided copies per layer a contiguous (B, H, T, D) layout needs.
TEST_CASE("meta/attention: a GPT's head split and merge copy nothing, forward or backward") {
  struct Copies final : MetaKernelObserver {
    int casts = 0;
    void cast(const kernels::CastArgs&) override { ++casts; }
  } copies;
  const int64_t B = 2, T = 24, H = 3, D = 64, C = H * D;
  MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CUDA).observe(&copies));
  Tensor qkv = zeros({B, T, 3 * C}, TensorOptions(kBFloat16).device(kMeta).requires_grad());
  auto heads = [&](int64_t i) {
    return transpose(reshape(slice(qkv, 2, i * C, (i + 1) * C), {B, T, H, D}), 1, 2);
  };
  Tensor q = heads(0), k = heads(1), v = heads(2);
  REQUIRE(detail::fused_attention_supported(q, k, v));
  Tensor o = scaled_dot_product_attention(q, k, v, Tensor(), 0.0, true);
  CHECK(o.sizes() == Shape{B, H, T, D});
  CHECK(o.strides() == Shape{T * H * D, D, H * D, 1});  // (B, T, H, D) storage
  Tensor y = reshape(transpose(o, 1, 2), {B, T, C});
  CHECK(y.is_contiguous());
  CHECK(y.storage() == o.storage());
  y.backward(zeros({B, T, C}, TensorOptions(kBFloat16).device(kMeta)));
  CHECK(qkv.grad().sizes() == qkv.sizes());
  CHECK(copies.casts == 1);  // SliceBackward's first piece copied into the (B, T, 3C) sum
  // A contiguous (B, H, T, D) query keeps the contiguous layout.
  Tensor qc = zeros({B, H, T, D}, TensorOptions(kBFloat16).device(kMeta));
  CHECK(scaled_dot_product_attention(qc, qc, qc, Tensor(), 0.0, true).is_contiguous());
}

// q, k and v split from one (B, T, 3C) projection, as a GPT makes them: with
// detail::set_attention_qkv_grad(true) the fused backward allocates one buffer laid out
// as the projection for the three gradients, which split's backward passes on as the
// projection's gradient (marked, the projection's size, no second buffer); permuted
// operands too; with the switch off, three gradients and split's own sum. The values
// are the GPU's to check (tests/cuda/test_ops_attention_fused.cpp); these are the
// allocations and the wiring, which predict_memory sees.
TEST_CASE("meta/attention: q, k and v split from one projection get one gradient buffer") {
  ember::testing::SwitchGuard guard(detail::attention_qkv_grad, detail::set_attention_qkv_grad);
  const int64_t b = 2, t = 100, h = 3, d = 64, c = h * d;
  MetaDeviceScope scope(MetaDeviceOptions().mirror_device(DeviceType::CUDA));
  for (bool packed : {true, false})
    for (const std::vector<size_t>& order :
         {std::vector<size_t>{0, 1, 2}, std::vector<size_t>{2, 0, 1}}) {
      INFO("packed: ", packed, ", order ", order[0], order[1], order[2]);
      detail::set_attention_qkv_grad(packed);
      Tensor qkv = zeros({b, t, 3 * c}, TensorOptions(kBFloat16).device(kMeta).requires_grad());
      // base: qkv itself, its backward noting the gradient split's backward passes on (a
      // leaf's .grad may be a copy of it).
      Tensor base = qkv.detach();
      bool marked = false;
      size_t bytes = 0;
      attach_grad_fn(base, "Probe", {&qkv}, [&](const Tensor& g) {
        marked = detail::is_split_gradient(g);
        bytes = g.storage()->nbytes();
        return std::vector<Tensor>{g};
      });
      const std::vector<Tensor> parts = split(base, c, 2);
      auto heads = [&](size_t i) { return transpose(reshape(parts[i], {b, t, h, d}), 1, 2); };
      Tensor o =
          detail::fused_attention(heads(order[0]), heads(order[1]), heads(order[2]), true, 0.125);
      reshape(transpose(o, 1, 2), {b, t, c}).backward(zeros({b, t, c}, o.options()));
      // The projection's gradient: the attention's buffer, or split's own sum; either
      // way the projection's bytes.
      CHECK(marked == packed);
      CHECK(bytes == static_cast<size_t>(b * t * 3 * c) * 2);
      CHECK(qkv.grad().sizes() == Shape{b, t, 3 * c});
    }
}
