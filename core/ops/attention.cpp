// scaled_dot_product_attention (core/ops.h documents its semantics). One entry
// point: the argument checks, then the choice of path (the fused attention
// kernel where one can run it, EMBER_ATTENTION permitting), else the composed
// path below: matmul, masking, softmax, dropout and matmul again, each an op
// with its own backward, so autograd, every device and the meta device come for
// free.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "core/alloc_site.h"
#include "core/autocast.h"
#include "core/autograd.h"
#include "core/ops.h"

namespace ember {

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";

// Which path EMBER_ATTENTION asks for, read once per process.
enum class AttentionPath { Auto, Composed, Ours };

AttentionPath attention_path() {
  static const AttentionPath path = [] {
    const char* env = std::getenv("EMBER_ATTENTION");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "auto") == 0 ||
        std::strcmp(env, "fused") == 0 || std::strcmp(env, "atomic") == 0)
      return AttentionPath::Auto;  // atomic: fused, dQ added atomically (attention_fused.cpp)
    if (std::strcmp(env, "composed") == 0) return AttentionPath::Composed;
    if (std::strcmp(env, "ours") == 0) return AttentionPath::Ours;
    throw Error(
        std::string("EMBER_ATTENTION must be auto, fused, atomic, composed or ours, got '") + env +
        "'");
  }();
  return path;
}

Shape batch_of(const Tensor& t) {
  return Shape(t.sizes().begin(), t.sizes().end() - 2);
}

Shape concat(const Shape& batch, int64_t a, int64_t b) {
  Shape s = batch;
  s.push_back(a);
  s.push_back(b);
  return s;
}

// t (batch_t..., R, C) broadcast to (batch..., R, C) and flattened to (N, R, C):
// a view when t already has the full batch and a viewable layout, else a copy.
Tensor as_batched_3d(const Tensor& t, const Shape& batch, int64_t n) {
  const Shape full = concat(batch, t.size(-2), t.size(-1));
  Tensor e = t.sizes() == full ? t : expand(t, full);
  return reshape(e, {n, t.size(-2), t.size(-1)});
}

struct AttentionShapes {
  Shape batch;  // the broadcast batch dims
  int64_t n = 1, L = 0, S = 0, E = 0, Ev = 0;
};

AttentionShapes check_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& mask, double dropout_p, bool is_causal) {
  check_defined(kOp, q, "query");
  check_defined(kOp, k, "key");
  check_defined(kOp, v, "value");
  EMBER_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2, kOp,
              ": query, key and value need at least 2 dims (..., L, E), got ", shape_str(q.sizes()),
              ", ", shape_str(k.sizes()), " and ", shape_str(v.sizes()));
  check_same_device(kOp, q, k);
  check_same_device(kOp, q, v);
  check_floating(kOp, q);
  EMBER_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), kOp,
              ": query, key and value must have one dtype, got ", dtype_name(q.dtype()), ", ",
              dtype_name(k.dtype()), " and ", dtype_name(v.dtype()));
  EMBER_CHECK(q.size(-1) == k.size(-1), kOp, ": query ", shape_str(q.sizes()), " and key ",
              shape_str(k.sizes()), " differ in their last dim (E)");
  EMBER_CHECK(k.size(-2) == v.size(-2), kOp, ": key ", shape_str(k.sizes()), " and value ",
              shape_str(v.sizes()), " differ in their sequence dim (S)");
  EMBER_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kOp, ": dropout_p must be in [0, 1), got ",
              dropout_p);
  AttentionShapes s;
  s.batch = broadcast_shapes(broadcast_shapes(batch_of(q), batch_of(k), kOp), batch_of(v), kOp);
  for (int64_t b : s.batch) s.n *= b;
  s.L = q.size(-2);
  s.S = k.size(-2);
  s.E = q.size(-1);
  s.Ev = v.size(-1);
  if (mask.defined()) {
    EMBER_CHECK(!is_causal, kOp,
                ": give either attn_mask or is_causal, not both (as PyTorch; build the causal "
                "mask into attn_mask instead)");
    check_same_device(kOp, q, mask);
    EMBER_CHECK(mask.dtype() == kBool || mask.dtype() == q.dtype(), kOp,
                ": attn_mask must be bool or the query's dtype (", dtype_name(q.dtype()), "), got ",
                dtype_name(mask.dtype()));
    const Shape weights = concat(s.batch, s.L, s.S);
    bool fits = mask.dim() <= static_cast<int64_t>(weights.size());
    for (int64_t d = 1; fits && d <= mask.dim(); ++d) {
      const int64_t m = mask.size(-d), w = weights[weights.size() - static_cast<size_t>(d)];
      fits = m == w || m == 1;
    }
    EMBER_CHECK(fits, kOp, ": attn_mask ", shape_str(mask.sizes()),
                " does not broadcast to the attention weights' shape ", shape_str(weights));
  }
  return s;
}

