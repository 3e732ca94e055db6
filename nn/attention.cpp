#include "nn/attention.h"

#include <cmath>
#include <limits>
#include <sstream>

#include "core/autograd.h"
#include "nn/functional.h"
#include "nn/init.h"

namespace ember::nn {

MultiheadAttention::MultiheadAttention(const MultiheadAttentionOptions& opts)
    : options(opts), head_dim(0) {
  const int64_t E = opts.embed_dim(), H = opts.num_heads();
  EMBER_CHECK(E > 0 && H > 0, "MultiheadAttention: embed_dim and num_heads must be positive, got ",
              E, " and ", H);
  EMBER_CHECK(E % H == 0, "MultiheadAttention: embed_dim (", E,
              ") must be divisible by num_heads (", H, ")");
  EMBER_CHECK(opts.kdim() > 0 && opts.vdim() > 0,
              "MultiheadAttention: kdim and vdim must be positive, got ", opts.kdim(), " and ",
              opts.vdim());
  EMBER_CHECK(opts.dropout() >= 0.0 && opts.dropout() < 1.0,
              "MultiheadAttention: dropout must be in [0, 1), got ", opts.dropout());
  head_dim = E / H;
  if (opts.kdim() == E && opts.vdim() == E) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, opts.kdim()}));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, opts.vdim()}));
  }
  if (opts.bias()) in_proj_bias = register_parameter("in_proj_bias", empty({3 * E}));
  out_proj =
      register_module("out_proj", std::make_shared<Linear>(LinearOptions(E, E).bias(opts.bias())));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  // As PyTorch's _reset_parameters: Xavier-uniform projections, zero biases.
  if (in_proj_weight.defined()) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A PyTorch-style MHA mask (bool true = masked out, or additive) as an additive
// mask of `dtype`.
Tensor as_additive(const Tensor& m, DType dtype) {
  if (m.dtype() != kBool) return m.dtype() == dtype ? m : cast(m, dtype);
  const TensorOptions o = TensorOptions().dtype(dtype).device(m.device());
  return where(m, full({}, kNegInf, o), full({}, 0.0, o));
}

}  // namespace

