// int64 values past 2^53 (which no double holds) through every path that keeps
// integers: host reads (to_vector, item, printing), the element-wise ops that keep
// integers and the comparisons (int64 computed in int64, wrapping as PyTorch's),
// sum, copies and device transfers; and the host constructors of int64 and bool
// tensors (from_vector, tensor, from_blob).
#include <doctest/doctest.h>

#include <cstdint>
#include <sstream>
#include <vector>

#include "core/ops.h"
#include "core/tensor.h"
#include "cuda/runtime.h"

using namespace ember;

namespace {

using I = std::vector<int64_t>;
using B = std::vector<bool>;

constexpr int64_t kBig = (int64_t{1} << 53) + 1;  // 9007199254740993: rounds to 2^53 as a double

// A (2, 3) int64 tensor written through data_ptr, not through any double.
Tensor big_tensor() {
  Tensor t = empty({2, 3}, kInt64);
  int64_t* p = t.data_ptr<int64_t>();
  const int64_t v[] = {kBig, -kBig, INT64_MAX, kBig - 1, 7, INT64_MIN};
  for (int i = 0; i < 6; ++i) p[i] = v[i];
  return t;
}

// The checks shared by the CPU and the CUDA case: t is big_tensor() on some device.
void check_paths(const Tensor& t) {
  const I all = {kBig, -kBig, INT64_MAX, kBig - 1, 7, INT64_MIN};
  CHECK(t.to_vector<int64_t>() == all);
  CHECK(t[0][0].item<int64_t>() == kBig);
  CHECK(t[1][2].item<int64_t>() == INT64_MIN);
  // element-wise ops that keep integers: exact, wrapping at the ends as PyTorch
  CHECK((t + 1).to_vector<int64_t>() == I{kBig + 1, -kBig + 1, INT64_MIN, kBig, 8, INT64_MIN + 1});
  CHECK((t - 1).to_vector<int64_t>() ==
        I{kBig - 1, -kBig - 1, INT64_MAX - 1, kBig - 2, 6, INT64_MAX});
  CHECK((t * 2).to_vector<int64_t>()[0] == 2 * kBig);
  CHECK((-t).to_vector<int64_t>() == I{-kBig, kBig, -INT64_MAX, 1 - kBig, -7, INT64_MIN});
  CHECK(abs(t).to_vector<int64_t>()[1] == kBig);
  CHECK(relu(t).to_vector<int64_t>() == I{kBig, 0, INT64_MAX, kBig - 1, 7, 0});
  CHECK(rsub(t, 1).to_vector<int64_t>()[0] == 1 - kBig);
  CHECK(clamp_min(t, 8).to_vector<int64_t>() == I{kBig, 8, INT64_MAX, kBig - 1, 8, 8});
  CHECK(clamp_max(t, 8).to_vector<int64_t>() == I{8, -kBig, 8, 8, 7, INT64_MIN});
  CHECK(pow(t[1][1], 2).item<int64_t>() == 49);
  Tensor ones = ones_like(t);
  Tensor bigs =
      from_vector(I(6, kBig), {2, 3}).to(t.device());  // a Scalar would travel as a double
  CHECK((t + ones).to_vector<int64_t>()[0] == kBig + 1);
  CHECK(add(t, ones, 3).to_vector<int64_t>()[0] == kBig + 3);
  CHECK((t - ones).to_vector<int64_t>()[0] == kBig - 1);
  CHECK((t * ones).to_vector<int64_t>() == all);
  CHECK(maximum(t, bigs).to_vector<int64_t>() == I{kBig, kBig, INT64_MAX, kBig, kBig, kBig});
  CHECK(minimum(t, bigs).to_vector<int64_t>()[3] == kBig - 1);
  // comparisons: 2^53 + 1 and 2^53 differ (as doubles they are equal)
  Tensor below = t - 1;
  CHECK(eq(t, below).to_vector<bool>() == B(6, false));
  CHECK(gt(t, below).to_vector<bool>() == B{true, true, true, true, true, false});  // MIN - 1 wraps
  CHECK(eq(t, 9007199254740992.0).to_vector<bool>() ==  // 2^53 as a scalar
        B{false, false, false, true, false, false});
  CHECK(eq(t, bigs).to_vector<bool>() == B{true, false, false, false, false, false});
  CHECK(ne(t, bigs).to_vector<bool>() == B{false, true, true, true, true, true});
  CHECK(gt(t, 9007199254740992.0).to_vector<bool>() == B{true, false, true, false, false, false});
  CHECK(lt(t, 7.5).to_vector<bool>() == B{false, true, false, false, true, true});
  CHECK(ge(t, 7).to_vector<bool>() == B{true, false, true, true, true, false});
  // sum: exact (in double 2^53 + 1 + 1 would round back to 2^53)
  Tensor pair = cat({slice(t[0], 0, 0, 1), slice(ones[0], 0, 0, 1)}, 0);  // [2^53 + 1, 1]
  CHECK(sum(pair).item<int64_t>() == kBig + 1);
  CHECK(sum(t).item<int64_t>() == kBig + 5);  // MAX + MIN = -1
  CHECK(sum(t).dim() == 0);
  CHECK(sum(t, 1).to_vector<int64_t>()[0] == kBig + (-kBig) + INT64_MAX);
  CHECK(sum(t, 0, true).sizes() == Shape{1, 3});
  CHECK(sum(t, 0).to_vector<int64_t>()[0] == kBig + kBig - 1);
  // copies: clone, a transposed view made contiguous, int64 -> int64
  CHECK(t.clone().to_vector<int64_t>() == all);
  CHECK(transpose(t, 0, 1).contiguous().to_vector<int64_t>() ==
        I{kBig, kBig - 1, -kBig, 7, INT64_MAX, INT64_MIN});
  CHECK(transpose(transpose(t, 0, 1).clone(), 0, 1).to_vector<int64_t>() == all);
  CHECK(t.to(kInt64).to_vector<int64_t>() == all);
  // printing
  std::ostringstream os;
  os << t[0];
  CHECK(os.str() ==
        "tensor([9007199254740993, -9007199254740993, 9223372036854775807], dtype=int64" +
            std::string(t.is_cpu() ? ")" : ", device=cuda:0)"));
}

}  // namespace

