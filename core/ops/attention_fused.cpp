// The fused attention behind scaled_dot_product_attention (issue 27): the kernel
// table's attention families (cuda/kernels/attention.h on CUDA; the meta device
// mirrors their predicate and workspace), with its backward attached. The composed
// path (matmul, softmax, matmul) is the reference wherever fused_attention_supported
// says no. EMBER_ATTENTION picks the path: unset, "fused" or "ours" (the default), "atomic"
// (fused, the backward's dQ added atomically: not bitwise repeatable), "composed"
// (never fused).
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/alloc_site.h"
#include "core/autograd.h"
#include "core/base/env_switch.h"
#include "core/device_services.h"
#include "core/kernel_table.h"
#include "core/ops.h"
#include "core/ops/split_gradient.h"
#include "core/ops/switches.h"

namespace ember::detail {

namespace {

using Grads = std::vector<Tensor>;

enum class AttentionMode { fused, atomic, composed };

AttentionMode attention_mode() {
  const char* e = std::getenv("EMBER_ATTENTION");
  if (e == nullptr || *e == '\0') return AttentionMode::fused;
  const std::string_view v(e);
  if (v == "fused" || v == "ours") return AttentionMode::fused;
  if (v == "atomic") return AttentionMode::atomic;
  if (v == "composed") return AttentionMode::composed;
  EMBER_CHECK(false, "scaled_dot_product_attention: EMBER_ATTENTION=", v,
              " (expected fused or ours, atomic, composed)");
  return AttentionMode::fused;
}

// The kernels read (B, H, T, D) views with D contiguous, strides multiples of 8
// elements and a 16-byte aligned base; anything else is copied contiguous.
Tensor kernel_operand(const Tensor& t) {
  const bool ok = t.stride(3) == 1 && t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0 &&
                  t.stride(2) % 8 == 0 && reinterpret_cast<uintptr_t>(t.raw_data()) % 16 == 0;
  return ok ? t : contiguous(t);
}
kernels::AttentionOperand operand_of(const Tensor& t) {
  return {t.raw_data(), t.stride(0), t.stride(1), t.stride(2)};
}
void set_strides(int64_t (&to)[3], const Tensor& t) {
  for (int d = 0; d < 3; ++d) to[d] = t.stride(d);
}

// An uninitialised (B, H, T, D) tensor like `like`, its storage in like's order of
// H and T: (B, T, H, D) when like steps over heads faster than over positions (a
// view of a (B, T, 3C) projection split into heads, as a GPT makes q, k and v),
// else contiguous. Written in that order, the kernels' outputs become contiguous
// (B, T, C) through transpose(1, 2) and reshape as views, with no copy forward (the
// output) or backward (the gradients of q, k and v), as PyTorch's flash attention.
Tensor empty_heads_like(const Tensor& like, const Shape& sizes) {
  if (like.stride(1) >= like.stride(2)) return empty(sizes, like.options());
  Tensor t = empty({sizes[0], sizes[2], sizes[1], sizes[3]}, like.options());
  return transpose(t, 1, 2);
}

std::atomic<int> g_qkv_grad{-1};  // -1: EMBER_ATTENTION_QKV_GRAD not read yet

// When q, k and v are the (B, H, T, D) head views of one (B, T, 3, H, D) layout, in any
// order (a GPT's split of its (B, T, 3C) projection), their gradients as views of one
// fresh buffer laid out so, each at its input's place: the kernels write every element,
// and the buffer is marked for split's backward to pass on whole (mark_split_gradient).
// Nothing (separate gradients) for any other layout, or with the switch off.
std::optional<std::array<Tensor, 3>> packed_qkv_grads(const Tensor& q, const Tensor& k,
                                                      const Tensor& v) {
  if (!attention_qkv_grad() || q.storage() != k.storage() || q.storage() != v.storage() ||
      q.sizes() != k.sizes() || q.sizes() != v.sizes() || q.strides() != k.strides() ||
      q.strides() != v.strides() || q.dtype() != k.dtype() || q.dtype() != v.dtype())
    return std::nullopt;
  const int64_t batch = q.size(0), heads = q.size(1), len = q.size(2), dim = q.size(3);
  const int64_t width = heads * dim;  // C
  if (q.strides() != Shape{len * 3 * width, dim, 3 * width, 1}) return std::nullopt;
  const int64_t base = std::min({q.storage_offset(), k.storage_offset(), v.storage_offset()});
  const std::array<int64_t, 3> at{q.storage_offset() - base, k.storage_offset() - base,
                                  v.storage_offset() - base};
  std::array<int64_t, 3> sorted = at;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != std::array<int64_t, 3>{0, width, 2 * width}) return std::nullopt;
  const Tensor buf = empty({batch, len, 3, heads, dim}, q.options());
  mark_split_gradient(buf);
  std::array<Tensor, 3> out;
  for (size_t i = 0; i < 3; ++i) out[i] = make_view(buf, q.sizes(), q.strides(), at[i]);
  return out;
}

kernels::AttentionQuery query_of(const Tensor& q, const Tensor& k, bool deterministic) {
  return {q.device(), q.dtype(), q.size(0), q.size(1),
          q.size(2),  k.size(2), q.size(3), deterministic};
}

// Whether the shapes, dtypes and devices are the fused kernels' form, before the
// device's predicate.
bool fused_form(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  if (q.device() != k.device() || q.device() != v.device()) return false;
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype()) return false;
  for (int d : {0, 1, 3})
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) return false;
  return k.size(2) == v.size(2);
}

