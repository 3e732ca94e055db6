// nn::MultiheadAttention, as libtorch's (and PyTorch's batch_first option): the
// query, key and value projected by in_proj_weight/in_proj_bias (or separate
// q/k/v_proj_weight when kdim or vdim differ from embed_dim), split into heads,
// attended through scaled_dot_product_attention (core/ops.h), joined and
// projected by out_proj. Parameter names match PyTorch's, so state dicts map
// one to one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "core/ops.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace ember::nn {

class MultiheadAttentionOptions {
 public:
  MultiheadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads), kdim_(embed_dim), vdim_(embed_dim) {}
  MultiheadAttentionOptions& dropout(double p) {
    dropout_ = p;
    return *this;
  }
  MultiheadAttentionOptions& bias(bool on) {
    bias_ = on;
    return *this;
  }
  // (N, L, E) inputs and outputs instead of (L, N, E).
  MultiheadAttentionOptions& batch_first(bool on) {
    batch_first_ = on;
    return *this;
  }
  MultiheadAttentionOptions& kdim(int64_t d) {
    kdim_ = d;
    return *this;
  }
  MultiheadAttentionOptions& vdim(int64_t d) {
    vdim_ = d;
    return *this;
  }
  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  double dropout() const { return dropout_; }
  bool bias() const { return bias_; }
  bool batch_first() const { return batch_first_; }
  int64_t kdim() const { return kdim_; }
  int64_t vdim() const { return vdim_; }

 private:
  int64_t embed_dim_;
  int64_t num_heads_;
  double dropout_ = 0.0;
  bool bias_ = true;
  bool batch_first_ = false;
  int64_t kdim_;
  int64_t vdim_;
};

class MultiheadAttention : public Module {
 public:
  explicit MultiheadAttention(const MultiheadAttentionOptions& options);
  MultiheadAttention(int64_t embed_dim, int64_t num_heads)
      : MultiheadAttention(MultiheadAttentionOptions(embed_dim, num_heads)) {}

  // query (L, N, E) (or (N, L, E) with batch_first), key (S, N, kdim), value
  // (S, N, vdim) -> {output of query's layout, weights}. Masks as PyTorch's:
  // key_padding_mask (N, S), attn_mask (L, S) or (N * num_heads, L, S); a bool
  // mask's true means "do not attend" (the opposite of scaled_dot_product_attention's),
  // a float mask is added to the scores. is_causal without attn_mask applies the
  // causal mask (PyTorch requires attn_mask then and treats is_causal as a hint
  // that it is causal; here, with attn_mask given, attn_mask is used as it is).
  // need_weights: also return the attention weights (after dropout), averaged over
  // heads when average_attn_weights, (N, L, S), else (N, num_heads, L, S); this
  // computes them explicitly. Without need_weights the second tensor is undefined and
  // attention runs through scaled_dot_product_attention (where the fused kernel
  // plugs in). Dropout applies in training mode only.
  std::tuple<Tensor, Tensor> forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                     const Tensor& key_padding_mask = Tensor(),
                                     bool need_weights = true, const Tensor& attn_mask = Tensor(),
                                     bool average_attn_weights = true, bool is_causal = false);
  void reset_parameters();
  std::string extra_repr() const override;

  MultiheadAttentionOptions options;
  int64_t head_dim;
  Tensor in_proj_weight;  // (3 E, E), when kdim == vdim == E
  Tensor q_proj_weight;   // (E, E), (E, kdim), (E, vdim) otherwise
  Tensor k_proj_weight;
  Tensor v_proj_weight;
  Tensor in_proj_bias;  // (3 E), undefined without bias
  std::shared_ptr<Linear> out_proj;
};

}  // namespace ember::nn
