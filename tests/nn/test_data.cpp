// DataLoader: batch order, last-batch handling, shuffle determinism per (seed,
// epoch), the background thread giving the same batches, errors, CUDA delivery.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/ops.h"
#include "error_text.h"
#include "nn/data.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;

namespace {

// Example i: data [i, 10 i] (float32), target i (float64).
std::shared_ptr<nn::TensorDataset> numbered(int64_t n) {
  std::vector<double> d, t;
  for (int64_t i = 0; i < n; ++i) {
    d.push_back(static_cast<double>(i));
    d.push_back(10.0 * static_cast<double>(i));
    t.push_back(static_cast<double>(i));
  }
  return std::make_shared<nn::TensorDataset>(from_vector(d, {n, 2}), from_vector(t, {n}, kFloat64));
}

// The same examples through the generic Dataset path (one get() per example).
struct Wrapped : nn::Dataset {
  explicit Wrapped(std::shared_ptr<nn::TensorDataset> d) : inner(std::move(d)) {}
  nn::Example get(size_t i) const override { return inner->get(i); }
  size_t size() const override { return inner->size(); }
  std::shared_ptr<nn::TensorDataset> inner;
};

// The example ids of each batch, checking data and target agree.
std::vector<std::vector<int>> batches_of(nn::DataLoader& loader) {
  std::vector<std::vector<int>> out;
  for (const nn::Example& b : loader) {
    std::vector<double> d = b.data.to_vector<double>(), t = b.target.to_vector<double>();
    REQUIRE(b.data.dim() == 2);
    REQUIRE(b.data.size(1) == 2);
    REQUIRE(b.target.dim() == 1);
    std::vector<int> ids;
    for (size_t i = 0; i < t.size(); ++i) {
      CHECK(d[2 * i] == t[i]);
      CHECK(d[2 * i + 1] == 10 * t[i]);
      ids.push_back(static_cast<int>(t[i]));
    }
    out.push_back(ids);
  }
  return out;
}

}  // namespace

TEST_CASE("nn/data: batches come in order and the last partial batch is kept") {
  nn::DataLoader loader(numbered(10), nn::DataLoaderOptions(4));
  CHECK(loader.size() == 3);
  auto b = batches_of(loader);
  REQUIRE(b.size() == 3);
  CHECK(b[0] == std::vector<int>{0, 1, 2, 3});
  CHECK(b[2] == std::vector<int>{8, 9});
  SUBCASE("drop_last drops it") {
    nn::DataLoader dl(numbered(10), nn::DataLoaderOptions(4).drop_last(true));
    CHECK(dl.size() == 2);
    CHECK(batches_of(dl).size() == 2);
  }
  SUBCASE("an exact multiple has no partial batch") {
    nn::DataLoader dl(numbered(8), nn::DataLoaderOptions(4).drop_last(true));
    CHECK(batches_of(dl).size() == 2);
  }
  SUBCASE("an empty dataset yields no batches") {
    nn::DataLoader dl(std::make_shared<nn::TensorDataset>(empty({0, 2})), nn::DataLoaderOptions(4));
    int n = 0;
    for (const auto& batch : dl) n += static_cast<int>(batch.data.size(0));
    CHECK(n == 0);
  }
}

TEST_CASE("nn/data: shuffle is a permutation fixed by seed and epoch") {
  auto data = numbered(50);
  auto opts = nn::DataLoaderOptions(8).shuffle(true).seed(42);
  nn::DataLoader a(data, opts), b(data, opts);
  auto a0 = batches_of(a), a1 = batches_of(a);
  auto b0 = batches_of(b), b1 = batches_of(b);
  CHECK(a0 == b0);  // same seed, same epoch: same order
  CHECK(a1 == b1);
  CHECK(a0 != a1);  // a new epoch reshuffles
  std::vector<int> all;
  for (const auto& batch : a0) all.insert(all.end(), batch.begin(), batch.end());
  std::sort(all.begin(), all.end());
  for (int i = 0; i < 50; ++i) CHECK(all[static_cast<size_t>(i)] == i);
  CHECK(a.epoch() == 2);
  // set_epoch replays an epoch (resuming mid-training).
  a.set_epoch(1);
  CHECK(batches_of(a) == a1);
  nn::DataLoader c(data, nn::DataLoaderOptions(8).shuffle(true).seed(43));
  CHECK(batches_of(c) != a0);  // another seed, another order
}

