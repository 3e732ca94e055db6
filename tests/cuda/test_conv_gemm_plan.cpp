// The implicit GEMM's copies (cuda/kernels/sm90/conv_gemm_plan.h) replayed on the
// CPU: each TMA box the kernel's producer asks for, with TMA's element strides and
// zero fill emulated, fed to the GEMM tile by tile as the kernel does (row tiles of
// 128 pixels, K steps of 64, column blocks of 64, the weight gradient's K split), and
// the result held against the convolution computed from its definition. No GPU:
// this checks the box arithmetic, the part of the kernel a wrong index would break
// silently; the CUDA cases (suite cuda_sm90, test_ops_conv_gemm.cpp) run the kernel.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels/sm90/conv_gemm_plan.h"

using namespace ember::cuda::sm90;

namespace {

using V = std::vector<double>;

constexpr int kBM = 128;  // the kernel's row tile
constexpr int kBN = 128;  // its column tile (two 64-column boxes of the weight grad's B)
constexpr int kBK = 64;   // its K step (bf16: one 128-byte row)

V random_values(size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> d(-4, 4);  // small integers: every sum is exact
  V v(count);
  for (double& x : v) x = d(gen);
  return v;
}

// An NHWC image and TMA's tiled box copy from it: dims inner first (c, w, h, n),
// element strides {1, sw, sh, 1}, out-of-range elements read as zero. Returns the
// box as shared memory would hold it: one row of 64 channels per pixel, pixels in
// (n, h, w) order.
struct Image {
  int n, h, w, c;
  const V* data;
  double at(int ni, int hi, int wi, int ci) const {
    if (ni < 0 || ni >= n || hi < 0 || hi >= h || wi < 0 || wi >= w || ci < 0 || ci >= c)
      return 0.0;
    return (*data)[((static_cast<size_t>(ni) * h + hi) * w + wi) * c + ci];
  }
};

V tma_box(const Image& img, const ConvBoxes& b, BoxStart s) {
  unsigned dims[4], strides[4];
  conv_box_dims(b, dims, strides);
  const int pw = static_cast<int>(dims[1] / strides[1]),
            ph = static_cast<int>(dims[2] / strides[2]);
  const int pn = static_cast<int>(dims[3]);
  V box;
  box.reserve(static_cast<size_t>(pn * ph * pw * 64));
  for (int bn = 0; bn < pn; ++bn)
    for (int bh = 0; bh < ph; ++bh)
      for (int bw = 0; bw < pw; ++bw)
        for (int ch = 0; ch < static_cast<int>(dims[0]); ++ch)
          box.push_back(img.at(s.n + bn, s.h + bh * static_cast<int>(strides[2]),
                               s.w + bw * static_cast<int>(strides[1]), s.c + ch));
  return box;
}

// A 2-D TMA box from a row-major (rows, inner) matrix: rows [r0, r0 + rows_n),
// columns [k0, k0 + 64), zero outside.
V matrix_box(const V& m, int64_t rows, int64_t inner, int64_t r0, int rows_n, int64_t k0) {
  V box(static_cast<size_t>(rows_n) * 64, 0.0);
  for (int r = 0; r < rows_n; ++r)
    for (int k = 0; k < 64; ++k) {
      const int64_t rr = r0 + r, kk = k0 + k;
      if (rr < rows && kk < inner) box[static_cast<size_t>(r) * 64 + k] = m[rr * inner + kk];
    }
  return box;
}

struct Problem {
  ConvShape s;
  V x;   // NHWC (n, h, w, c)
  V w;   // (o, c, kh, kw), PyTorch's layout
  V dy;  // NHWC (n, oh, ow, o)
};

Problem make_problem(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t k, int64_t s,
                     int64_t p, int64_t d) {
  Problem pr;
  const int64_t oh = (h + 2 * p - d * (k - 1) - 1) / s + 1,
                ow = (w + 2 * p - d * (k - 1) - 1) / s + 1;
  pr.s = {n, c, h, w, o, k, k, s, s, p, p, d, d, oh, ow};
  pr.x = random_values(static_cast<size_t>(n * h * w * c), 1);
  pr.w = random_values(static_cast<size_t>(o * c * k * k), 2);
  pr.dy = random_values(static_cast<size_t>(n * oh * ow * o), 3);
  return pr;
}

double w_at(const Problem& p, int64_t o, int64_t c, int64_t ki, int64_t kj) {
  const ConvShape& s = p.s;
  return p.w[((o * s.c + c) * s.kh + ki) * s.kw + kj];
}

// f(ni, i, j, hi, wi, ki, kj) for every output pixel (ni, i, j) and tap (ki, kj)
// whose input pixel (hi, wi) lies inside the image: the convolution's terms.
template <typename F>
void for_each_term(const ConvShape& s, F&& f) {
  for (int64_t ni = 0; ni < s.n; ++ni)
    for (int64_t i = 0; i < s.oh; ++i)
      for (int64_t j = 0; j < s.ow; ++j)
        for (int64_t ki = 0; ki < s.kh; ++ki)
          for (int64_t kj = 0; kj < s.kw; ++kj) {
            const int64_t hi = i * s.sh - s.ph + ki * s.dh, wi = j * s.sw - s.pw + kj * s.dw;
            if (hi >= 0 && hi < s.h && wi >= 0 && wi < s.w) f(ni, i, j, hi, wi, ki, kj);
          }
}

// The definitions: y (n, o, oh, ow), d_x (n, c, h, w) (channels-first, as the kernel
// writes them), d_w (o, kh, kw, c).
V reference_y(const Problem& p) {
  const ConvShape& s = p.s;
  V y(static_cast<size_t>(s.n * s.oh * s.ow * s.o), 0.0);
  for_each_term(
      s, [&](int64_t ni, int64_t i, int64_t j, int64_t hi, int64_t wi, int64_t ki, int64_t kj) {
        for (int64_t o = 0; o < s.o; ++o)
          for (int64_t c = 0; c < s.c; ++c)
            y[((ni * s.o + o) * s.oh + i) * s.ow + j] +=
                p.x[((ni * s.h + hi) * s.w + wi) * s.c + c] * w_at(p, o, c, ki, kj);
      });
  return y;
}

V reference_dx(const Problem& p) {
  const ConvShape& s = p.s;
  V dx(static_cast<size_t>(s.n * s.h * s.w * s.c), 0.0);
  for_each_term(
      s, [&](int64_t ni, int64_t i, int64_t j, int64_t hi, int64_t wi, int64_t ki, int64_t kj) {
        for (int64_t o = 0; o < s.o; ++o)
          for (int64_t c = 0; c < s.c; ++c)
            dx[((ni * s.c + c) * s.h + hi) * s.w + wi] +=
                p.dy[((ni * s.oh + i) * s.ow + j) * s.o + o] * w_at(p, o, c, ki, kj);
      });
  return dx;
}

V reference_dw(const Problem& p) {
  const ConvShape& s = p.s;
  V dw(static_cast<size_t>(s.o * s.kh * s.kw * s.c), 0.0);
  for_each_term(
      s, [&](int64_t ni, int64_t i, int64_t j, int64_t hi, int64_t wi, int64_t ki, int64_t kj) {
        for (int64_t o = 0; o < s.o; ++o)
          for (int64_t c = 0; c < s.c; ++c)
            dw[((o * s.kh + ki) * s.kw + kj) * s.c + c] +=
                p.dy[((ni * s.oh + i) * s.ow + j) * s.o + o] *
                p.x[((ni * s.h + hi) * s.w + wi) * s.c + c];
      });
  return dw;
}

// The weight as the forward's B, (o, kh, kw, c), or the input grad's, (c, kh, kw, o).
V weight_rows(const Problem& p, bool by_output) {
  const ConvShape& s = p.s;
  const int64_t rows = by_output ? s.o : s.c, inner = by_output ? s.c : s.o;
  V out;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t ki = 0; ki < s.kh; ++ki)
      for (int64_t kj = 0; kj < s.kw; ++kj)
        for (int64_t e = 0; e < inner; ++e)
          out.push_back(by_output ? w_at(p, r, e, ki, kj) : w_at(p, e, r, ki, kj));
  return out;
}

