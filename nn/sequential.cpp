#include "nn/sequential.h"

namespace ember::nn {

Tensor Sequential::forward(const Tensor& x) const {
  EMBER_CHECK(!forwards_.empty(), "Sequential::forward: the Sequential is empty");
  ForwardScope scope(*this);
  Tensor y = x;
  for (const auto& f : forwards_) y = f(y);
  return y;
}

std::shared_ptr<Module> Sequential::operator[](size_t i) const {
  EMBER_CHECK(i < forwards_.size(), "Sequential: index ", i, " out of range for ", forwards_.size(),
              " modules");
  return named_children()[i].second;
}

}  // namespace ember::nn