TEST_CASE("nn/data: any Dataset batches like a TensorDataset") {
  auto data = numbered(23);
  auto opts = nn::DataLoaderOptions(4).shuffle(true).seed(5);
  nn::DataLoader fast(data, opts), generic(Wrapped(data), opts);
  CHECK(batches_of(fast) == batches_of(generic));
}

TEST_CASE("nn/data: the background thread yields the same batches") {
  auto data = numbered(37);
  auto opts = nn::DataLoaderOptions(5).shuffle(true).seed(7);
  nn::DataLoader plain(data, opts), ahead(data, nn::DataLoaderOptions(opts).prefetch(true));
  for (int epoch = 0; epoch < 3; ++epoch) CHECK(batches_of(plain) == batches_of(ahead));
  SUBCASE("leaving an epoch early stops the thread cleanly") {
    for (const auto& batch : ahead) {
      CHECK(batch.data.size(0) == 5);
      break;
    }
  }
}

TEST_CASE("nn/data: errors name the problem") {
  CHECK(contains(error_of([] { nn::DataLoader(numbered(3), nn::DataLoaderOptions(0)); }),
                 "batch_size must be positive"));
  CHECK(contains(error_of([] {
                   nn::TensorDataset(ones({3, 2}), ones({4}));
                 }),
                 "data has 3 examples"));
  struct Ragged : nn::Dataset {
    nn::Example get(size_t i) const override {
      return {ones({static_cast<int64_t>(i) + 1}), Tensor()};
    }
    size_t size() const override { return 4; }
  };
  struct Failing : nn::Dataset {
    nn::Example get(size_t i) const override {
      EMBER_CHECK(i < 3, "Failing: example ", i, " is unreadable");
      return {ones({2}), Tensor()};
    }
    size_t size() const override { return 6; }
  };
  for (bool prefetch : {false, true}) {
    CAPTURE(prefetch);
    nn::DataLoader ragged(Ragged(), nn::DataLoaderOptions(2).prefetch(prefetch));
    CHECK(contains(error_of([&] {
                     for (const auto& b : ragged) (void)b;
                   }),
                   "example 1 differs in shape"));
    nn::DataLoader failing(Failing(), nn::DataLoaderOptions(2).prefetch(prefetch));
    CHECK(contains(error_of([&] {
                     for (const auto& b : failing) (void)b;
                   }),
                   "Failing: example 3 is unreadable"));
  }
}

TEST_CASE("nn/data: a CUDA target gets the same batches through pinned memory" *
          doctest::test_suite("cuda")) {
  auto data = numbered(45);
  for (bool prefetch : {false, true}) {
    CAPTURE(prefetch);
    auto opts = nn::DataLoaderOptions(8).shuffle(true).seed(3).prefetch(prefetch);
    nn::DataLoader cpu(data, opts), gpu(data, nn::DataLoaderOptions(opts).device(kCUDA)),
        gpu_generic(Wrapped(data), nn::DataLoaderOptions(opts).device(kCUDA));
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<std::vector<double>> want;
      for (const auto& b : cpu) want.push_back(b.data.to_vector<double>());
      for (nn::DataLoader* loader : {&gpu, &gpu_generic}) {
        size_t i = 0;
        for (const auto& b : *loader) {
          CHECK(b.data.is_cuda());
          CHECK(b.target.is_cuda());
          REQUIRE(i < want.size());
          CHECK(b.data.to_vector<double>() == want[i++]);
        }
        CHECK(i == want.size());
      }
    }
  }
}