TEST_CASE("int64/exact: 2^53 + 1 through reads, ops, sum, copies and printing on the CPU") {
  check_paths(big_tensor());
  Tensor t = big_tensor();
  // item() is a double: 2^53 + 1 rounds there, item<int64_t>() does not
  CHECK(t[0][0].item() == 9007199254740992.0);
  CHECK(t[0][0].item<int64_t>() == kBig);
  CHECK(t.str() ==
        "tensor([[9007199254740993, -9007199254740993, 9223372036854775807],\n"
        "        [9007199254740992, 7, -9223372036854775808]], size=[2, 3], dtype=int64)");
}

TEST_CASE("int64/exact: 2^53 + 1 through a CUDA copy and the CUDA kernels" *
          doctest::test_suite("cuda")) {
  Tensor g = big_tensor().to(kCUDA);
  check_paths(g);
  CHECK(g.to(kCPU).to_vector<int64_t>()[0] == kBig);
}

TEST_CASE("tensor/from host: int64 and bool values without a double in between") {
  Tensor a = from_vector(I{kBig, -1, INT64_MIN}, {3});
  CHECK(a.dtype() == kInt64);
  CHECK(a.to_vector<int64_t>() == I{kBig, -1, INT64_MIN});
  CHECK(from_vector(I{kBig, 2, 3, 4}, {2, 2}).sizes() == Shape{2, 2});
  CHECK(from_vector(I{1, -2}, {2}, kFloat64).to_vector<double>() == std::vector<double>{1, -2});
  CHECK(from_vector(I{0, 5}, {2}, kBool).to_vector<bool>() == B{false, true});
  CHECK(tensor({int64_t{1}, kBig}).to_vector<int64_t>() == I{1, kBig});
  CHECK(tensor({int64_t{1}, kBig}).dtype() == kLong);
  CHECK(tensor(I{kBig}).item<int64_t>() == kBig);
  Tensor m = tensor({true, false, true});
  CHECK(m.dtype() == kBool);
  CHECK(m.to_vector<bool>() == B{true, false, true});
  CHECK(from_vector(B{true, false}, {2}).dtype() == kBool);
  CHECK(from_vector(B{true, false}, {2}, kInt64).to_vector<int64_t>() == I{1, 0});
  CHECK(tensor(B{false, true}).to_vector<bool>() == B{false, true});
  // plain int literals are still the double list (float32 unless told)
  CHECK(tensor({1, 2}).dtype() == kFloat32);
  CHECK(kLong == kInt64);
  CHECK_THROWS_WITH_AS(from_vector(I{1, 2, 3}, {2}), doctest::Contains("from_vector: 3 values"),
                       Error);
  CHECK_THROWS_WITH_AS(from_vector(I{1}, {1}, TensorOptions(kInt64).requires_grad(true)),
                       doctest::Contains("only floating-point tensors can require grad"), Error);
}