// The path every device runs: weights = softmax(q k^T * scale + mask), dropped
// out, times v.
Tensor attention_composed(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                          double dropout_p, bool is_causal, double scale, Generator* gen,
                          const AttentionShapes& s) {
  const TensorOptions opts = TensorOptions().dtype(q.dtype()).device(q.device());
  const Tensor q3 = as_batched_3d(q, s.batch, s.n), k3 = as_batched_3d(k, s.batch, s.n),
               v3 = as_batched_3d(v, s.batch, s.n);
  // (N, L, S), viewed as (batch..., L, S) for the mask to broadcast against.
  Tensor scores = view(matmul(mul(q3, scale), transpose(k3, 1, 2)), concat(s.batch, s.L, s.S));
  Tensor all_masked;  // (batch..., L, 1): rows with no key left
  if (is_causal) {
    const TensorOptions idx = TensorOptions().dtype(kInt64).device(q.device());
    const Tensor keep = ge(unsqueeze(arange(static_cast<double>(s.L), idx), 1),
                           unsqueeze(arange(static_cast<double>(s.S), idx), 0));
    scores = where(keep, scores, full({}, -std::numeric_limits<double>::infinity(), opts));
    // Row i keeps key 0, so only L > 0 = S leaves a row empty: no rows at all then.
  } else if (mask.defined()) {
    if (mask.dtype() == kBool)
      scores = where(mask, scores, full({}, -std::numeric_limits<double>::infinity(), opts));
    else
      scores = add(scores, mask);
    // softmax of a row of -inf is NaN; PyTorch's math backend gives 0 there. The
    // row is zeroed before the softmax too, so no NaN reaches the backward either.
    if (s.S > 0) {
      all_masked = eq(max(scores, -1, true).values, -std::numeric_limits<double>::infinity());
      scores = where(all_masked, full({}, 0.0, opts), scores);
    }
  }
  Tensor weights = softmax(scores, -1);
  if (all_masked.defined()) weights = where(all_masked, full({}, 0.0, opts), weights);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, gen);
  Tensor out = matmul(reshape(weights, {s.n, s.L, s.S}), v3);
  return view(out, concat(s.batch, s.L, s.Ev));
}

// The fused path: the flash-attention kernels (core/ops/attention_fused.cpp) where
// their predicate takes the operands (bfloat16 (B, H, T, D), D 64 or 128, on a CUDA
// device that has them) and nothing the kernels do not read is asked for (a mask the
// kernels cannot read, or any mask with EMBER_ATTENTION_MASK=composed; dropout with
// EMBER_ATTENTION_DROPOUT=composed); an undefined tensor sends the call to the
// composed path.
Tensor attention_fused(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask,
                       double dropout_p, bool is_causal, double scale, Generator* gen,
                       const AttentionShapes& /*s*/) {
  if (mask.defined() &&
      !(detail::fused_attention_mask() && detail::fused_attention_takes_mask(q, k, mask)))
    return Tensor();
  if (dropout_p > 0.0 && !detail::fused_attention_dropout()) return Tensor();
  if (!detail::fused_attention_supported(q, k, v)) return Tensor();
  return detail::fused_attention(q, k, v, is_causal, scale, dropout_p, gen, mask);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  OpSite site(kOp);
  // Autocast (core/autocast.h): float32 operands run in the autocast dtype, as
  // PyTorch's autocast lists this op; an additive float32 mask follows them.
  if (autocast_lowers({&query, &key, &value})) [[unlikely]] {
    AutocastGuard off(autocast_dtype(), false);
    return scaled_dot_product_attention(
        autocast_lower(query), autocast_lower(key), autocast_lower(value),
        attn_mask.defined() && attn_mask.dtype() != kBool ? autocast_lower(attn_mask) : attn_mask,
        dropout_p, is_causal, scale, gen);
  }
  const AttentionShapes s = check_attention(query, key, value, attn_mask, dropout_p, is_causal);
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(s.E));
  const AttentionPath path = attention_path();
  if (path != AttentionPath::Composed) {
    Tensor out = attention_fused(query, key, value, attn_mask, dropout_p, is_causal, sc, gen, s);
    if (out.defined()) return out;
    EMBER_CHECK(path != AttentionPath::Ours, kOp,
                ": EMBER_ATTENTION=ours, but no fused attention kernel runs query ",
                shape_str(query.sizes()), " ", dtype_name(query.dtype()), " on ",
                query.device().str());
  }
  return attention_composed(query, key, value, attn_mask, dropout_p, is_causal, sc, gen, s);
}

}  // namespace ember
