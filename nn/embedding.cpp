#include "nn/embedding.h"

#include <sstream>

#include "core/autograd.h"
#include "nn/init.h"

namespace ember::nn {

Embedding::Embedding(const EmbeddingOptions& opts) : options(opts) {
  EMBER_CHECK(opts.num_embeddings() > 0 && opts.embedding_dim() > 0,
              "Embedding: num_embeddings and embedding_dim must be positive, got ",
              opts.num_embeddings(), " and ", opts.embedding_dim());
  if (opts.padding_idx()) {
    const int64_t p = *opts.padding_idx(), n = opts.num_embeddings();
    EMBER_CHECK(p >= -n && p < n, "Embedding: padding_idx ", p, " is out of range for ", n,
                " embeddings");
    padding_ = p < 0 ? p + n : p;
  }
  weight = register_parameter("weight", empty({opts.num_embeddings(), opts.embedding_dim()}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_ >= 0) {
    NoGradGuard no_grad;
    Tensor row = weight.select(0, padding_);
    row.fill_(0.0);
  }
}

Tensor Embedding::forward(const Tensor& indices) const {
  ForwardScope scope(*this);
  return embedding(weight, indices, padding_);
}

std::string Embedding::extra_repr() const {
  std::ostringstream os;
  os << options.num_embeddings() << ", " << options.embedding_dim();
  if (padding_ >= 0) os << ", padding_idx=" << padding_;
  return os.str();
}

}  // namespace ember::nn
