// The CPU's im2col and col2im (kernel families im2col, col2im; kernel_families.h):
// plain loops over the (n, c) planes, split over the thread pool by planes (each
// plane's columns, or its pixels, belong to one chunk, so every value is computed
// by the same additions in the same order at any thread count). col2im sums in the
// compute type (double for float64, float otherwise) in (ki, kj) order, the order
// the composed path's index_add adds in.
#include <algorithm>
#include <type_traits>

#include "core/base/error.h"
#include "core/kernels/cpu_loops.h"
#include "core/kernels/cpu_parallel.h"
#include "core/kernels/registration.h"

namespace ember::kernels {

namespace {

void check_args(const char* op, const Im2colArgs& a) {
  EMBER_CHECK(a.dtype == DType::Float32 || a.dtype == DType::Float64 || a.dtype == DType::BFloat16,
              op, ": takes float32, float64 or bfloat16, got ", a.dtype);
  EMBER_CHECK(a.n >= 0 && a.c >= 0 && a.h >= 0 && a.w >= 0 && a.kh > 0 && a.kw > 0 && a.sh > 0 &&
                  a.sw > 0 && a.dh > 0 && a.dw > 0 && a.ph >= 0 && a.pw >= 0 && a.oh >= 0 &&
                  a.ow >= 0,
              op, ": bad geometry");
  EMBER_CHECK(a.col_image >= 0 && a.col_row >= 0, op, ": negative column strides (", a.col_image,
              ", ", a.col_row, ")");
}

// Where plane p = ni c + ci's first row starts in cols.
int64_t plane_offset(const Im2colArgs& a, int64_t p) {
  const int64_t ni = p / a.c, ci = p - ni * a.c;
  return ni * a.col_image + ci * a.kh * a.kw * a.col_row;
}

template <typename S>
void im2col_planes(const Im2colArgs& a, int64_t lo, int64_t hi) {
  const S* x = static_cast<const S*>(a.src);
  S* cols = static_cast<S*>(a.dst);
  S pad{};
  detail::store_from_double(&pad, a.pad_value);
  const int64_t plane = a.h * a.w;
  for (int64_t p = lo; p < hi; ++p) {
    const S* xp = x + p * plane;
    S* cp = cols + plane_offset(a, p);
    for (int64_t ki = 0; ki < a.kh; ++ki)
      for (int64_t kj = 0; kj < a.kw; ++kj) {
        S* row = cp + (ki * a.kw + kj) * a.col_row;
        for (int64_t oi = 0; oi < a.oh; ++oi) {
          const int64_t r = oi * a.sh - a.ph + ki * a.dh;
          S* out = row + oi * a.ow;
          if (r < 0 || r >= a.h) {
            std::fill(out, out + a.ow, pad);
            continue;
          }
          const S* in = xp + r * a.w;
          const int64_t c0 = kj * a.dw - a.pw;
          for (int64_t oj = 0; oj < a.ow; ++oj) {
            const int64_t c = oj * a.sw + c0;
            out[oj] = c >= 0 && c < a.w ? in[c] : pad;
          }
        }
      }
  }
}

template <typename S>
void col2im_planes(const Im2colArgs& a, int64_t lo, int64_t hi) {
  using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const S* cols = static_cast<const S*>(a.src);
  S* x = static_cast<S*>(a.dst);
  const int64_t plane = a.h * a.w;
  for (int64_t p = lo; p < hi; ++p) {
    const S* cp = cols + plane_offset(a, p);
    S* xp = x + p * plane;
    for (int64_t r = 0; r < a.h; ++r)
      for (int64_t c = 0; c < a.w; ++c) {
        C acc = 0;
        for (int64_t ki = 0; ki < a.kh; ++ki) {
          const int64_t ti = r + a.ph - ki * a.dh;  // oi * sh
          if (ti < 0 || ti % a.sh != 0 || ti / a.sh >= a.oh) continue;
          const int64_t oi = ti / a.sh;
          for (int64_t kj = 0; kj < a.kw; ++kj) {
            const int64_t tj = c + a.pw - kj * a.dw;
            if (tj < 0 || tj % a.sw != 0 || tj / a.sw >= a.ow) continue;
            acc += static_cast<C>(
                detail::load_as_double(cp + (ki * a.kw + kj) * a.col_row + oi * a.ow + tj / a.sw));
          }
        }
        detail::store_from_double(xp + r * a.w + c, static_cast<double>(acc));
      }
  }
}

template <typename F>
void over_planes(const Im2colArgs& a, int64_t per_plane, F&& f) {
  const int64_t planes = a.n * a.c;
  if (planes == 0) return;
  if (!cpu::fast_paths()) {
    f(int64_t{0}, planes);
    return;
  }
  const int64_t grain =
      std::max<int64_t>(1, cpu::kElementwiseGrain / std::max<int64_t>(per_plane, 1));
  cpu::parallel_for(planes, grain, f);
}

// im2col (to_columns) or col2im over the planes, for the floating dtypes.
void columns(const char* op, const Im2colArgs& a, bool to_columns) {
  check_args(op, a);
  const int64_t per_plane = a.kh * a.kw * (to_columns ? a.oh * a.ow : a.h * a.w);
  detail::dispatch_cpu(a.dtype, [&](auto tag) {
    using S = decltype(tag);
    if constexpr (std::is_floating_point_v<S> || std::is_same_v<S, BFloat16>)
      over_planes(a, per_plane, [&](int64_t lo, int64_t hi) {
        if (to_columns)
          im2col_planes<S>(a, lo, hi);
        else
          col2im_planes<S>(a, lo, hi);
      });
  });
}

void im2col(const Im2colArgs& a) {
  columns("im2col", a, true);
}

void col2im(const Im2colArgs& a) {
  columns("col2im", a, false);
}

}  // namespace

void register_cpu_conv(KernelFamilies& t) {
  t.im2col = &im2col;
  t.col2im = &col2im;
}

}  // namespace ember::kernels