// The mask as the kernels read it: kind 1 (bool) or 2 (additive, bfloat16 like the
// query), with strides broadcasting it to (B, H, Tq, Tk); kind 0 where they cannot (no
// mask, another dtype or device, an additive mask that needs its gradient, a shape that
// does not broadcast).
struct KernelMask {
  int kind = 0;
  Tensor t;
  int64_t strides[4] = {0, 0, 0, 0};
};

KernelMask kernel_mask(const Tensor& mask, const Tensor& q, const Tensor& k) {
  KernelMask m;
  if (!mask.defined() || mask.device() != q.device() || mask.dim() > 4 || q.dim() != 4 ||
      k.dim() != 4)
    return m;
  const int kind = mask.dtype() == kBool                                 ? 1
                   : mask.dtype() == kBFloat16 && q.dtype() == kBFloat16 ? 2
                                                                         : 0;
  if (kind == 0 || (kind == 2 && any_requires_grad({&mask}))) return m;
  const int64_t target[4] = {q.size(0), q.size(1), q.size(2), k.size(2)};
  for (int d = 0; d < 4; ++d) {
    const int64_t md = d - (4 - mask.dim());
    const int64_t size = md >= 0 ? mask.size(md) : 1;
    if (size != target[d] && size != 1) return m;
    m.strides[d] = md >= 0 && size != 1 ? mask.stride(md) : 0;
  }
  m.kind = kind;
  m.t = mask.detach();
  return m;
}

// The dropout and mask fields, the same in the forward's and the backward's arguments.
template <typename Args>
void set_dropout_and_mask(Args& a, double dropout_p, const RandomCounters& drop,
                          const KernelMask& km) {
  a.dropout_p = dropout_p;
  a.dropout_seed = drop.seed;
  a.dropout_offset = drop.offset;
  a.dropout_base = drop.base;
  a.mask_kind = km.kind;
  a.mask = km.kind != 0 ? km.t.raw_data() : nullptr;
  for (int d = 0; d < 4; ++d) a.mask_strides[d] = km.strides[d];
}

}  // namespace

bool fused_attention_mask() {
  static const bool on =
      own_path_unless_composed("scaled_dot_product_attention", "EMBER_ATTENTION_MASK", "fused");
  return on;
}

bool fused_attention_takes_mask(const Tensor& q, const Tensor& k, const Tensor& mask) {
  return kernel_mask(mask, q, k).kind != 0;
}

bool fused_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!fused_form(q, k, v)) return false;
  const AttentionMode mode = attention_mode();
  if (mode == AttentionMode::composed) return false;
  return kernels::kernels_for(q.device())
      .attention_fused_supported(query_of(q, k, mode != AttentionMode::atomic));
}