// The forward or the input grad as the kernel runs it: A from the boxes (conv_a_box),
// B a 2-D matrix (rows, K) read in K steps; D (m, n) stored where the epilogue
// stores it (conv_out_offset: channels-first).
V run_a_boxes(const ConvShape& s, ConvPass pass, const V& image, const V& b_matrix) {
  ConvBoxes b{};
  REQUIRE(std::string(plan_conv_pass(s, pass, b)) == "");
  const ConvGemmSizes g = conv_gemm_sizes(s, pass);
  const Image img{b.n, b.h, b.w, b.c, &image};
  V d(static_cast<size_t>(g.m * g.n), 0.0);
  const int64_t kblocks = (g.k + kBK - 1) / kBK, mtiles = (g.m + kBM - 1) / kBM;
  for (int64_t mb = 0; mb < mtiles; ++mb)
    for (int64_t kb = 0; kb < kblocks; ++kb) {
      const V a = tma_box(img, b, conv_a_box(b, static_cast<int>(mb), kBM, static_cast<int>(kb)));
      REQUIRE(a.size() == static_cast<size_t>(kBM * kBK));
      const V bt = matrix_box(b_matrix, g.n, g.k, 0, static_cast<int>(g.n), kb * kBK);
      for (int r = 0; r < kBM; ++r) {
        const int64_t row = mb * kBM + r;
        if (row >= g.m) break;  // the epilogue's bound
        for (int64_t col = 0; col < g.n; ++col) {
          double acc = 0;
          for (int k = 0; k < kBK; ++k) acc += a[r * kBK + k] * bt[col * kBK + k];
          d[static_cast<size_t>(conv_out_offset(static_cast<int>(row), static_cast<int>(col),
                                                static_cast<int>(g.n), b.grid_h * b.grid_w))] +=
              acc;
        }
      }
    }
  return d;
}