std::tuple<Tensor, Tensor> MultiheadAttention::forward(const Tensor& query, const Tensor& key,
                                                       const Tensor& value,
                                                       const Tensor& key_padding_mask,
                                                       bool need_weights, const Tensor& attn_mask,
                                                       bool average_attn_weights, bool is_causal) {
  ForwardScope scope(*this);
  const char* op = "MultiheadAttention";
  check_defined(op, query, "query");
  check_defined(op, key, "key");
  check_defined(op, value, "value");
  EMBER_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3, op,
              ": query, key and value must be 3-D (batched), got ", shape_str(query.sizes()), ", ",
              shape_str(key.sizes()), " and ", shape_str(value.sizes()));
  const bool bf = options.batch_first();
  // (N, L, E) views
  const Tensor q_in = bf ? query : transpose(query, 0, 1);
  const Tensor k_in = bf ? key : transpose(key, 0, 1);
  const Tensor v_in = bf ? value : transpose(value, 0, 1);
  const int64_t E = options.embed_dim(), H = options.num_heads(), D = head_dim;
  const int64_t N = q_in.size(0), L = q_in.size(1), S = k_in.size(1);
  EMBER_CHECK(q_in.size(2) == E, op, ": query ", shape_str(query.sizes()), " has ", q_in.size(2),
              " features, embed_dim is ", E);
  EMBER_CHECK(k_in.size(2) == options.kdim() && v_in.size(2) == options.vdim(), op, ": key ",
              shape_str(key.sizes()), " and value ", shape_str(value.sizes()),
              " must have kdim = ", options.kdim(), " and vdim = ", options.vdim(), " features");
  EMBER_CHECK(k_in.size(0) == N && v_in.size(0) == N && v_in.size(1) == S, op,
              ": query, key and value disagree in batch or sequence sizes: ",
              shape_str(query.sizes()), ", ", shape_str(key.sizes()), ", ",
              shape_str(value.sizes()), bf ? " (batch_first)" : " (sequence first)");

  // projections: (N, L, E), (N, S, E), (N, S, E)
  auto bias_part = [&](int64_t i) {
    return in_proj_bias.defined() ? slice(in_proj_bias, 0, i * E, (i + 1) * E) : Tensor();
  };
  Tensor q, k, v;
  if (in_proj_weight.defined() && query.is_same(key) && key.is_same(value)) {
    // self-attention: one GEMM for all three, split along features
    Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);
    q = slice(qkv, 2, 0, E);
    k = slice(qkv, 2, E, 2 * E);
    v = slice(qkv, 2, 2 * E, 3 * E);
  } else {
    auto weight_part = [&](int64_t i) {
      if (!in_proj_weight.defined())
        return i == 0 ? q_proj_weight : i == 1 ? k_proj_weight : v_proj_weight;
      return slice(in_proj_weight, 0, i * E, (i + 1) * E);
    };
    q = linear(q_in, weight_part(0), bias_part(0));
    k = linear(k_in, weight_part(1), bias_part(1));
    v = linear(v_in, weight_part(2), bias_part(2));
  }
  // heads: (N, H, L, D)
  auto heads = [&](const Tensor& t, int64_t len) {
    return transpose(reshape(t, {N, len, H, D}), 1, 2);
  };
  q = heads(q, L);
  k = heads(k, S);
  v = heads(v, S);

  // One additive mask broadcasting to (N, H, L, S), or none (causal goes to sdpa
  // as is_causal when it is the only mask).
  Tensor mask;
  const DType dt = q.dtype();
  if (attn_mask.defined()) {
    EMBER_CHECK((attn_mask.dim() == 2 && attn_mask.size(0) == L && attn_mask.size(1) == S) ||
                    (attn_mask.dim() == 3 && attn_mask.size(0) == N * H && attn_mask.size(1) == L &&
                     attn_mask.size(2) == S),
                op, ": attn_mask ", shape_str(attn_mask.sizes()), " must be (L, S) = (", L, ", ", S,
                ") or (N * num_heads, L, S) = (", N * H, ", ", L, ", ", S, ")");
    mask = as_additive(attn_mask.dim() == 3 ? reshape(attn_mask, {N, H, L, S}) : attn_mask, dt);
  }
  bool causal = is_causal && !attn_mask.defined();
  if (key_padding_mask.defined()) {
    EMBER_CHECK(key_padding_mask.dim() == 2 && key_padding_mask.size(0) == N &&
                    key_padding_mask.size(1) == S,
                op, ": key_padding_mask ", shape_str(key_padding_mask.sizes()),
                " must be (N, S) = (", N, ", ", S, ")");
    Tensor pad = as_additive(reshape(key_padding_mask, {N, 1, 1, S}), dt);
    if (causal) {  // fold the causal mask in: sdpa takes one mask
      const TensorOptions idx = TensorOptions().dtype(kInt64).device(q.device());
      Tensor hide = lt(unsqueeze(arange(static_cast<double>(L), idx), 1),
                       unsqueeze(arange(static_cast<double>(S), idx), 0));
      mask = as_additive(hide, dt);
      causal = false;
    }
    mask = mask.defined() ? add(mask, pad) : pad;
  }
  const double p = is_training() ? options.dropout() : 0.0;

  Tensor out, weights;
  if (!need_weights) {
    out = scaled_dot_product_attention(q, k, v, mask, p, causal);
  } else {
    // The same composition, keeping the weights to return.
    Tensor scores = matmul(reshape(mul(q, 1.0 / std::sqrt(static_cast<double>(D))), {N * H, L, D}),
                           transpose(reshape(k, {N * H, S, D}), 1, 2));
    scores = reshape(scores, {N, H, L, S});
    if (causal) {
      const TensorOptions idx = TensorOptions().dtype(kInt64).device(q.device());
      mask = as_additive(lt(unsqueeze(arange(static_cast<double>(L), idx), 1),
                            unsqueeze(arange(static_cast<double>(S), idx), 0)),
                         dt);
    }
    if (mask.defined()) scores = add(scores, mask);
    weights = functional::dropout(softmax(scores, -1), p, p > 0.0);
    out = reshape(matmul(reshape(weights, {N * H, L, S}), reshape(v, {N * H, S, D})), {N, H, L, D});
    if (average_attn_weights) weights = mean(weights, 1);
  }
  // join heads: (N, L, E), project, back to the input's layout
  out = out_proj->forward(reshape(transpose(out, 1, 2), {N, L, E}));
  if (!bf) out = transpose(out, 0, 1);
  return {out, weights};
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream os;
  os << "embed_dim=" << options.embed_dim() << ", num_heads=" << options.num_heads()
     << ", dropout=" << options.dropout() << ", bias=" << (options.bias() ? "true" : "false")
     << ", batch_first=" << (options.batch_first() ? "true" : "false");
  return os.str();
}

}  // namespace ember::nn