TEST_CASE("tensor/from_blob: a view of caller memory, the deleter run when the last view dies") {
  std::vector<int64_t> host = {kBig, 2, 3, 4, 5, 6};
  Tensor t = from_blob(host.data(), {2, 3}, kInt64);
  CHECK(t.to_vector<int64_t>() == I{kBig, 2, 3, 4, 5, 6});
  host[1] = 20;  // a view: no copy was made
  CHECK(t[0][1].item<int64_t>() == 20);
  t[1].fill_(0);
  CHECK(host[4] == 0);
  // strides in elements: the transposed view of the same memory
  Tensor tt = from_blob(host.data(), {3, 2}, {1, 3}, kInt64);
  CHECK(tt.to_vector<int64_t>() == I{kBig, 0, 20, 0, 3, 0});
  // the deleter runs once, when the last view (here a slice of it) dies
  int deleted = 0;
  std::vector<float> buf = {1.5f, 2.5f, 3.5f};
  {
    Tensor f = from_blob(buf.data(), {3}, [&deleted](void* p) {
      CHECK(p != nullptr);
      ++deleted;
    });
    Tensor part = f.slice(0, 1, 3);
    f = Tensor();
    CHECK(deleted == 0);
    CHECK(part.to_vector<float>() == std::vector<float>{2.5f, 3.5f});
  }
  CHECK(deleted == 1);
  {
    Tensor s = from_blob(
        buf.data(), {3}, {1}, [&deleted](void*) { ++deleted; }, kFloat32);
    CHECK(s.sum().item() == 7.5);
  }
  CHECK(deleted == 2);
  Tensor g = from_blob(buf.data(), {3}, TensorOptions(kFloat32).requires_grad(true));
  CHECK(g.requires_grad());
  CHECK(from_blob(nullptr, {0, 3}).numel() == 0);
  CHECK_THROWS_WITH_AS(from_blob(buf.data(), {3}, {-1}),
                       doctest::Contains("from_blob: strides must be non-negative"), Error);
  CHECK_THROWS_WITH_AS(from_blob(buf.data(), {3}, {1, 1}),
                       doctest::Contains("from_blob: 2 strides for a shape of 1 dims"), Error);
  CHECK_THROWS_WITH_AS(from_blob(nullptr, {3}), doctest::Contains("from_blob: data is null"),
                       Error);
}

TEST_CASE("tensor/from_blob: a CUDA device pointer" * doctest::test_suite("cuda")) {
  Tensor owner = from_vector(I{kBig, 2, 3}, {3}).to(kCUDA);
  int deleted = 0;
  {
    Tensor v = from_blob(
        owner.raw_data(), {3}, [&deleted](void*) { ++deleted; },
        TensorOptions(kInt64).device(kCUDA));
    CHECK(v.device() == owner.device());
    CHECK(v.to_vector<int64_t>() == I{kBig, 2, 3});
    CHECK((v + 1).to(kCPU).to_vector<int64_t>() == I{kBig + 1, 3, 4});
  }
  CHECK(deleted == 1);
}
