// Mistakes that must not compile, and must say why in one sentence (CTest
// compiles this file once per CASE and looks for the sentence).
#include "nn/nn.h"

using namespace ember;

int main() {
#if CASE == 1
  nn::Linear layer(2, 3);
  nn::Sequential seq(layer, nn::ReLU());  // an lvalue module: not copyable
#elif CASE == 2
  nn::Sequential seq;
  nn::Linear layer(2, 3);
  seq.push_back(layer);
#elif CASE == 3
  nn::Sequential seq(nn::Linear(2, 3), nn::MSELoss());  // a loss is no layer
#else
  // The right ways, which must compile.
  nn::Linear layer(2, 3);
  auto shared = std::make_shared<nn::Linear>(3, 3);
  nn::Sequential seq(std::move(layer), shared, nn::ReLU());
  seq.push_back(nn::Linear(3, 1));
#endif
  return 0;
}