// The weight grad: A = d_y (pixels, o) read M-major, B from the boxes (conv_b_box)
// per 64-column block, the K steps split in `splits` parts summed at the end.
V run_b_boxes(const ConvShape& s, const V& x, const V& dy, int splits) {
  ConvBoxes b{};
  REQUIRE(std::string(plan_conv_pass(s, ConvPass::WeightGrad, b)) == "");
  const ConvGemmSizes g = conv_gemm_sizes(s, ConvPass::WeightGrad);
  const Image img{b.n, b.h, b.w, b.c, &x};
  const int64_t kblocks = (g.k + kBK - 1) / kBK, ntiles = (g.n + kBN - 1) / kBN;
  const int64_t kper = (kblocks + splits - 1) / splits;
  std::vector<V> partial(static_cast<size_t>(splits), V(static_cast<size_t>(g.m * g.n), 0.0));
  for (int split = 0; split < splits; ++split)
    for (int64_t nb = 0; nb < ntiles; ++nb)
      for (int64_t kb = split * kper; kb < std::min(kblocks, (split + 1) * kper); ++kb) {
        // A: rows o, k = pixels [kb 64, kb 64 + 64): d_y's (pixels, o) box read transposed.
        const V a = matrix_box(dy, g.k, g.m, kb * kBK, kBK, 0);  // (64 pixels, o < 64)
        REQUIRE(g.m <= 64);
        for (int box = 0; box < kBN / 64; ++box) {
          const int col0 = static_cast<int>(nb * kBN + 64 * box);
          const V bt = tma_box(img, b, conv_b_box(b, col0, static_cast<int>(kb)));
          REQUIRE(bt.size() == static_cast<size_t>(kBK * 64));
          for (int64_t o = 0; o < g.m; ++o)
            for (int ch = 0; ch < 64; ++ch) {
              const int64_t col = col0 + ch;
              if (col >= g.n) continue;  // the epilogue's bound
              double acc = 0;
              for (int px = 0; px < kBK; ++px) acc += a[px * 64 + o] * bt[px * 64 + ch];
              partial[static_cast<size_t>(split)][o * g.n + col] += acc;
            }
        }
      }
  V d(static_cast<size_t>(g.m * g.n), 0.0);
  for (const V& part : partial)
    for (size_t i = 0; i < d.size(); ++i) d[i] += part[i];
  return d;
}

// The weight grad transposed (kConv 3, for 64 output channels): A = the boxes read
// M-major (rows r of kh kw c, two 64-row boxes a 128-row tile), B = d_y (pixels, o);
// D (r, o) stored where the epilogue stores it, (o, r) through conv_out_offset, each
// split into its own part, the parts summed.
V run_b_boxes_transposed(const ConvShape& s, const V& x, const V& dy, int splits) {
  ConvBoxes b{};
  REQUIRE(std::string(plan_conv_pass(s, ConvPass::WeightGrad, b)) == "");
  const ConvGemmSizes g = conv_gemm_sizes(s, ConvPass::WeightGrad);  // (o, R, pixels)
  const int64_t rows = g.n, outs = g.m;
  REQUIRE(outs <= 64);
  const Image img{b.n, b.h, b.w, b.c, &x};
  const int64_t kblocks = (g.k + kBK - 1) / kBK, mtiles = (rows + kBM - 1) / kBM;
  const int64_t kper = (kblocks + splits - 1) / splits;
  V d(static_cast<size_t>(rows * outs), 0.0);
  for (int split = 0; split < splits; ++split) {
    V part(d.size(), 0.0);
    for (int64_t mb = 0; mb < mtiles; ++mb)
      for (int64_t kb = split * kper; kb < std::min(kblocks, (split + 1) * kper); ++kb) {
        const V bt = matrix_box(dy, g.k, outs, kb * kBK, kBK, 0);  // (64 pixels, o)
        for (int box = 0; box < kBM / 64; ++box) {
          const int r0 = static_cast<int>(mb * kBM + 64 * box);
          const V a = tma_box(img, b, conv_b_box(b, r0, static_cast<int>(kb)));  // (px, 64 r)
          for (int ri = 0; ri < 64; ++ri) {
            const int64_t r = r0 + ri;
            if (r >= rows) break;  // the epilogue's bound
            for (int64_t o = 0; o < outs; ++o) {
              double acc = 0;
              for (int px = 0; px < kBK; ++px) acc += a[px * 64 + ri] * bt[px * 64 + o];
              part[static_cast<size_t>(conv_out_offset(static_cast<int>(r), static_cast<int>(o),
                                                       static_cast<int>(outs),
                                                       static_cast<int>(rows)))] += acc;
            }
          }
        }
      }
    for (size_t i = 0; i < d.size(); ++i) d[i] += part[i];
  }
  return d;
}