bool fused_attention_dropout() {
  static const bool on =
      own_path_unless_composed("scaled_dot_product_attention", "EMBER_ATTENTION_DROPOUT", "fused");
  return on;
}

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool is_causal,
                       double scale, double dropout_p, Generator* gen, const Tensor& mask) {
  OpSite site("scaled_dot_product_attention");
  constexpr const char* kOp = "fused_attention";
  check_defined(kOp, q, "query");
  check_defined(kOp, k, "key");
  check_defined(kOp, v, "value");
  EMBER_CHECK(fused_attention_supported(q, k, v), kOp, ": no fused kernel takes query ",
              shape_str(q.sizes()), ", key ", shape_str(k.sizes()), ", value ",
              shape_str(v.sizes()), " of ", dtype_name(q.dtype()), " on ", q.device().str(),
              " (bfloat16 (B, H, T, D) with D 64 or 128 on CUDA; EMBER_ATTENTION not composed)");
  EMBER_CHECK(std::isfinite(scale), kOp, ": scale must be finite, got ", scale);
  EMBER_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kOp, ": dropout_p must be in [0, 1), got ",
              dropout_p);
  const KernelMask km = kernel_mask(mask, q, k);
  EMBER_CHECK(!mask.defined() || km.kind != 0, kOp, ": the kernels cannot read a mask of shape ",
              shape_str(mask.sizes()), " and dtype ", dtype_name(mask.dtype()),
              " (bool, or bfloat16 like the query without a gradient, broadcasting to (", q.size(0),
              ", ", q.size(1), ", ", q.size(2), ", ", k.size(2), ") on ", q.device().str(), ")");
  EMBER_CHECK(!(mask.defined() && is_causal), kOp,
              ": a mask and is_causal together (give one, as PyTorch requires)");
  const bool deterministic = attention_mode() != AttentionMode::atomic;
  const Device device = q.device();
  const Tensor qa = kernel_operand(q.detach()), ka = kernel_operand(k.detach()),
               va = kernel_operand(v.detach());
  const int64_t batch = q.size(0), heads = q.size(1), q_len = q.size(2), kv_len = k.size(2),
                head_dim = q.size(3);
  // The dropout's counters, as the composed path draws them (dropout's over the
  // (B, H, Tq, Tk) weights).
  RandomCounters drop;
  if (dropout_p > 0.0) {
    Generator& g = gen != nullptr ? *gen : default_generator();
    drop = draw_counters(device, g, static_cast<uint64_t>(batch * heads * q_len * kv_len),
                         "scaled_dot_product_attention");
  }
  Tensor o = empty_heads_like(qa, q.sizes());
  const Tensor lse = empty({batch, heads, q_len}, TensorOptions(kFloat32).device(device));
  kernels::AttentionArgs args{device,       q.dtype(),      batch,          heads,
                              q_len,        kv_len,         head_dim,       scale,
                              is_causal,    operand_of(qa), operand_of(ka), operand_of(va),
                              o.raw_data(), lse.raw_data()};
  set_dropout_and_mask(args, dropout_p, drop, km);
  set_strides(args.o_strides, o);
  kernels::kernels_for(device).attention_fused(args);
  if (any_requires_grad({&q, &k, &v})) {
    attach_grad_fn(
        // SavedTensors holds at most 4: the log-sum-exp (no one else's tensor, never
        // modified) is kept by the closure.
        o, "FusedAttentionBackward", {&q, &k, &v}, {qa, ka, va, o},
        [=](const Tensor& g, const SavedTensors& s) {
          const Tensor &sq = s[0], &sk = s[1], &sv = s[2], &so = s[3], &slse = lse;
          const Device dev = sq.device();
          const Tensor ga = kernel_operand(g);
          Tensor d_q, d_k, d_v;
          if (auto packed = packed_qkv_grads(sq, sk, sv)) {
            d_q = (*packed)[0], d_k = (*packed)[1], d_v = (*packed)[2];
          } else {
            d_q = empty_heads_like(sq, sq.sizes());
            d_k = empty_heads_like(sk, sk.sizes());
            d_v = empty_heads_like(sv, sv.sizes());
          }
          const kernels::KernelTable& t = kernels::kernels_for(dev);
          const size_t bytes = t.attention_workspace_bytes(
              {dev, sq.dtype(), batch, heads, q_len, kv_len, head_dim, deterministic});
          // The caching allocator's blocks are 512-byte aligned (the kernels need 256).
          const Tensor ws =
              empty({static_cast<int64_t>((bytes + 7) / 8)}, TensorOptions(kFloat64).device(dev));
          kernels::AttentionBackwardArgs bargs{dev,
                                               sq.dtype(),
                                               batch,
                                               heads,
                                               q_len,
                                               kv_len,
                                               head_dim,
                                               scale,
                                               is_causal,
                                               operand_of(sq),
                                               operand_of(sk),
                                               operand_of(sv),
                                               operand_of(so),
                                               operand_of(ga),
                                               slse.raw_data(),
                                               d_q.raw_data(),
                                               d_k.raw_data(),
                                               d_v.raw_data(),
                                               deterministic,
                                               ws.raw_data(),
                                               bytes};
          // km.t, held by this closure, keeps the mask alive.
          set_dropout_and_mask(bargs, dropout_p, drop, km);
          set_strides(bargs.d_q_strides, d_q);
          set_strides(bargs.d_k_strides, d_k);
          set_strides(bargs.d_v_strides, d_v);
          t.attention_backward_fused(bargs);
          return Grads{d_q, d_k, d_v};
        });
  }
  return o;
}

bool attention_qkv_grad() {
  return env_switch(g_qkv_grad, "EMBER_ATTENTION_QKV_GRAD", true);
}

void set_attention_qkv_grad(bool on) {
  g_qkv_grad.store(on ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace ember::detail
