// The element-wise vector kernels (cuda/kernels/elementwise.cu, set_elementwise_vectors):
// over contiguous operands aligned to their vectors they must give the strided kernels'
// bits exactly, for every size (whole vectors, a tail of 1 to V - 1 elements, fewer
// elements than one vector) and for operands whose offset breaks the alignment (those
// take the strided kernels). Each result is also checked against the CPU. Suite "cuda".
// The vector kernels are on unless switched off (EMBER_ELEMENTWISE_VECTORS=0); each case
// sets the switch it needs.
#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/autograd.h"
#include "core/ops.h"
#include "cuda/kernels/elementwise.h"
#include "gradcheck.h"
#include "switch_guard.h"

using namespace ember;
using ember::testing::randn64;
using ember::testing::rel_error;
using ember::testing::same_bits;

namespace {

using Op = std::function<Tensor(const Tensor&, const Tensor&)>;

}  // namespace

TEST_CASE("kernels/elementwise: the vector kernels give the strided kernels' bits" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(cuda::elementwise_vectors, cuda::set_elementwise_vectors);
  const std::vector<std::pair<std::string, Op>> ops = {
      {"exp", [](const Tensor& a, const Tensor&) { return exp(a); }},
      {"relu", [](const Tensor& a, const Tensor&) { return relu(a); }},
      {"gt 0.25", [](const Tensor& a, const Tensor&) { return gt(a, 0.25); }},
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b, 0.5); }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }},
      {"add float32 + bfloat16",
       [](const Tensor& a, const Tensor& b) { return add(a.to(kFloat32), b.to(kBFloat16)); }},
      {"sub bfloat16 - float32",
       [](const Tensor& a, const Tensor& b) { return sub(a.to(kBFloat16), b.to(kFloat32)); }},
      {"cast", [](const Tensor& a, const Tensor&) {
         return a.dtype() == kFloat32 ? a.to(kBFloat16) : a.to(kFloat32);
       }}};
  for (DType dtype : {kFloat32, kBFloat16})
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}, int64_t{4096 + 5}})
      for (int64_t offset : {int64_t{0}, int64_t{1}}) {
        // Views at an element offset: 1 misaligns every vector.
        const Tensor a = randn64({n + offset}, 7 + n).to(kCUDA, dtype).slice(0, offset, n + offset);
        const Tensor b =
            (randn64({n + offset}, 8 + n) + 3.0).to(kCUDA, dtype).slice(0, offset, n + offset);
        for (const auto& [name, op] : ops) {
          INFO(name, " dtype=", dtype, " n=", n, " offset=", offset);
          cuda::set_elementwise_vectors(false);
          const Tensor strided = op(a, b);
          cuda::set_elementwise_vectors(true);
          const Tensor vectors = op(a, b);
          CHECK(same_bits(vectors, strided));
          // The CPU computes in double: within the dtype's budget, not bit for bit.
          const Tensor cpu = op(a.to(kCPU), b.to(kCPU));
          CHECK(rel_error(vectors.to(kCPU).to(kFloat64), cpu.to(kFloat64)) <=
                (vectors.dtype() == kBFloat16 ? 1e-2 : 1e-6));
        }
      }
}

TEST_CASE("kernels/elementwise: vector backward kernels (GELU, the residual add's gradient)" *
          doctest::test_suite("cuda")) {
  ember::testing::SwitchGuard guard(cuda::elementwise_vectors, cuda::set_elementwise_vectors);
  for (DType dtype : {kFloat32, kBFloat16})
    for (int64_t n : {int64_t{5}, int64_t{4096 + 3}}) {
      INFO("dtype=", dtype, " n=", n);
      auto grads = [&](bool on) {
        cuda::set_elementwise_vectors(on);
        Tensor x = randn64({n}, 21).to(kCUDA, dtype).set_requires_grad(true);
        Tensor h = randn64({n}, 22).to(kCUDA, kBFloat16).set_requires_grad(true);
        Tensor y = add(gelu(x).to(kFloat32), h, 2.0);  // float32 + bfloat16
        y.backward(randn64({n}, 23).to(kCUDA, kFloat32));
        return std::make_pair(x.grad(), h.grad());
      };
      const auto [gx0, gh0] = grads(false);
      const auto [gx1, gh1] = grads(true);
      CHECK(same_bits(gx1, gx0));
      CHECK(same_bits(gh1, gh0));
      CHECK(gh1.dtype() == kBFloat16);
    }
}
