// nn::Embedding: a lookup table of num_embeddings rows of embedding_dim values,
// indexed by int64 tensors (as torch.nn.Embedding): forward(indices) has shape
// indices.shape + (embedding_dim). Weights start N(0, 1); a padding_idx row
// starts at zero and gets no gradient. Its backward sums repeated indices in a
// fixed order (deterministic on every device). An index out of range is an
// ember::Error: at once on the CPU, at the next synchronisation on CUDA (no host
// sync per call; core/ops.h, "indexing").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ops.h"
#include "nn/module.h"

namespace ember::nn {

class EmbeddingOptions {
 public:
  EmbeddingOptions(int64_t num_embeddings, int64_t embedding_dim)
      : num_embeddings_(num_embeddings), embedding_dim_(embedding_dim) {}
  // A negative index counts from the end, as PyTorch's.
  EmbeddingOptions& padding_idx(std::optional<int64_t> idx) {
    padding_idx_ = idx;
    return *this;
  }
  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  std::optional<int64_t> padding_idx() const { return padding_idx_; }

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  std::optional<int64_t> padding_idx_;
};

class Embedding : public Module {
 public:
  explicit Embedding(const EmbeddingOptions& options);
  Embedding(int64_t num_embeddings, int64_t embedding_dim)
      : Embedding(EmbeddingOptions(num_embeddings, embedding_dim)) {}

  // indices: int64, any shape -> indices.shape + (embedding_dim)
  Tensor forward(const Tensor& indices) const;
  // Redraws the weight from N(0, 1) (the padding row zero).
  void reset_parameters();
  std::string extra_repr() const override;

  EmbeddingOptions options;
  Tensor weight;  // (num_embeddings, embedding_dim)

 private:
  int64_t padding_ = -1;  // padding_idx made non-negative; -1: none
};

}  // namespace ember::nn