void check_equal(const V& got, const V& want, const char* what) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  double sum = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) ++bad;
    sum += std::abs(want[i]);
  }
  INFO(what);
  CHECK(bad == 0);
  CHECK(sum > 0);  // a problem whose result is all zeros would check nothing
}

}  // namespace

TEST_CASE(
    "conv_gemm_plan: the boxes of the forward, input grad and weight grad compute the "
    "convolution (CPU replay of the kernel's copies)") {
  struct Case {
    const char* name;
    int64_t n, c, h, w, o, k, s, p, d;
    bool input_grad;  // stride 1 only
  };
  const Case cases[] = {
      {"3x3 on 16x16 (8 rows a tile)", 2, 64, 16, 16, 64, 3, 1, 1, 1, true},
      {"3x3 on 8x8, tiles across images, a partial last tile", 3, 128, 8, 8, 64, 3, 1, 1, 1, true},
      {"1x1 on 32x32, 128 output channels", 1, 64, 32, 32, 128, 1, 1, 0, 1, true},
      {"dilation 2", 1, 64, 16, 16, 64, 3, 1, 2, 2, true},
      {"no padding, 5x5 kernel (a 4x4 grid)", 2, 64, 8, 8, 64, 5, 1, 0, 1, true},
      {"a grid wider than a tile", 1, 64, 2, 256, 64, 3, 1, 1, 1, true},
      {"stride 2 (forward and weight grad)", 2, 64, 32, 32, 64, 3, 2, 1, 1, false},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const Problem p = make_problem(c.n, c.c, c.h, c.w, c.o, c.k, c.s, c.p, c.d);
    check_equal(run_a_boxes(p.s, ConvPass::Forward, p.x, weight_rows(p, true)), reference_y(p),
                "forward");
    if (c.input_grad)
      check_equal(run_a_boxes(p.s, ConvPass::InputGrad, p.dy, weight_rows(p, false)),
                  reference_dx(p), "input grad");
    if (c.o <= 64)
      for (int splits : {1, 3, 7}) {
        check_equal(run_b_boxes(p.s, p.x, p.dy, splits), reference_dw(p), "weight grad");
        check_equal(run_b_boxes_transposed(p.s, p.x, p.dy, splits), reference_dw(p),
                    "weight grad transposed");
      }
  }
}

TEST_CASE("conv_gemm_plan: shapes the boxes cannot tile are refused, naming why") {
  auto why = [](ConvShape s, ConvPass pass) {
    ConvBoxes b{};
    return std::string(plan_conv_pass(s, pass, b));
  };
  // (n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow)
  const ConvShape ok{2, 64, 16, 16, 64, 3, 3, 1, 1, 1, 1, 1, 1, 16, 16};
  CHECK(why(ok, ConvPass::Forward) == "");
  ConvShape s = ok;
  s.c = 32;
  CHECK(why(s, ConvPass::Forward) == "input and output channels must be multiples of 64");
  s = ok;
  s.h = s.w = s.oh = s.ow = 12;  // 128 pixels are not whole rows of 12
  CHECK(why(s, ConvPass::Forward) == "the box's pixels are not a multiple of the grid's width");
  s = ok;
  s.oh = 12, s.h = 12;  // 12 rows of 16: a tile's 8 rows do not divide 12
  CHECK(why(s, ConvPass::Forward) == "the grid's height is not a multiple of the box's rows");
  s = ok;
  s.sh = s.sw = 2, s.oh = s.ow = 8;
  CHECK(why(s, ConvPass::Forward) == "");
  CHECK(why(s, ConvPass::InputGrad) == "the input gradient needs stride 1");
  s = ok;
  s.w = s.ow = 192;  // wider than a tile, not a multiple of it
  CHECK(why(s, ConvPass::Forward) == "the grid's width is not a multiple of the box's pixels");
}
