// multinomial: category indices drawn from each row of non-negative weights, from
// ember's counter-based generator (core/base/random.h). Every device samples on the
// host for now: the weights are copied to the CPU, drawn there, and the int64 result
// copied back (one synchronisation per call on CUDA); the same seed gives the same
// samples on every device. The meta device draws nothing (its result has the shape).
// With replacement: inverse-CDF sampling, one uniform per draw. Without: each
// category gets the key -log(u) / p (an exponential race: the order of the keys is
// that of drawing one at a time in proportion to p, without putting back), and the
// num_samples smallest keys win, in key order.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/alloc_site.h"
#include "core/base/random.h"
#include "core/device_services.h"
#include "core/ops.h"

namespace ember {

namespace {

// Checks row r of w (n weights) and returns its non-zero count.
int64_t check_row(const double* w, int64_t n, int64_t r) {
  double total = 0.0;
  int64_t nonzero = 0;
  for (int64_t i = 0; i < n; ++i) {
    EMBER_CHECK(std::isfinite(w[i]) && w[i] >= 0.0, "multinomial: probability ", w[i], " at row ",
                r, ", category ", i, " is not a finite non-negative number");
    total += w[i];
    nonzero += w[i] > 0.0 ? 1 : 0;
  }
  EMBER_CHECK(total > 0.0, "multinomial: row ", r, " of the probabilities sums to 0");
  return nonzero;
}

void draw_with_replacement(const double* w, int64_t n, int64_t k, uint64_t seed, uint64_t offset,
                           int64_t* out) {
  std::vector<double> cdf(static_cast<size_t>(n));
  std::partial_sum(w, w + n, cdf.begin());
  const double total = cdf.back();
  int64_t last = n - 1;  // the last category of non-zero weight
  while (w[last] == 0.0) --last;
  for (int64_t s = 0; s < k; ++s) {
    const double target = random_uniform(seed, offset + static_cast<uint64_t>(s)) * total;
    // The first category whose cumulative weight exceeds the target: never one of
    // weight 0 (its cumulative weight equals the one before it).
    const int64_t i = std::upper_bound(cdf.begin(), cdf.end(), target) - cdf.begin();
    out[s] = std::min(i, last);
  }
}

void draw_without_replacement(const double* w, int64_t n, int64_t k, uint64_t seed, uint64_t offset,
                              int64_t* out) {
  std::vector<double> key(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    // 1 - u is in (0, 1]: its log is finite.
    const double u = 1.0 - random_uniform(seed, offset + static_cast<uint64_t>(i));
    key[i] = w[i] > 0.0 ? -std::log(u) / w[i] : INFINITY;
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return key[a] < key[b]; });
  std::copy(order.begin(), order.begin() + k, out);
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  OpSite site("multinomial");
  check_defined("multinomial", probs, "probs");
  EMBER_CHECK(probs.dim() == 1 || probs.dim() == 2,
              "multinomial: probs must be 1-D or 2-D, got shape ", shape_str(probs.sizes()));
  EMBER_CHECK(is_floating(probs.dtype()), "multinomial: probs must be floating-point, got ",
              probs.dtype());
  EMBER_CHECK(num_samples > 0, "multinomial: num_samples must be positive, got ", num_samples);
  const int64_t rows = probs.dim() == 2 ? probs.size(0) : 1;
  const int64_t n = probs.size(-1);
  EMBER_CHECK(n > 0, "multinomial: probs of shape ", shape_str(probs.sizes()),
              " have no categories");
  EMBER_CHECK(replacement || num_samples <= n, "multinomial: cannot draw ", num_samples,
              " samples without replacement from ", n, " categories");
  check_not_capturing(probs.device(), "multinomial");
  const Shape out_shape = probs.dim() == 2 ? Shape{rows, num_samples} : Shape{num_samples};
  Generator& g = gen ? *gen : default_generator();
  const uint64_t per_row = static_cast<uint64_t>(replacement ? num_samples : n);
  if (!holds_data(probs.device())) {
    g.advance(static_cast<uint64_t>(rows) * per_row);
    return empty(out_shape, TensorOptions(kInt64).device(probs.device()));
  }
  const std::vector<double> w = probs.detach().to(kCPU, kFloat64).to_vector<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t nonzero = check_row(w.data() + r * n, n, r);
    EMBER_CHECK(replacement || num_samples <= nonzero, "multinomial: cannot draw ", num_samples,
                " samples without replacement from row ", r, ", which has ", nonzero,
                " categories of non-zero probability");
  }
  // Checked before the generator moves: a rejected call leaves it unchanged.
  const uint64_t offset = g.advance(static_cast<uint64_t>(rows) * per_row);
  Tensor out = empty(out_shape, TensorOptions(kInt64));
  int64_t* po = out.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const double* wr = w.data() + r * n;
    const uint64_t at = offset + static_cast<uint64_t>(r) * per_row;
    if (replacement)
      draw_with_replacement(wr, n, num_samples, g.seed(), at, po + r * num_samples);
    else
      draw_without_replacement(wr, n, num_samples, g.seed(), at, po + r * num_samples);
  }
  return out.to(probs.device());
}

}  // namespace ember
