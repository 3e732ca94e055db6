// nn::functional: the stateless forms of the layers, with libtorch's names and
// argument order (F::embedding(input, weight), F::cross_entropy(input, target,
// options)). linear, mse_loss, cross_entropy and layer_norm call the seam ops of
// core/ops.h (where the fused CUDA kernels plug in); dropout draws its mask from
// ember's seedable generator.
#pragma once

#include <string_view>

#include "core/ops.h"
#include "nn/activation.h"

namespace ember::nn::functional {

using GELUFuncOptions = GELUOptions;  // libtorch's name

// y = x w^T + b; x: (..., in), w: (out, in), b: (out) or undefined.
inline Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor()) {
  return ember::linear(x, w, b);
}
inline Tensor mse_loss(const Tensor& pred, const Tensor& target,
                       Reduction reduction = Reduction::Mean) {
  return ember::mse_loss(pred, target, reduction);
}
inline Tensor relu(const Tensor& x) {
  return ember::relu(x);
}
// GELU, exact by default; gelu(x, "tanh") or gelu(x, GELUFuncOptions().approximate("tanh"))
// for the tanh form, as torch.nn.functional.gelu.
inline Tensor gelu(const Tensor& x) {
  return ember::gelu(x);
}
inline Tensor gelu(const Tensor& x, std::string_view approximate) {
  return ember::gelu(x, approximate);
}
inline Tensor gelu(const Tensor& x, const GELUFuncOptions& options) {
  return ember::gelu(x, options.approximate());
}
inline Tensor tanh(const Tensor& x) {
  return ember::tanh(x);
}
inline Tensor sigmoid(const Tensor& x) {
  return ember::sigmoid(x);
}
inline Tensor softplus(const Tensor& x) {
  return ember::softplus(x);
}
inline Tensor softmax(const Tensor& x, int64_t dim) {
  return ember::softmax(x, dim);
}
inline Tensor log_softmax(const Tensor& x, int64_t dim) {
  return ember::log_softmax(x, dim);
}

// --- losses (core/ops.h documents each)
using CrossEntropyFuncOptions = CrossEntropyOptions;  // libtorch's name
using NLLLossFuncOptions = NLLLossOptions;
inline Tensor cross_entropy(const Tensor& input, const Tensor& target,
                            const CrossEntropyOptions& options = {}) {
  return ember::cross_entropy(input, target, options);
}
// ember's own (no libtorch counterpart): cross_entropy of a bias-free Linear's
// output without its logits, in chunks of rows (core/ops.h).
inline Tensor linear_cross_entropy(const Tensor& input, const Tensor& weight, const Tensor& target,
                                   const CrossEntropyOptions& options = {},
                                   int64_t chunk_rows = 0) {
  return ember::linear_cross_entropy(input, weight, target, options, chunk_rows);
}
inline Tensor nll_loss(const Tensor& input, const Tensor& target,
                       const NLLLossOptions& options = {}) {
  return ember::nll_loss(input, target, options);
}
inline Tensor binary_cross_entropy(const Tensor& input, const Tensor& target,
                                   Reduction reduction = Reduction::Mean) {
  return ember::binary_cross_entropy(input, target, reduction);
}
inline Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                               const Tensor& pos_weight = Tensor(),
                                               Reduction reduction = Reduction::Mean) {
  return ember::binary_cross_entropy_with_logits(input, target, pos_weight, reduction);
}
inline Tensor l1_loss(const Tensor& input, const Tensor& target,
                      Reduction reduction = Reduction::Mean) {
  return ember::l1_loss(input, target, reduction);
}

// --- embeddings and normalisation
// Rows of weight (num, dim) at the int64 indices `input`: input.shape + (dim).
// padding_idx >= 0 names a row that gets no gradient; -1: none.
inline Tensor embedding(const Tensor& input, const Tensor& weight, int64_t padding_idx = -1) {
  return ember::embedding(weight, input, padding_idx);
}
inline Tensor one_hot(const Tensor& input, int64_t num_classes = -1) {
  return ember::one_hot(input, num_classes);
}
inline Tensor layer_norm(const Tensor& input, const Shape& normalized_shape,
                         const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                         double eps = 1e-5) {
  return ember::layer_norm(input, normalized_shape, weight, bias, eps);
}

// As torch.nn.functional.scaled_dot_product_attention (core/ops.h documents it).
inline Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key,
                                           const Tensor& value, const Tensor& attn_mask = Tensor(),
                                           double dropout_p = 0.0, bool is_causal = false,
                                           std::optional<double> scale = std::nullopt,
                                           Generator* gen = nullptr) {
  return ember::scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                             scale, gen);
}

// Zeroes each element with probability p and scales the rest by 1 / (1 - p)
// ("inverted" dropout, so eval needs no rescaling). ember::dropout (core/ops.h):
// identity when !training or p = 0, zeros when p = 1, otherwise one kernel, the mask
// drawn from the generator's counters inside it and again in backward, none stored.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

}  // namespace ember::nn::functional
